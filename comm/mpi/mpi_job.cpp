#include "comm/mpi/mpi_job.h"

#include <mpi.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include "comm/mpi/mpi_communicator.h"
#include "comm/mpi/mpi_error.h"

namespace adakv::comm {
namespace {

std::atomic<bool> g_job_created{false};

// Written once before the handler is installed; the handler only reads it.
char g_stop_message[160];
size_t g_stop_length = 0;

extern "C" void on_stop_signal(int) {
  ssize_t ignored = write(STDERR_FILENO, g_stop_message, g_stop_length);
  (void)ignored;
  _exit(143);
}

void install_stop_handler(int rank) {
  int length = std::snprintf(g_stop_message, sizeof g_stop_message,
                             "adakv rank %d: stopped by the launcher (another rank failed or "
                             "the job was cancelled)\n",
                             rank);
  g_stop_length = length > 0 ? static_cast<size_t>(length) : 0;
  struct sigaction action = {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
}

// OMPI_COMM_WORLD_LOCAL_RANK when mpirun set it (namespaces of a simulated cluster share one
// host name), else the rank among the processes that share this node's memory.
int find_local_rank(int rank, int size) {
  if (const char* env = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK")) {
    char* end = nullptr;
    long value = std::strtol(env, &end, 10);
    if (end != env && *end == '\0' && value >= 0 && value < size) return static_cast<int>(value);
  }
  MPI_Comm node;
  detail::check_mpi(
      MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node),
      "MPI_Comm_split_type", rank, size);
  int local_rank = 0;
  int code = MPI_Comm_rank(node, &local_rank);
  MPI_Comm_free(&node);
  detail::check_mpi(code, "MPI_Comm_rank", rank, size);
  return local_rank;
}

}  // namespace

bool MpiJob::launched_by_mpi() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMIX_RANK") || std::getenv("PMI_RANK");
}

MpiJob::MpiJob(int* argc, char*** argv) {
  if (g_job_created.exchange(true)) {
    throw std::logic_error("MpiJob: only one per process (MPI cannot be initialized twice)");
  }
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    detail::check_mpi(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided),
                      "MPI_Init_thread", -1, 0);
    initialized_here_ = true;
    if (provided < MPI_THREAD_FUNNELED) {
      MPI_Finalize();
      throw CommError("MPI_Init_thread: the MPI library does not support MPI_THREAD_FUNNELED");
    }
  }
  detail::check_mpi(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN),
                    "MPI_Comm_set_errhandler", -1, 0);
  int rank = 0, size = 1;
  detail::check_mpi(MPI_Comm_rank(MPI_COMM_WORLD, &rank), "MPI_Comm_rank", -1, 0);
  detail::check_mpi(MPI_Comm_size(MPI_COMM_WORLD, &size), "MPI_Comm_size", rank, 0);
  world_.rank = rank;
  world_.size = size;
  world_.tp_rank = rank;
  world_.tp_size = size;
  world_.local_rank = find_local_rank(rank, size);
  world_.device = -1;
  install_stop_handler(rank);
}

MpiJob::~MpiJob() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized_here_ && initialized && !finalized) MPI_Finalize();
}

std::unique_ptr<Communicator> MpiJob::communicator() const {
  return make_mpi_world_communicator();
}

void MpiJob::abort(int code) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

}  // namespace adakv::comm

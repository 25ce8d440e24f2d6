#include "launcher/job.h"

#include "comm/mpi/mpi_job.h"

namespace adakv::cli {
namespace {

struct JobState {
  std::unique_ptr<comm::MpiJob> mpi;
  std::unique_ptr<comm::Communicator> tp;
  comm::World world = comm::World::single();
};

JobState& state() {
  static JobState s;
  return s;
}

}  // namespace

Job::Job(int* argc, char*** argv) {
  if (!comm::MpiJob::launched_by_mpi()) return;
  auto& s = state();
  s.mpi = std::make_unique<comm::MpiJob>(argc, argv);
  s.world = s.mpi->world();
  s.tp = s.mpi->communicator();
}

Job::~Job() {
  auto& s = state();
  s.tp.reset();
  s.mpi.reset();
}

comm::Communicator* tp_group() {
  return state().tp.get();
}

comm::World job_world() {
  return state().world;
}

bool is_job_root() {
  return state().world.is_root();
}

}  // namespace adakv::cli

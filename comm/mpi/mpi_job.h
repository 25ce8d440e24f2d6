// The MPI bootstrap of one process: RAII over MPI_Init_thread / MPI_Finalize. Callers never
// see MPI types; mpi.h stays in comm/mpi/*.cpp.
//
// Preconditions: at most one MpiJob per process, ever (MPI cannot be initialized twice; a
// second MpiJob throws std::logic_error). Construction and communicator() are collective:
// every rank of the job calls them, in the same order. Only the thread that constructed the
// MpiJob makes MPI calls (MPI_THREAD_FUNNELED).
//
// Failure model (OpenMPI 4.1 has no recovery): MPI errors on the job's communicators return
// and become CommError; a rank that cannot go on exits non-zero and mpirun then stops the
// others with SIGTERM, which the MpiJob turns into a one-line message and exit code 143.
#pragma once

#include <memory>

#include "comm/communicator.h"
#include "comm/world.h"

namespace adakv::comm {

class MpiJob {
 public:
  // True when this process is a rank of an mpirun/srun job (OMPI_COMM_WORLD_SIZE, PMIX_RANK
  // or PMI_RANK set), so that plain runs never touch MPI.
  static bool launched_by_mpi();

  // MPI_Init_thread(MPI_THREAD_FUNNELED); MPI_COMM_WORLD errors return instead of aborting;
  // SIGTERM/SIGINT print "adakv rank R: stopped by the launcher ..." and _exit(143).
  MpiJob(int* argc, char*** argv);
  ~MpiJob();
  MpiJob(const MpiJob&) = delete;
  MpiJob& operator=(const MpiJob&) = delete;

  // rank, size; tp = the whole job; local_rank on this node; device -1 (the caller picks).
  World world() const { return world_; }

  // A communicator over a duplicate of MPI_COMM_WORLD (collective).
  std::unique_ptr<Communicator> communicator() const;

  // Ends the whole job with `code` (MPI_Abort); without MPI running, ends this process.
  [[noreturn]] static void abort(int code);

 private:
  World world_;
  bool initialized_here_ = false;
};

}  // namespace adakv::comm

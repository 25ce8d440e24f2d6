// Where this process stands in a job: a plain value, testable without MPI. Single-process
// runs use World::single(); the MPI bootstrap (comm/mpi/mpi_job.h) fills it from the job once
// at start-up, and every rank's runtime::Worker takes it.
#pragma once

namespace adakv::comm {

struct World {
  int rank = 0;        // global rank
  int size = 1;        // number of ranks
  int tp_rank = 0;     // rank inside the tensor-parallel group
  int tp_size = 1;     // ranks in the tensor-parallel group
  int pp_rank = 0;     // pipeline stage of this rank (comm/parallel_layout.h orders the ranks)
  int pp_size = 1;     // pipeline stages per replica
  int dp_rank = 0;     // data-parallel replica of this rank
  int dp_size = 1;     // data-parallel replicas
  int local_rank = 0;  // rank on this node (picks the GPU)
  int device = -1;     // GPU ordinal, -1 on the CPU backend

  static World single() { return World{}; }
  bool is_root() const { return rank == 0; }
  bool is_first_stage() const { return pp_rank == 0; }
  bool is_last_stage() const { return pp_rank == pp_size - 1; }
};

}  // namespace adakv::comm

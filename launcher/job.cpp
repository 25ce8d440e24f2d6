#include "launcher/job.h"

#include <stdexcept>
#include <string>

#include "comm/mpi/mpi_communicator.h"
#include "comm/mpi/mpi_job.h"
#include "comm/parallel_layout.h"

namespace adakv::cli {
namespace {

struct JobState {
  std::unique_ptr<comm::MpiJob> mpi;
  std::unique_ptr<comm::Communicator> tp;
  comm::World world = comm::World::single();
  // Built by job_groups() with replicas or pipeline stages: this rank's replica, its stage's
  // tensor-parallel group and the pipeline of its tensor-parallel rank.
  int pp = 0, dp = 0;
  std::unique_ptr<comm::Communicator> replica, stage_tp, pipe;
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
  s.pipe.reset();
  s.stage_tp.reset();
  s.replica.reset();
  s.tp.reset();
  s.mpi.reset();
}

comm::Communicator* tp_group() {
  return state().tp.get();
}

comm::World job_world() {
  return state().world;
}

JobGroups job_groups(int pp, int dp) {
  auto& s = state();
  if (s.pp != 0 && (s.pp != pp || s.dp != dp)) {
    throw std::logic_error("job_groups: the job is already split into " + std::to_string(s.dp) +
                           " replica(s) of " + std::to_string(s.pp) + " pipeline stage(s)");
  }
  const auto layout = comm::ParallelLayout::from_world(s.world.size, pp, dp);
  if (pp == 1 && dp == 1) {
    s.pp = s.dp = 1;
    return {{s.tp.get(), s.tp.get(), nullptr}, s.world};
  }
  if (s.pp == 0) {
    s.world = layout.place(s.world);
    const comm::World& w = s.world;
    // The replica: its ranks in global order. The stage's TP group: the tp consecutive ranks
    // of (dp_rank, pp_rank). The pipeline: the ranks of the replica with this tp_rank, ordered
    // by stage.
    if (dp > 1) s.replica = comm::make_mpi_split_communicator(w.dp_rank, w.rank);
    if (pp > 1) {
      s.stage_tp = comm::make_mpi_split_communicator(w.dp_rank * w.pp_size + w.pp_rank, w.tp_rank);
      s.pipe = comm::make_mpi_split_communicator(w.dp_rank * w.tp_size + w.tp_rank, w.pp_rank);
    }
    s.pp = pp;
    s.dp = dp;
  }
  comm::Communicator* job = dp > 1 ? s.replica.get() : s.tp.get();
  return {{job, pp > 1 ? s.stage_tp.get() : job, s.pipe.get()}, s.world};
}

bool is_job_root() {
  return state().world.is_root();
}

}  // namespace adakv::cli

// How a job's ranks split into data-parallel replicas, pipeline stages and tensor-parallel
// groups: a plain value, testable without MPI.
//
// Ranks are ordered TP fastest, then PP, then DP:
//   rank = (dp_rank * pp + pp_rank) * tp + tp_rank
// so a TP group is tp consecutive ranks. mpirun and srun fill a node's slots with consecutive
// ranks, hence a TP group stays inside a node whenever tp divides the ranks per node.
#pragma once

#include <string>
#include <vector>

#include "comm/world.h"

namespace adakv::comm {

struct ParallelLayout {
  int tp = 1;  // ranks in a tensor-parallel group (one pipeline stage of one replica)
  int pp = 1;  // pipeline stages per replica
  int dp = 1;  // data-parallel replicas

  int world_size() const { return tp * pp * dp; }

  // The layout of `world_size` ranks with `pp` stages and `dp` replicas; TP is what is left.
  // Throws std::invalid_argument naming the sizes when pp x dp does not divide world_size.
  static ParallelLayout from_world(int world_size, int pp, int dp);

  // World for `rank` (its tp/pp/dp coordinates; local_rank and device are left as given).
  World place(World world) const;

  int rank_of(int dp_rank, int pp_rank, int tp_rank) const {
    return (dp_rank * pp + pp_rank) * tp + tp_rank;
  }

  std::string describe() const;  // "TP 3 x PP 2 x DP 1 (6 ranks)"
};

// The first layer and one past the last of pipeline stage `stage` out of `stages`, for a model of
// `layers` layers: contiguous, the earlier stages take one more when the split is uneven.
struct LayerRange {
  int begin = 0;
  int end = 0;
  int size() const { return end - begin; }
  bool operator==(const LayerRange&) const = default;
};
LayerRange stage_layers(int layers, int stages, int stage);

}  // namespace adakv::comm

#include "comm/parallel_layout.h"

#include <stdexcept>

namespace adakv::comm {

ParallelLayout ParallelLayout::from_world(int world_size, int pp, int dp) {
  if (world_size < 1) throw std::invalid_argument("the job has no ranks");
  if (pp < 1)
    throw std::invalid_argument("pipeline parallel size must be >= 1, got " + std::to_string(pp));
  if (dp < 1)
    throw std::invalid_argument("data parallel size must be >= 1, got " + std::to_string(dp));
  if (world_size % (pp * dp) != 0) {
    throw std::invalid_argument(std::to_string(world_size) + " ranks do not split into " +
                                std::to_string(dp) + " data-parallel replica(s) of " +
                                std::to_string(pp) + " pipeline stage(s): pp x dp = " +
                                std::to_string(pp * dp) + " must divide the number of ranks");
  }
  return ParallelLayout{world_size / (pp * dp), pp, dp};
}

World ParallelLayout::place(World world) const {
  if (world.rank < 0 || world.rank >= world_size()) {
    throw std::invalid_argument("rank " + std::to_string(world.rank) + " is outside the layout " +
                                describe());
  }
  world.size = world_size();
  world.tp_size = tp;
  world.pp_size = pp;
  world.dp_size = dp;
  world.tp_rank = world.rank % tp;
  world.pp_rank = (world.rank / tp) % pp;
  world.dp_rank = world.rank / (tp * pp);
  return world;
}

std::string ParallelLayout::describe() const {
  return "TP " + std::to_string(tp) + " x PP " + std::to_string(pp) + " x DP " +
         std::to_string(dp) + " (" + std::to_string(world_size()) + " ranks)";
}

LayerRange stage_layers(int layers, int stages, int stage) {
  if (stages < 1 || stage < 0 || stage >= stages) {
    throw std::invalid_argument("pipeline stage " + std::to_string(stage) + " of " +
                                std::to_string(stages) + " does not exist");
  }
  if (layers < stages) {
    throw std::invalid_argument("a model of " + std::to_string(layers) + " layers cannot fill " +
                                std::to_string(stages) + " pipeline stages");
  }
  const int base = layers / stages, extra = layers % stages;
  LayerRange r;
  r.begin = stage * base + (stage < extra ? stage : extra);
  r.end = r.begin + base + (stage < extra ? 1 : 0);
  return r;
}

}  // namespace adakv::comm

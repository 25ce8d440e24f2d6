// --pp and --dp of the engine commands (generate, batch, serve, eval, profile, bench): how the
// job's ranks split into pipeline stages and data-parallel replicas; tensor parallelism takes
// what is left (ranks / (pp x dp)). Unset, each falls back to ADAKV_PP_SIZE / ADAKV_DP_SIZE
// (which `adakv launch` exports from the cluster config), then to 1.
#pragma once

#include <CLI/CLI.hpp>

namespace adakv::cli {

struct ParallelFlags {
  int pp = 0;  // 0: not given
  int dp = 0;

  void add_to(CLI::App* app);
  // Pipeline stages asked for. Throws std::invalid_argument for a value below 1, and for data
  // parallelism other than 1, which these commands do not build yet.
  int pipeline_stages() const;
};

}  // namespace adakv::cli

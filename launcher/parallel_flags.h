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
  // Pipeline stages and replicas asked for. Throw std::invalid_argument for a value below 1.
  int stages() const;
  int replicas() const;
  // stages() for the commands that run one engine: throws std::invalid_argument for replicas
  // other than 1.
  int pipeline_stages() const;
};

}  // namespace adakv::cli

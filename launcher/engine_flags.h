// The serving loop's flags, shared by batch and serve: --kv-pool-mb --max-num-seqs
// --max-num-batched-tokens --prefill-chunk --no-prefix-caching --kv-context-tail. The pool's
// default is a stated share of the memory available when the engine starts, split among the ranks
// of this node.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "kernels/ops.h"
#include "model/config.h"
#include "runtime/step_plan.h"

namespace adakv::cli {

// Share of MemAvailable the default pool takes, divided among the node's ranks.
inline constexpr double kDefaultPoolShare = 0.4;

struct EngineFlags {
  double kv_pool_mb = 0;  // 0: the default share
  size_t max_num_seqs = 64;
  size_t max_num_batched_tokens = 2048;
  size_t prefill_chunk = 512;
  bool no_prefix_caching = false;
  size_t context_tail = 1024;
  size_t repeat_piece = compression::kDefaultRepeatPiece;

  void add_to(CLI::App* app);
  // The loop's config for a rank holding `local` (its KV heads) with KV stored as `dtype`.
  // Throws std::invalid_argument naming the flag when a value cannot work.
  runtime::ServingConfig config(const model::ModelConfig& local, kernels::KvDtype dtype) const;
};

// The line that says what the loop holds: "KV pool: N blocks (M MiB per rank, DTYPE), ...".
std::string describe_pool(const runtime::ServingConfig& c, const model::ModelConfig& local,
                          const std::string& dtype);

}  // namespace adakv::cli

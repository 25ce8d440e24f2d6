// The KV-compression flags shared by generate, eval and bench (DESIGN.md, "The CLI"):
// --policy --budget --window --alpha --scope --rule --pooling --pool-kernel --pool-sink
// --pool-shift --gqa --lookahead --lookahead-weight --budget-scores --delta --b-min --preset
// --kv-dtype. A preset file gives the defaults; flags given on the command line override it.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "kernels/ops.h"
#include "runtime/compression/config.h"

namespace adakv::cli {

struct CompressionFlags {
  std::string preset, policy, budget, scope, rule, pooling, gqa, budget_scores, kv_dtype = "f32";
  double alpha = 0, lookahead_weight = 0;
  long window = 0, delta = 0, b_min = 0, pool_kernel = 0, pool_sink = 0, pool_shift = 0,
       lookahead = 0;
  CLI::App* app = nullptr;  // to ask which flags were given

  void add_to(CLI::App* app);
  // Preset (if any), then the flags. Throws std::invalid_argument naming the bad flag.
  compression::CompressionConfig config(const std::string& default_policy = "adakv") const;
  kernels::KvDtype dtype() const;
  // When --window was given: it must be shorter than the prompt (else the default window just
  // leaves short prompts uncompressed). Throws std::invalid_argument.
  void check_window(const compression::CompressionConfig& c, size_t prompt_tokens) const;
};

}  // namespace adakv::cli

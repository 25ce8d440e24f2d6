// The KV-compression flags shared by generate, batch, eval and bench:
// --policy --budget --min-keep --window --alpha --scope --rule --pooling --pool-kernel
// --pool-sink --pool-shift --gqa --lookahead --lookahead-weight --budget-scores --scoring
// --context-scoring --delta
// --b-min --preset --kv-dtype --decode-dots. A preset file gives the defaults; flags given on the
// command line override it. generate also starts from the model's own preset and a per-head floor
// (min_keep 512) when no --preset says otherwise; eval, profile and bench start from the official
// settings without a floor, so their published results stay reproducible.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "runtime/compression/config.h"

namespace adakv::cli {

struct CompressionFlags {
  std::string preset, policy, budget, scope, rule, pooling, gqa, budget_scores, scoring,
      context_scoring, reconstruct_keys, context_policy, kv_dtype = "bf16", decode_dots = "int16";
  double alpha = 0, lookahead_weight = 0;
  long window = 0, delta = 0, b_min = 0, pool_kernel = 0, pool_sink = 0, pool_shift = 0,
       lookahead = 0, min_keep = 0;
  // Set before add_to(). The floor when neither --min-keep nor the preset gives one, and
  // whether the model's own preset (configs/compression/<model>.yaml) applies when --preset
  // is not given: generate sets kGenerateMinKeep and true; eval, profile, bench leave 0, false.
  size_t default_min_keep = 0;
  bool model_preset = false;
  // batch, serve and bench batch: look-ahead stays off unless --lookahead is given. It holds
  // each prompt whole in the shared pool until it ends, and keeps a long prompt from being
  // prefilled layer by layer, so a server fits fewer sequences; at 20% it changed Ada-KV's
  // retrieval little (docs/experiments.md).
  bool serving = false;
  // Whether the command feeds a reconstruction after the prompt (eval passkey-multi): elsewhere
  // scoring reconstruct is refused.
  bool reconstructs = false;
  CLI::App* app = nullptr;  // to ask which flags were given

  void add_to(CLI::App* app);
  // Preset (if any), then the flags. Throws std::invalid_argument naming the bad flag.
  compression::CompressionConfig config(const std::string& default_policy = "adakv") const;
  // The same for a model that goes by `model_names` (compression::model_preset_names): when
  // model_preset is set and --preset is not given, its preset found in the configs folders
  // ($ADAKV_CONFIGS, else next to the executable, else the source tree) is the starting point.
  // `source` (if not null) says where the settings came from, for the settings line.
  compression::CompressionConfig config(const std::vector<std::string>& model_names,
                                        std::string* source) const;
  // The configs folders searched for presets by name and for the model's preset.
  static std::vector<std::string> config_dirs();

  kernels::KvDtype dtype() const;
  // When --window was given: it must be shorter than the prompt (else the default window just
  // leaves short prompts uncompressed). Throws std::invalid_argument.
  void check_window(const compression::CompressionConfig& c, size_t prompt_tokens) const;

 private:
  compression::CompressionConfig resolve(const std::vector<std::string>& model_names,
                                         const std::string& default_policy,
                                         std::string* source) const;
};

}  // namespace adakv::cli

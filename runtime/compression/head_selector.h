// Which prompt positions each KV head keeps under a compression policy, given the window scores:
// the per-head budgets (uniform for SnapKV, per layer for PyramidKV, Ada-KV's allocation over a
// gain matrix that the ranks of a HeadGroup exchange), then each head's top-scored prefix
// positions plus the whole observation window. It decides only; the cache moves the rows.
//
// Shapes, for an n-token prompt with window W = config.window and prefix = n - W:
//   one layer's scores:   [own kv heads][prefix], row-major (compression::score_observations);
//   every layer's scores: [layer] -> one layer's scores (scope global);
//   positions:            [own kv head] -> ascending prompt positions, the window's included.
// Budget scores (budget_scores = peak) have the shape of the scores and replace them in the
// gain matrix only; tokens are always picked by the scores.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "runtime/compression/config.h"
#include "runtime/compression/head_group.h"
#include "runtime/compression/report.h"

namespace adakv::compression {

class HeadSelector {
 public:
  // `config` must be valid (CompressionConfig::validate()) and check_scope() must accept it.
  // n_layers: the model's layers (pyramid budgets span them); kv_heads: this cache's own heads.
  HeadSelector(const CompressionConfig& config, size_t n_layers, size_t kv_heads, HeadGroup group);

  // Throws std::invalid_argument unless the scope is layer or the policy adakv or full.
  static void check_scope(const CompressionConfig& config);

  const CompressionConfig& config() const { return config_; }
  const HeadGroup& group() const { return group_; }

  // True when an n-token prompt loses tokens: the budget is below n and n exceeds the window.
  bool evicts(size_t n) const { return !config_.keeps_everything(n) && n > config_.window; }
  // True when the positions of an n-token prompt come from one allocation over every layer.
  bool selects_globally(size_t n) const { return config_.scope == Scope::kGlobal && evicts(n); }

  // Positions each head of `layer` keeps, for the layer's scores (may be null where the policy
  // reads none: full, streaming, or nothing evicted) and budget scores (null: the scores).
  // When it evicts, every policy but streaming records the layer's row of report.budgets
  // (sized [n_layers][model kv heads] on first use) and report.allocate_s; the Ada-KV ones
  // (adakv, ada-pyramid) exchange the gain matrix once (exchange_gains), so every rank must call in
  // step.
  std::vector<std::vector<uint32_t>> layer_positions(size_t layer, size_t n, const float* scores,
                                                     const float* budget_scores,
                                                     CompressionReport& report) const;
  // Requires selects_globally(n): positions [layer][kv head] from one allocation over every
  // layer and head (one exchange). budget_scores: per layer, empty where the scores serve.
  // Under pipeline stages the layers this cache does not hold (group.holds) have no scores and
  // get no positions; their rows of the gain matrix come from the other stages.
  std::vector<std::vector<std::vector<uint32_t>>> global_positions(
      size_t n, const std::vector<std::vector<float>>& scores,
      const std::vector<std::vector<float>>& budget_scores, CompressionReport& report) const;

 private:
  // Prefix budgets (window excluded) of this cache's heads, [layer in unit][kv head] flattened,
  // for the allocation unit of gain_scores.size() layers starting at first_layer
  // (gain_scores[i]: that layer's [kv heads][prefix] scores).
  // A null gain_scores[i] (a layer of another pipeline stage) leaves its rows to the exchange.
  std::vector<size_t> allocate(const std::vector<const float*>& gain_scores, size_t prefix,
                               size_t first_layer, CompressionReport& report,
                               bool across_stages = false) const;
  // One head's kept positions: its top `keep` prefix positions (ascending) plus the window.
  std::vector<uint32_t> kept_positions(const float* scores, size_t prefix, size_t keep,
                                       size_t n) const;

  CompressionConfig config_;
  size_t n_layers_;
  size_t kv_heads_;
  HeadGroup group_;
};

}  // namespace adakv::compression

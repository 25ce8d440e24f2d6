#include "runtime/compression/head_selector.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>

#include "runtime/compression/allocator.h"

namespace adakv::compression {

HeadSelector::HeadSelector(const CompressionConfig& config, size_t n_layers, size_t kv_heads,
                           HeadGroup group)
    : config_(config), n_layers_(n_layers), kv_heads_(kv_heads), group_(std::move(group)) {}

void HeadSelector::check_scope(const CompressionConfig& config) {
  if (config.scope == Scope::kGlobal && config.policy != Policy::kAdaKV &&
      config.policy != Policy::kFull) {
    throw std::invalid_argument(std::string("scope global applies to policy adakv, not ") +
                                to_string(config.policy));
  }
}

std::vector<std::vector<uint32_t>> HeadSelector::layer_positions(size_t layer, size_t n,
                                                                 const float* scores,
                                                                 const float* budget_scores,
                                                                 CompressionReport& report) const {
  const size_t W = config_.window;
  std::vector<std::vector<uint32_t>> positions(kv_heads_);
  if (!evicts(n)) {
    for (auto& p : positions) {
      for (size_t i = 0; i < n; ++i) p.push_back(static_cast<uint32_t>(i));
    }
    return positions;
  }
  if (config_.policy == Policy::kStreaming) {
    const size_t B = config_.budget_per_head(n);
    const size_t sink = std::min(config_.sink, B), recent = B - sink;
    for (auto& p : positions) {
      for (size_t i = 0; i < n; ++i) {
        if (i < sink || i >= n - recent) p.push_back(static_cast<uint32_t>(i));
      }
    }
    return positions;
  }
  const size_t prefix = n - W;
  const auto budgets = allocate({budget_scores ? budget_scores : scores}, prefix, layer, report);
  for (size_t g = 0; g < kv_heads_; ++g) {
    positions[g] = kept_positions(scores + g * prefix, prefix, budgets[g], n);
  }
  return positions;
}

std::vector<std::vector<std::vector<uint32_t>>> HeadSelector::global_positions(
    size_t n, const std::vector<std::vector<float>>& scores,
    const std::vector<std::vector<float>>& budget_scores, CompressionReport& report) const {
  if (!selects_globally(n)) throw std::logic_error("global_positions: not a global eviction");
  const size_t prefix = n - config_.window;
  std::vector<const float*> gain_scores(n_layers_);
  for (size_t l = 0; l < n_layers_; ++l) {
    if (!group_.holds(l)) continue;
    const bool peak = l < budget_scores.size() && !budget_scores[l].empty();
    gain_scores[l] = peak ? budget_scores[l].data() : scores[l].data();
  }
  const auto budgets = allocate(gain_scores, prefix, 0, report, /*across_stages=*/true);
  std::vector<std::vector<std::vector<uint32_t>>> positions(n_layers_);
  for (size_t l = 0; l < n_layers_; ++l) {
    if (!group_.holds(l)) {
      positions[l].resize(kv_heads_);
      continue;
    }
    for (size_t g = 0; g < kv_heads_; ++g) {
      positions[l].push_back(
          kept_positions(scores[l].data() + g * prefix, prefix, budgets[l * kv_heads_ + g], n));
    }
  }
  return positions;
}

std::vector<size_t> HeadSelector::allocate(const std::vector<const float*>& gain_scores,
                                           size_t prefix, size_t first_layer,
                                           CompressionReport& report, bool across_stages) const {
  const auto t0 = std::chrono::steady_clock::now();
  const size_t W = config_.window, n = prefix + W, Hkv = kv_heads_;
  const size_t layers = gain_scores.size();
  // Rows of the allocation: every KV head of the model in the covered layers.
  const size_t Hm = group_.model_kv_heads ? group_.model_kv_heads : Hkv;
  const size_t rows = layers * Hm;
  const size_t B = config_.budget_per_head(n);
  const Policy policy = config_.policy;
  std::vector<size_t> pyramid;
  if (policy == Policy::kPyramidKV || policy == Policy::kAdaPyramid) {
    pyramid = pyramid_layer_budgets(n_layers_, B, W, config_.pyramid_beta, n);
  }
  // Prefix budget (window excluded) of a row's layer before any per-head adaptation.
  auto layer_base = [&](size_t row) {
    const size_t b = pyramid.empty() ? B : pyramid[first_layer + row / Hm];
    return std::min(prefix, b > W ? b - W : 0);
  };
  std::vector<size_t> budgets(rows);
  if (policy == Policy::kSnapKV || policy == Policy::kPyramidKV) {
    for (size_t r = 0; r < rows; ++r) budgets[r] = layer_base(r);
  } else {
    const bool topk = config_.rule == Rule::kTopK;
    GainMatrix gains(rows, prefix, topk ? 1 : config_.delta);
    if (group_.contributes) {
      for (size_t l = 0; l < layers; ++l) {
        if (!gain_scores[l]) continue;
        for (size_t g = 0; g < Hkv; ++g) {
          gains.fill_row(l * Hm + group_.first_kv_head + g, gain_scores[l] + g * prefix);
        }
      }
    }
    exchange_gains(group_, gains.data, across_stages);
    const size_t base = layer_base(0);
    const size_t total = rows * base;
    budgets = topk ? allocate_topk(gains, total, base, config_.alpha)
                   : allocate_waterfill(gains, total, config_.b_min);
  }
  if (report.budgets.empty()) report.budgets.assign(n_layers_, std::vector<size_t>(Hm));
  std::vector<size_t> own(layers * Hkv);
  for (size_t l = 0; l < layers; ++l) {
    for (size_t h = 0; h < Hm; ++h) {
      report.budgets[first_layer + l][h] = std::min(budgets[l * Hm + h], prefix) + W;
    }
    for (size_t g = 0; g < Hkv; ++g) own[l * Hkv + g] = budgets[l * Hm + group_.first_kv_head + g];
  }
  report.allocate_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return own;
}

std::vector<uint32_t> HeadSelector::kept_positions(const float* scores, size_t prefix, size_t keep,
                                                   size_t n) const {
  auto positions = select_top_positions(scores, prefix, std::min(keep, prefix));
  for (size_t i = prefix; i < n; ++i) positions.push_back(static_cast<uint32_t>(i));
  return positions;
}

}  // namespace adakv::compression

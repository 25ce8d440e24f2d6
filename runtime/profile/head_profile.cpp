#include "runtime/profile/head_profile.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <stdexcept>
#include <string>

#include "runtime/compression/allocator.h"

namespace adakv::profile {
namespace {

// Scores as non-negative masses: attention scores are >= 0, so anything else is noise.
double mass(float s) {
  return s > 0.0f ? static_cast<double>(s) : 0.0;
}

double total_mass(const float* scores, size_t n) {
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) sum += mass(scores[i]);
  return sum;
}

// Positions in the last `fraction` of n: ceil(fraction * n), at least 1 when n > 0.
size_t tail_length(size_t n, double fraction) {
  const double want = std::ceil(std::clamp(fraction, 0.0, 1.0) * static_cast<double>(n));
  return std::clamp<size_t>(static_cast<size_t>(want), std::min<size_t>(n, 1), n);
}

}  // namespace

const char* to_string(HeadRole role) {
  switch (role) {
    case HeadRole::kRetrieval:
      return "retrieval";
    case HeadRole::kLocal:
      return "local";
    case HeadRole::kMixed:
      return "mixed";
  }
  return "?";
}

char role_letter(HeadRole role) {
  switch (role) {
    case HeadRole::kRetrieval:
      return 'R';
    case HeadRole::kLocal:
      return 'L';
    case HeadRole::kMixed:
      return 'M';
  }
  return '?';
}

HeadRole classify(double locality, double focus, const RoleThresholds& t) {
  if (locality >= t.local_min_locality) return HeadRole::kLocal;
  if (focus >= t.retrieval_min_focus) return HeadRole::kRetrieval;
  return HeadRole::kMixed;
}

double entropy_bits(const float* scores, size_t n) {
  if (n == 0) return 0.0;
  const double sum = total_mass(scores, n);
  if (!(sum > 0.0)) return std::log2(static_cast<double>(n));
  double h = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const double p = mass(scores[i]) / sum;
    if (p > 0.0) h -= p * std::log2(p);
  }
  return std::max(h, 0.0);
}

double tail_mass_share(const float* scores, size_t n, double fraction) {
  if (n == 0) return 0.0;
  const size_t tail = tail_length(n, fraction);
  const double sum = total_mass(scores, n);
  if (!(sum > 0.0)) return static_cast<double>(tail) / static_cast<double>(n);
  return std::min(total_mass(scores + (n - tail), tail) / sum, 1.0);
}

double mass_share(const float* scores, size_t n, const std::vector<uint32_t>& positions) {
  if (n == 0) return 0.0;
  const double sum = total_mass(scores, n);
  if (!(sum > 0.0)) return static_cast<double>(positions.size()) / static_cast<double>(n);
  double kept = 0.0;
  for (uint32_t p : positions) kept += mass(scores[p]);
  return std::min(kept / sum, 1.0);
}

double distant_focus(const float* scores, size_t n, double tail_fraction, double top_fraction,
                     size_t min_positions) {
  if (n == 0) return 0.0;
  const size_t distant = n - tail_length(n, tail_fraction);
  const double want = std::ceil(std::clamp(top_fraction, 0.0, 1.0) * static_cast<double>(distant));
  const size_t top = std::min(std::max(static_cast<size_t>(want), min_positions), distant);
  const double sum = total_mass(scores, n);
  if (!(sum > 0.0)) return static_cast<double>(top) / static_cast<double>(n);
  std::vector<double> masses(distant);
  for (size_t i = 0; i < distant; ++i) masses[i] = mass(scores[i]);
  std::partial_sort(masses.begin(), masses.begin() + static_cast<std::ptrdiff_t>(top), masses.end(),
                    std::greater<>());
  double focused = 0.0;
  for (size_t i = 0; i < top; ++i) focused += masses[i];
  return std::min(focused / sum, 1.0);
}

std::vector<uint32_t> kept_prefix_positions(const float* scores, size_t n, size_t budget,
                                            const compression::CompressionConfig& policy) {
  const size_t W = policy.window;
  const size_t prefix = n > W ? n - W : 0;
  budget = std::min(budget, n);
  if (policy.policy == compression::Policy::kStreaming) {
    // The same rule as PagedKvCache: `sink` first tokens plus the most recent ones.
    const size_t sink = std::min(policy.sink, budget), recent = budget - sink;
    std::vector<uint32_t> positions;
    for (size_t i = 0; i < prefix; ++i) {
      if (i < sink || i >= n - recent) positions.push_back(static_cast<uint32_t>(i));
    }
    return positions;
  }
  const size_t keep = std::min(budget > W ? budget - W : 0, prefix);
  return compression::select_top_positions(scores, prefix, keep);
}

HeadStats profile_head(const float* scores, size_t n, size_t budget,
                       const compression::CompressionConfig& policy, const RoleThresholds& t) {
  const size_t prefix = n > policy.window ? n - policy.window : 0;
  HeadStats s;
  s.budget = budget;
  const auto kept = kept_prefix_positions(scores, n, budget, policy);
  s.kept_prefix = kept.size();
  s.kept_fraction = prefix ? static_cast<double>(kept.size()) / static_cast<double>(prefix) : 1.0;
  s.retained_mass = prefix ? mass_share(scores, prefix, kept) : 1.0;
  s.entropy_bits = entropy_bits(scores, prefix);
  s.entropy_norm = prefix > 1 ? s.entropy_bits / std::log2(static_cast<double>(prefix)) : 0.0;
  // Content attention: the prefix past the sink (the whole prefix when that leaves nothing).
  const size_t sink = t.sink_tokens < prefix ? t.sink_tokens : 0;
  std::vector<uint32_t> sink_positions(sink);
  for (size_t i = 0; i < sink; ++i) sink_positions[i] = static_cast<uint32_t>(i);
  s.sink_mass = prefix ? mass_share(scores, prefix, sink_positions) : 0.0;
  const float* content = scores + sink;
  const size_t m = prefix - sink;
  s.locality = tail_mass_share(content, m, t.recent_fraction);
  s.focus = distant_focus(content, m, t.recent_fraction, t.focus_fraction, t.focus_min_positions);
  s.role = classify(s.locality, s.focus, t);
  return s;
}

size_t HeadProfile::total_budget() const {
  size_t total = 0;
  for (const auto& layer : heads) {
    for (const auto& h : layer) total += h.budget;
  }
  return total;
}

HeadProfile profile_heads(const std::vector<std::vector<float>>& scores,
                          const std::vector<std::vector<size_t>>& kept, size_t prompt_tokens,
                          const compression::CompressionConfig& policy,
                          const RoleThresholds& thresholds) {
  const size_t W = policy.window;
  if (prompt_tokens <= W) {
    throw std::invalid_argument("the prompt has " + std::to_string(prompt_tokens) +
                                " tokens; profiling needs more than the window (" +
                                std::to_string(W) + ")");
  }
  if (scores.size() != kept.size()) {
    throw std::invalid_argument("scores cover " + std::to_string(scores.size()) +
                                " layers but the kept counts " + std::to_string(kept.size()));
  }
  const size_t prefix = prompt_tokens - W;
  HeadProfile p;
  p.prompt_tokens = prompt_tokens;
  p.policy = policy;
  p.thresholds = thresholds;
  p.heads.resize(kept.size());
  for (size_t l = 0; l < kept.size(); ++l) {
    const size_t H = kept[l].size();
    if (scores[l].size() != H * prefix) {
      throw std::invalid_argument("layer " + std::to_string(l) + " has " +
                                  std::to_string(scores[l].size()) + " scores, expected " +
                                  std::to_string(H) + " heads x " + std::to_string(prefix));
    }
    for (size_t h = 0; h < H; ++h) {
      p.heads[l].push_back(profile_head(scores[l].data() + h * prefix, prompt_tokens, kept[l][h],
                                        policy, thresholds));
    }
  }
  return p;
}

nlohmann::json to_json(const HeadProfile& p) {
  using nlohmann::json;
  json heads = json::array(), budgets = json::array();
  double mass_sum = 0, kept_fraction = 0;
  size_t count = 0, roles[3] = {0, 0, 0};  // indexed by HeadRole
  for (const auto& layer : p.heads) {
    json row = json::array(), brow = json::array();
    for (const auto& h : layer) {
      row.push_back({{"budget", h.budget},
                     {"kept_prefix", h.kept_prefix},
                     {"kept_fraction", h.kept_fraction},
                     {"retained_mass", h.retained_mass},
                     {"entropy_bits", h.entropy_bits},
                     {"entropy_norm", h.entropy_norm},
                     {"sink_mass", h.sink_mass},
                     {"locality", h.locality},
                     {"focus", h.focus},
                     {"role", to_string(h.role)}});
      brow.push_back(h.budget);
      mass_sum += h.retained_mass;
      kept_fraction += h.kept_fraction;
      ++roles[static_cast<size_t>(h.role)];
      ++count;
    }
    heads.push_back(std::move(row));
    budgets.push_back(std::move(brow));
  }
  const double n = count ? static_cast<double>(count) : 1.0;
  const auto& c = p.policy;
  const size_t prefix = p.prompt_tokens > c.window ? p.prompt_tokens - c.window : 0;
  return {
      {"prompt_tokens", p.prompt_tokens},
      {"prefix", prefix},
      {"policy",
       {{"policy", compression::to_string(c.policy)},
        {"budget_per_head", c.budget_per_head(p.prompt_tokens)},
        {"window", c.window},
        {"alpha", c.alpha},
        {"scope", compression::to_string(c.scope)},
        {"rule", compression::to_string(c.rule)},
        {"pooling", compression::to_string(c.pooling)},
        {"pool_kernel", c.pool_kernel},
        {"pool_sink", c.pool_sink},
        {"pool_shift", c.pool_shift},
        {"lookahead", c.lookahead},
        {"lookahead_weight", c.lookahead_weight},
        {"gqa", compression::to_string(c.gqa)},
        {"budget_scores", compression::to_string(c.budget_scores)}}},
      {"thresholds",
       {{"sink_tokens", p.thresholds.sink_tokens},
        {"recent_fraction", p.thresholds.recent_fraction},
        {"focus_fraction", p.thresholds.focus_fraction},
        {"focus_min_positions", p.thresholds.focus_min_positions},
        {"local_min_locality", p.thresholds.local_min_locality},
        {"retrieval_min_focus", p.thresholds.retrieval_min_focus}}},
      {"layers", p.layers()},
      {"kv_heads", p.kv_heads()},
      {"budgets", std::move(budgets)},
      {"heads", std::move(heads)},
      {"summary",
       {{"total_budget", p.total_budget()},
        {"mean_budget", static_cast<double>(p.total_budget()) / n},
        {"mean_retained_mass", mass_sum / n},
        {"mean_kept_fraction", kept_fraction / n},
        {"roles", {{"retrieval", roles[0]}, {"local", roles[1]}, {"mixed", roles[2]}}}}},
      {"timing", {{"prefill_s", p.prefill_s}}},
  };
}

}  // namespace adakv::profile

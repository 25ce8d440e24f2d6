// Per-head profile of one prompt under a compression policy: what each KV head keeps (its
// budget), how much of its attention that keeps (retained mass), how spread its attention is
// (entropy), how much of it goes to the recent tail (locality), and a role label.
//
// Inputs are the window scores a recording prefill stores (PagedKvCache::scores(): per layer,
// [kv head][prefix], prefix = prompt length - window; max-pooled and GQA-aggregated, so they
// are the scores the policy ranks, not raw softmax probabilities) and the kept counts of the
// policy's compressed copy (window included). Every statistic below is taken over the prefix
// only: the window is always kept and never scored.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "runtime/compression/config.h"

namespace adakv::profile {

enum class HeadRole {
  kRetrieval,  // attention concentrated on a few positions, away from the recent tail
  kLocal,      // most attention on the recent tail
  kMixed,      // neither
};
const char* to_string(HeadRole role);  // "retrieval", "local", "mixed"
char role_letter(HeadRole role);       // 'R', 'L', 'M'

// The role rule, in one place. A head is
//   local      when locality >= local_min_locality,
//   retrieval  when not local, entropy_norm <= retrieval_max_entropy and
//              locality <= retrieval_max_locality,
//   mixed      otherwise.
// locality = share of the head's mass in the last `recent_fraction` of the prefix positions
// (a uniform head has locality = recent_fraction). entropy_norm = entropy / log2(prefix), so 1
// is uniform attention and 0 is all attention on one position.
struct RoleThresholds {
  double recent_fraction = 0.1;
  double local_min_locality = 0.5;
  double retrieval_max_entropy = 0.6;
  double retrieval_max_locality = 0.2;
};
HeadRole classify(double entropy_norm, double locality, const RoleThresholds& t);

struct HeadStats {
  size_t budget = 0;         // kept tokens, window included
  size_t kept_prefix = 0;    // kept prefix positions (budget minus the kept window)
  double kept_fraction = 0;  // kept_prefix / prefix
  double retained_mass = 0;  // share of the prefix score mass on kept positions, in [0, 1]
  double entropy_bits = 0;   // entropy of the normalised prefix scores
  double entropy_norm = 0;   // entropy_bits / log2(prefix), in [0, 1]
  double locality = 0;       // share of the mass in the recent tail, in [0, 1]
  HeadRole role = HeadRole::kMixed;
};

// Statistics of one score row s[0..n) normalised to p = s / sum(s). An all-zero row counts as
// uniform (entropy log2(n), locality = tail share of positions, every kept position retains
// 1/n). Negative and NaN scores count as zero.
double entropy_bits(const float* scores, size_t n);
// Share of the mass on the last ceil(fraction * n) positions (at least one when n > 0).
double tail_mass_share(const float* scores, size_t n, double fraction);
// Share of the mass on `positions` (each < n, no duplicates).
double mass_share(const float* scores, size_t n, const std::vector<uint32_t>& positions);

// Prefix positions (ascending) a head with `budget` kept tokens keeps under `policy`, for an
// n-token prompt with prefix = n - policy.window: streaming keeps the first `sink` positions and
// the most recent ones (the prefix part of them); every other policy keeps the highest scores,
// budget - window of them (capped at the prefix), ties to the lower position, exactly as
// compaction selects them.
std::vector<uint32_t> kept_prefix_positions(const float* scores, size_t n, size_t budget,
                                            const compression::CompressionConfig& policy);

// One head: scores [n - policy.window] of an n-token prompt, `budget` kept tokens.
HeadStats profile_head(const float* scores, size_t n, size_t budget,
                       const compression::CompressionConfig& policy, const RoleThresholds& t);

struct HeadProfile {
  size_t prompt_tokens = 0;
  compression::CompressionConfig policy;
  RoleThresholds thresholds;
  double prefill_s = 0;
  std::vector<std::vector<HeadStats>> heads;  // [layer][kv head]

  size_t layers() const { return heads.size(); }
  size_t kv_heads() const { return heads.empty() ? 0 : heads.front().size(); }
  size_t total_budget() const;
};

// scores: [layer] -> [kv head][prefix] (PagedKvCache::scores()); kept: [layer][kv head]
// (CompressionReport::kept). Throws std::invalid_argument when the shapes disagree or the
// prompt is not longer than the window.
HeadProfile profile_heads(const std::vector<std::vector<float>>& scores,
                          const std::vector<std::vector<size_t>>& kept, size_t prompt_tokens,
                          const compression::CompressionConfig& policy,
                          const RoleThresholds& thresholds = {});

// {prompt_tokens, prefix, policy{...}, thresholds{...}, layers, kv_heads, budgets[l][h],
//  heads[l][h]{budget, kept_prefix, kept_fraction, retained_mass, entropy_bits, entropy_norm,
//  locality, role}, summary{total_budget, mean_budget, mean_retained_mass, mean_kept_fraction,
//  roles{retrieval, local, mixed}}, timing{prefill_s}}.
nlohmann::json to_json(const HeadProfile& profile);

}  // namespace adakv::profile

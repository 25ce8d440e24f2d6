// Per-head profile of one prompt under a compression policy: what each KV head keeps (its
// budget), how much of its attention that keeps (retained mass), how spread its attention is
// (entropy), how much of it is parked on the first tokens (sink mass), goes to the recent tail
// (locality) or to a few distant positions (focus), and a role label.
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
  kRetrieval = 0,  // much attention on a few distant positions
  kLocal = 1,      // most attention on the recent tail
  kMixed = 2,      // neither
};
const char* to_string(HeadRole role);  // "retrieval", "local", "mixed"
char role_letter(HeadRole role);       // 'R', 'L', 'M'

// The role rule, in one place. Roles look at the head's "content" attention: the prefix
// without its first `sink_tokens` positions. Many heads park most of their attention on the
// first token (an attention sink: on SmolLM2 more than half of it in most layers past 11);
// that mass carries no content, and left in, it would make a sink head look like a head that
// retrieves one distant token. With the content mass normalised to 1:
//   locality = share on the last `recent_fraction` of the prefix positions (the recent tail);
//   focus    = share on the top `focus_fraction` of the distant positions (those before the
//              tail), at least `focus_min_positions` of them.
// A head is
//   local      when locality >= local_min_locality,
//   retrieval  when not local and focus >= retrieval_min_focus,
//   mixed      otherwise.
// Uniform attention has locality = recent_fraction and focus about focus_fraction. Focus is
// used instead of entropy because max-pooled scores spread every peak over `pool_kernel`
// positions and put a floor under the rest: on SmolLM2, the heads that read the hidden fact of
// tests/tools/make_demo_prompt.py have a normalised content entropy of 0.7-0.85, hardly below
// the 0.85-0.95 of diffuse heads, while their focus (0.28-0.43) stands out from theirs (< 0.2).
struct RoleThresholds {
  size_t sink_tokens = 4;  // the first token, widened by max-pooling (kernel 7: radius 3)
  double recent_fraction = 0.1;
  double focus_fraction = 0.01;
  size_t focus_min_positions = 8;
  double local_min_locality = 0.5;
  double retrieval_min_focus = 0.25;
};
HeadRole classify(double locality, double focus, const RoleThresholds& t);

struct HeadStats {
  size_t budget = 0;         // kept tokens, window included
  size_t kept_prefix = 0;    // kept prefix positions (budget minus the kept window)
  double kept_fraction = 0;  // kept_prefix / prefix
  double retained_mass = 0;  // share of the prefix score mass on kept positions, in [0, 1]
  double entropy_bits = 0;   // entropy of the normalised prefix scores (sink included)
  double entropy_norm = 0;   // entropy_bits / log2(prefix), in [0, 1]
  double sink_mass = 0;      // share of the prefix mass on the first sink_tokens positions
  double locality = 0;       // content attention: share on the recent tail, in [0, 1]
  double focus = 0;          // content attention: share on the top distant positions
  HeadRole role = HeadRole::kMixed;
};

// Statistics of one score row s[0..n) normalised to p = s / sum(s). An all-zero row counts as
// uniform (entropy log2(n), shares proportional to position counts). Negative and NaN scores
// count as zero.
double entropy_bits(const float* scores, size_t n);
// Share of the mass on the last ceil(fraction * n) positions (at least one when n > 0).
double tail_mass_share(const float* scores, size_t n, double fraction);
// Share of the mass on `positions` (each < n, no duplicates).
double mass_share(const float* scores, size_t n, const std::vector<uint32_t>& positions);
// Share of the mass on the max(min_positions, ceil(top_fraction * d)) highest scores among the
// d = n - ceil(tail_fraction * n) positions before the tail (all of them when fewer).
double distant_focus(const float* scores, size_t n, double tail_fraction, double top_fraction,
                     size_t min_positions);

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
//  sink_mass, locality, focus, role}, summary{total_budget, mean_budget, mean_retained_mass,
//  mean_kept_fraction, roles{retrieval, local, mixed}}, timing{prefill_s}}.
nlohmann::json to_json(const HeadProfile& profile);

}  // namespace adakv::profile

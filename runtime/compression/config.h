// How the KV cache of a prompt is compressed after prefill: the policy, the budget and the
// Ada-KV knobs. Defaults follow the official Ada-KV code (arXiv 2407.11550).
#pragma once

#include <cstddef>
#include <string>

namespace adakv::compression {

enum class Policy {
  kFull,        // keep everything
  kStreaming,   // `sink` first tokens + the most recent ones
  kSnapKV,      // the same budget for every head, top tokens by window score
  kPyramidKV,   // per-layer budgets decreasing linearly with depth, uniform across heads
  kAdaKV,       // per-head adaptive budgets inside each layer (the default)
  kAdaPyramid,  // pyramid layer budgets, then Ada-KV across the heads of each layer
};
enum class Scope { kLayer, kGlobal };       // allocate per layer, or across all layers at once
enum class Rule { kTopK, kWaterfill };      // Ada-KV allocation rule (allocator.h)
enum class Pooling { kMax, kAvg };          // smoothing of scores along the sequence
enum class GqaAggregation { kMean, kMax };  // query heads of a group -> one KV head score
enum class BudgetScores { kSum, kPeak };    // observed queries -> the scores that size budgets
// What a token's score measures (runtime/compression/output_aware.h):
//   window:       the attention the observed queries pay it (SnapKV / Ada-KV);
//   output-aware: that attention times the norm of its value through the head's output
//                 projection, ||W_o^h v||: how much the head's output moves with it (CriticalKV);
//   reconstruct:  the most attention it receives from one query of the context repeated after
//                 it (KVzip): the prompt is followed by "repeat the context" and the context,
//                 whose queries are observed and then rolled back. It needs the repeat fed
//                 after the prompt: a recording prefill (adakv eval passkey-multi) or a
//                 compressed context (CompressionConfig::context_scoring).
enum class Scoring { kWindow, kOutputAware, kReconstruct };
// Which keys a reconstruction query's attention is normalised over when its score is taken
// (the forward itself always attends over everything):
//   context: the whole context and the repeat so far; a key far from the repeat competes with
//            every nearer key, and a piece's queries score every key of the context;
//   piece:   the attention sink (the first 4 tokens), the context tokens the piece repeats and
//            the repeat so far (KVzip's chunked scoring); each piece scores only its own span,
//            so a span deep in a long context is ranked as sharply as the last one.
enum class ReconstructKeys { kContext, kPiece };
// How a compressed context's budgets are allocated (CompressionConfig::context_policy):
// kAsPolicy takes the request's policy; the others name an allocator that scores (streaming
// keeps the ends, and full nothing less, so neither allocates a context).
enum class ContextPolicy { kAsPolicy, kSnapKV, kPyramidKV, kAdaKV, kAdaPyramid };

// Look-ahead steps are decode steps with the full cache: a few dozen pay for themselves, more
// cost more than the prefill they serve.
inline constexpr size_t kMaxLookahead = 256;

// `adakv generate`'s per-head floor (CompressionConfig::min_keep) when neither a flag nor the
// preset sets one: a chat prompt of up to 512 tokens is kept whole, a longer one keeps at least
// 512 tokens per head on average. A ratio budget of a short prompt is smaller than the window
// and evicts the attention sink and the system line, which changes the answer; below 512
// tokens a chat prompt is mostly those, so it is kept whole, and the greedy answer stays the
// full cache's. Cost: at most 512 tokens x layers x KV heads x head_dim x 2 (K and V) x 4 bytes
// per sequence (22.5 MiB for the default model in f32), and nothing past 2560 tokens, where the
// default 20% budget is more than the floor.
inline constexpr size_t kGenerateMinKeep = 512;

struct CompressionConfig {
  Policy policy = Policy::kAdaKV;
  // Budget: average tokens kept per KV head, window included. Either a ratio of the prompt
  // (budget_tokens == 0) or an absolute count.
  double budget_ratio = 0.2;
  size_t budget_tokens = 0;
  // Floor of the average budget per head: budget_per_head(n) is at least min(n, min_keep), so
  // a prompt of at most min_keep tokens is kept whole and a longer one keeps at least min_keep
  // tokens per head on average, whatever the ratio or token budget. A 20% budget of a short
  // prompt is below the window and evicts the attention sink and the system line: the answer
  // changes. Policy full ignores it. 0 = no floor (official; the eval grids' setting).
  size_t min_keep = 0;
  size_t window = 32;  // observation window W: always kept, queries used for scoring
  double alpha = 0.2;  // Ada-KV safeguard floor
  Pooling pooling = Pooling::kMax;
  size_t pool_kernel = 7;  // odd
  // The first pool_sink prompt positions (the attention sink) are scored by their own
  // attention and left out of their neighbours' pooling. 0 = pool everything (official).
  size_t pool_sink = 0;
  // Moves each position's pooling span pool_shift tokens back (0 <= pool_shift <= kernel/2):
  // attention paid to a word then also lifts the pool_shift tokens after it, which is what
  // copying a number needs (the window reads the words before it). 0 = centred (official).
  size_t pool_shift = 0;
  GqaAggregation gqa = GqaAggregation::kMean;
  // Look-ahead pseudo-queries (LAQ, arXiv 2505.20334): after prefill the full cache decodes up
  // to `lookahead` greedy tokens; their queries join the window's in scoring, so a token the
  // answer will read (a digit of a number being copied, in a head the question never looks
  // through) is scored by the queries that read it. The cache then rolls back to the prompt
  // and generation starts from the compressed copy. Costs those decode steps and holds the
  // full cache of every layer until they end. 0 = off (official).
  size_t lookahead = 0;
  // Weight of the look-ahead queries' attention against the window's in the scores (> 0).
  // The heads that copy a number read it only through the look-ahead queries; counted one
  // query each beside the window's, they can lose their budget to Ada-KV at small budgets.
  // 1 = every observed query counts the same (LAQ).
  double lookahead_weight = 1;
  // Which scores Ada-KV's allocation reads (its gain matrix); tokens are always picked by the
  // summed scores. sum: those same scores (official). peak: each token's largest attention
  // from any one observed query (look-ahead ones scaled by lookahead_weight), pooled and
  // aggregated over the GQA group like the sum. A head that one query reads sharply (the copy
  // of a number by the look-ahead queries) then keeps the budget for it, where the sum over
  // all observed queries would spread that need thin and give the budget to heads that many
  // queries read a little.
  BudgetScores budget_scores = BudgetScores::kSum;
  // What the scores measure; the allocators (Ada-KV's, SnapKV's) read whichever is chosen.
  // output-aware needs the values of the scored keys, and reconstruct observes queries after
  // the prompt itself, so neither combines with look-ahead.
  Scoring scoring = Scoring::kWindow;
  // What scores a compressed context (a request's kv_compress_context), whose questions are
  // not known when it is compressed. The window then holds the context's own last tokens, which
  // say little about what later questions will read; reconstruction scores every token by how
  // much reading the context back needs it. Reconstruct costs about a second prefill of the
  // context, once per cached context, and holds the context's uncompressed cache plus one piece
  // of its repeat until it is scored (compression/reconstruction.h: a context too long to
  // follow with its whole repeat is repeated in pieces); a context that leaves no room for a
  // piece, or that is kept whole, is scored by its window.
  Scoring context_scoring = Scoring::kReconstruct;
  // See ReconstructKeys; only reconstruct scoring reads it.
  ReconstructKeys reconstruct_keys = ReconstructKeys::kContext;
  // How a compressed context's budgets are allocated: as `policy` (the default), or by another
  // allocator. A small model may need more of a context in its early layers than an even
  // share across layers leaves them (PyramidKV's layer budgets give them that; Ada-Pyramid
  // allocates head-wise inside them), while its questions, scored by the window, do not.
  // Applies only where `policy` compresses (not full).
  ContextPolicy context_policy = ContextPolicy::kAsPolicy;
  Scope scope = Scope::kLayer;
  Rule rule = Rule::kTopK;
  size_t delta = 16;         // waterfill tile, tokens
  size_t b_min = 32;         // waterfill starting budget per head, tokens (window excluded)
  double pyramid_beta = 20;  // PyramidKV: smallest layer gets (B - W) / beta
  size_t sink = 4;           // streaming: attention-sink tokens kept at the start

  // Average budget per KV head, window included, for an n-token prompt (>= min(window, n),
  // >= min(min_keep, n), <= n).
  size_t budget_per_head(size_t n) const;
  // True when this policy and budget keep every token of an n-token prompt.
  bool keeps_everything(size_t n) const;
  // The policy a compressed context is compacted with: `policy` under kAsPolicy or when
  // `policy` is full, else context_policy's.
  Policy context_allocation() const;
  // True when `other` scores tokens exactly as this config does (window, pooling, kernel, sink,
  // shift, GQA aggregation, look-ahead, budget scores, scoring): scores recorded under one serve
  // every policy of the other.
  bool same_scoring(const CompressionConfig& other) const;
  bool operator==(const CompressionConfig&) const = default;
  // Throws std::invalid_argument naming the bad field (negative or zero budget, ratio > 1,
  // alpha outside [0, 1], even or zero pool kernel, delta 0, beta <= 0, window 0; unless the
  // policy is full: a token budget smaller than the window, a streaming sink not below the
  // budget). With n > 0 also checks the prompt: the window must be shorter than the prompt
  // unless the policy is full.
  void validate(size_t n = 0) const;
};

// Names as used on the command line and in presets ("adakv", "layer", "maxpool", ...);
// parse_* ignore case and throw std::invalid_argument listing the accepted names. Pooling
// also accepts "max" and "avg".
const char* to_string(Policy p);
const char* to_string(Scope s);
const char* to_string(Rule r);
const char* to_string(Pooling p);
const char* to_string(GqaAggregation g);
const char* to_string(BudgetScores b);
const char* to_string(Scoring s);
const char* to_string(ContextPolicy p);
const char* to_string(ReconstructKeys k);
Policy parse_policy(const std::string& s);
Scope parse_scope(const std::string& s);
Rule parse_rule(const std::string& s);
Pooling parse_pooling(const std::string& s);
GqaAggregation parse_gqa(const std::string& s);
BudgetScores parse_budget_scores(const std::string& s);
Scoring parse_scoring(const std::string& s);
ContextPolicy parse_context_policy(const std::string& s);
ReconstructKeys parse_reconstruct_keys(const std::string& s);
// "0.2" or "20%" -> ratio in (0, 1]; "128" (integer >= 1, no dot) -> tokens per head. Throws
// std::invalid_argument for anything else ("", "abc", "-1", "0", "1.5", "150%").
void parse_budget(const std::string& s, CompressionConfig& c);

// Loads a YAML preset (configs/compression/*.yaml): keys policy, budget, min_keep, window,
// alpha, pooling, pool_kernel, pool_sink, pool_shift, gqa, lookahead, lookahead_weight,
// budget_scores, scoring, context_scoring, reconstruct_keys, context_policy, scope, rule, delta,
// b_min, pyramid_beta, sink; absent keys keep their value in `defaults` (the struct's defaults
// unless a command passes its own, e.g. generate's min_keep), an empty file gives `defaults`.
// Unreadable files, YAML syntax errors, unknown or duplicate keys and bad values throw
// std::invalid_argument naming the file (and the key); the result is validate()d.
CompressionConfig load_preset(const std::string& path, const CompressionConfig& defaults = {});

// One line of the settings in force: "policy adakv, budget 20%, min_keep 512, window 32,
// pooling avgpool/21 (sink 4, shift 3), gqa max, lookahead 16, budget_scores peak, scope layer".
std::string describe(const CompressionConfig& c);

}  // namespace adakv::compression

// What compressing one sequence's prompt did: the tokens each head kept, the budget vector the
// ranks agreed on, and where the time went.
#pragma once

#include <cstddef>
#include <vector>

namespace adakv::compression {

struct CompressionReport {
  size_t prompt_tokens = 0;
  // Tokens kept per [layer][kv head] after compaction, window included: this cache's heads.
  std::vector<std::vector<size_t>> kept;
  // The budget vector every rank computed: tokens kept per [layer][model kv head], window
  // included (equals `kept` on one rank). Empty until a compressing prefill.
  std::vector<std::vector<size_t>> budgets;
  double score_s = 0, allocate_s = 0, compact_s = 0;
  size_t lookahead_tokens = 0;    // pseudo-query tokens decoded before scoring
  double lookahead_s = 0;         // their decode steps (set by the engine)
  double decode_attention_s = 0;  // time in attention_paged after the prefill
};

// Prompt tokens kept per KV head, averaged over every head of the model (the budget vector, or
// this cache's heads before one exists); `prompt_tokens` when nothing was recorded.
inline double kept_tokens_per_head(const CompressionReport& r, size_t prompt_tokens) {
  const auto& rows = r.budgets.empty() ? r.kept : r.budgets;
  size_t sum = 0, heads = 0;
  for (const auto& layer : rows) {
    for (size_t k : layer) {
      sum += k;
      ++heads;
    }
  }
  return heads ? double(sum) / double(heads) : double(prompt_tokens);
}

}  // namespace adakv::compression

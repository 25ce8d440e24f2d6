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

}  // namespace adakv::compression

// Log probabilities of tokens under one row of logits, as the OpenAI API reports them
// (completions `logprobs`, chat `logprobs` + `top_logprobs`, completions `echo`).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace adakv::runtime {

struct TopLogprob {
  int32_t token = 0;
  double logprob = 0;  // natural log; -inf for a token the processing removed
};

// One position: the token there, its log probability, and the most likely alternatives.
struct TokenLogprob {
  int32_t token = 0;
  double logprob = 0;
  std::vector<TopLogprob> top;  // descending by logprob, the lower id first on ties
};

// log_softmax(logits)[token] and the top_n most likely tokens, in float64: max-shifted sum
// of exponentials, so a row whose logits are large or mostly -inf stays exact.
TokenLogprob token_logprob(const float* logits, size_t vocab, int32_t token, size_t top_n);

}  // namespace adakv::runtime

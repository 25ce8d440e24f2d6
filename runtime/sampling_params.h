// What a request asks of the sampler: temperature, truncation (top-k, top-p, min-p), a seed,
// OpenAI's and vLLM's penalties, logit biases and its stop-token conditions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace adakv::runtime {

struct SamplingParams {
  float temperature = 0.0f;  // 0: greedy (argmax)
  float top_p = 1.0f;        // nucleus mass in (0, 1]
  int top_k = 0;             // 0: no limit
  uint64_t seed = 0;
  // OpenAI's penalties over the tokens generated so far, in [-2, 2]: a token's logit loses
  // frequency_penalty x (times it was generated) + presence_penalty x (generated at all).
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  // vLLM's repetition penalty (> 0, 1 = none) over the prompt's and the generated tokens: a
  // positive logit is divided by it, a negative one multiplied.
  float repetition_penalty = 1.0f;
  // Drops tokens whose probability (at the temperature) is below min_p x the largest; [0, 1].
  float min_p = 0.0f;
  // (token id, bias in [-100, 100]) added to the token's logit before the penalties.
  std::vector<std::pair<int32_t, float>> logit_bias;
  // More tokens that end generation (even with ignore_eos); like the model's stop tokens, they
  // are in the output ids but not in the text.
  std::vector<int32_t> stop_token_ids;
  // No stop token can be sampled, and no stop string ends generation, before this many tokens.
  size_t min_tokens = 0;

  // Throws std::invalid_argument naming the bad field first ("top_p must be ...").
  void validate() const;
  // Also checks the token ids against a vocabulary of `vocab` tokens.
  void validate(size_t vocab) const;
  // True when the logits are changed before sampling (penalties, biases or a min_tokens mask).
  bool processes_logits() const;
};

}  // namespace adakv::runtime

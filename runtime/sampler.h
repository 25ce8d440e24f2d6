// Picks the next token from logits: the request's LogitsProcessor first (penalties, biases,
// the min_tokens mask), then greedy at temperature 0, otherwise softmax at the temperature
// restricted by top-k, min-p then top-p, drawn with a seeded generator.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "runtime/logits_processor.h"
#include "runtime/logprobs.h"
#include "runtime/sampling_params.h"

namespace adakv::runtime {

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);
  // `prompt` and `stop_ids` as LogitsProcessor takes them.
  Sampler(const SamplingParams& params, const std::vector<int32_t>& prompt,
          const std::vector<int32_t>& stop_ids);
  // Samples from `logits` [vocab] and counts the token as generated.
  int32_t sample(const float* logits, size_t vocab);
  // The log probability of `token` and the top_n most likely under the last sample()'s
  // processed row at temperature 1 (before temperature and truncation); that call's logits
  // must still be alive.
  TokenLogprob last_logprob(int32_t token, size_t top_n) const;

 private:
  // Greedy or a draw at the temperature from an already processed row.
  int32_t draw(const float* logits, size_t vocab);

  SamplingParams params_;
  LogitsProcessor processor_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> candidates_;
  const float* last_raw_ = nullptr;  // the last sample()'s logits
  bool last_processed_ = false;      // ... which the processor changed
  size_t last_vocab_ = 0;
};

// Index of the largest logit; the lowest index wins ties.
int32_t argmax(const float* logits, size_t n);

}  // namespace adakv::runtime

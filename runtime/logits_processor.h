// A request's changes to the logits before sampling, in vLLM's order: the min_tokens mask and
// the logit biases, then the repetition penalty (prompt and generated tokens), then OpenAI's
// frequency and presence penalties (generated tokens). Log probabilities are reported from
// the row this gives, as vLLM documents its choice.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "runtime/sampling_params.h"

namespace adakv::runtime {

class LogitsProcessor {
 public:
  // `prompt`: the tokens the repetition penalty counts besides the generated ones.
  // `stop_ids`: the ids masked (-inf) while fewer than params.min_tokens tokens are generated
  // (the model's stop tokens where they end generation; params.stop_token_ids are added).
  LogitsProcessor(const SamplingParams& params, const std::vector<int32_t>& prompt,
                  const std::vector<int32_t>& stop_ids);

  // The row to sample from: `logits` itself when nothing applies, else a processed copy
  // [vocab] valid until the next call.
  const float* apply(const float* logits, size_t vocab);
  // A token was generated (the penalties count it from the next apply on).
  void accept(int32_t token);
  // The last processed copy apply() returned.
  const float* row() const { return row_.data(); }

 private:
  SamplingParams params_;
  std::vector<int32_t> stop_ids_;
  std::unordered_map<int32_t, int> generated_counts_;
  std::unordered_map<int32_t, bool> seen_;  // prompt and generated tokens (repetition)
  size_t generated_ = 0;
  std::vector<float> row_;
};

}  // namespace adakv::runtime

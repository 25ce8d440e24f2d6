#include "runtime/logits_processor.h"

#include <algorithm>
#include <limits>

namespace adakv::runtime {

LogitsProcessor::LogitsProcessor(const SamplingParams& params, const std::vector<int32_t>& prompt,
                                 const std::vector<int32_t>& stop_ids)
    : params_(params), stop_ids_(stop_ids) {
  stop_ids_.insert(stop_ids_.end(), params.stop_token_ids.begin(), params.stop_token_ids.end());
  if (params_.repetition_penalty != 1.0f) {
    for (int32_t t : prompt) seen_[t] = true;
  }
}

void LogitsProcessor::accept(int32_t token) {
  ++generated_;
  if (params_.frequency_penalty != 0.0f || params_.presence_penalty != 0.0f) {
    ++generated_counts_[token];
  }
  if (params_.repetition_penalty != 1.0f) seen_[token] = true;
}

const float* LogitsProcessor::apply(const float* logits, size_t vocab) {
  const bool mask = generated_ < params_.min_tokens && !stop_ids_.empty();
  const bool penalties = params_.repetition_penalty != 1.0f || !generated_counts_.empty();
  if (!mask && !penalties && params_.logit_bias.empty()) return logits;
  row_.assign(logits, logits + vocab);
  auto in = [&](int32_t t) { return t >= 0 && size_t(t) < vocab; };
  if (mask) {
    for (int32_t t : stop_ids_) {
      if (in(t)) row_[t] = -std::numeric_limits<float>::infinity();
    }
  }
  for (const auto& [t, bias] : params_.logit_bias) {
    if (in(t)) row_[t] += bias;
  }
  if (params_.repetition_penalty != 1.0f) {
    const float r = params_.repetition_penalty;
    for (const auto& [t, unused] : seen_) {
      if (in(t)) row_[t] = row_[t] > 0 ? row_[t] / r : row_[t] * r;
    }
  }
  for (const auto& [t, count] : generated_counts_) {
    if (in(t)) row_[t] -= params_.frequency_penalty * float(count) + params_.presence_penalty;
  }
  return row_.data();
}

}  // namespace adakv::runtime

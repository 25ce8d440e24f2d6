#include "runtime/sampling_params.h"

#include <cmath>
#include <stdexcept>
#include <string>

namespace adakv::runtime {
namespace {

void in_range(const char* name, float x, float lo, float hi) {
  if (!(x >= lo && x <= hi)) {
    throw std::invalid_argument(std::string(name) + " must be in [" + std::to_string(lo) + ", " +
                                std::to_string(hi) + "], got " + std::to_string(x));
  }
}

}  // namespace

void SamplingParams::validate() const {
  if (!(temperature >= 0.0f) || !std::isfinite(temperature)) {
    throw std::invalid_argument("temperature must be a finite number >= 0, got " +
                                std::to_string(temperature));
  }
  if (!(top_p > 0.0f && top_p <= 1.0f)) {
    throw std::invalid_argument("top_p must be in (0, 1], got " + std::to_string(top_p));
  }
  if (top_k < 0) throw std::invalid_argument("top_k must be >= 0, got " + std::to_string(top_k));
  in_range("presence_penalty", presence_penalty, -2.0f, 2.0f);
  in_range("frequency_penalty", frequency_penalty, -2.0f, 2.0f);
  if (!(repetition_penalty > 0.0f) || !std::isfinite(repetition_penalty)) {
    throw std::invalid_argument("repetition_penalty must be a finite number > 0, got " +
                                std::to_string(repetition_penalty));
  }
  in_range("min_p", min_p, 0.0f, 1.0f);
  for (const auto& [id, bias] : logit_bias) {
    if (id < 0) throw std::invalid_argument("logit_bias names token id " + std::to_string(id));
    in_range("logit_bias", bias, -100.0f, 100.0f);
  }
  for (int32_t id : stop_token_ids) {
    if (id < 0) throw std::invalid_argument("stop_token_ids holds " + std::to_string(id));
  }
}

void SamplingParams::validate(size_t vocab) const {
  validate();
  for (const auto& [id, bias] : logit_bias) {
    if (size_t(id) >= vocab) {
      throw std::invalid_argument("logit_bias names token id " + std::to_string(id) +
                                  ", outside the vocabulary of " + std::to_string(vocab));
    }
  }
  for (int32_t id : stop_token_ids) {
    if (size_t(id) >= vocab) {
      throw std::invalid_argument("stop_token_ids holds " + std::to_string(id) +
                                  ", outside the vocabulary of " + std::to_string(vocab));
    }
  }
}

bool SamplingParams::processes_logits() const {
  return presence_penalty != 0.0f || frequency_penalty != 0.0f || repetition_penalty != 1.0f ||
         !logit_bias.empty() || min_tokens > 0;
}

}  // namespace adakv::runtime

#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace adakv::runtime {

int32_t argmax(const float* logits, size_t n) {
  // The largest value by a vectorised reduction, then the first block holding it; NaNs (never
  // chosen, as by the scalar scan) make the reduction's result NaN or leave it alone, and a
  // NaN result takes the scalar scan.
  if (n == 0 || std::isnan(logits[0])) return 0;
  float top = logits[0];
#pragma omp simd reduction(max : top)
  for (size_t i = 1; i < n; ++i) top = std::max(top, logits[i]);
  constexpr size_t kBlock = 64;
  for (size_t b = 0; b < n && !std::isnan(top); b += kBlock) {
    const size_t e = std::min(n, b + kBlock);
    int hit = 0;
#pragma omp simd reduction(| : hit)
    for (size_t i = b; i < e; ++i) hit |= logits[i] == top;
    if (!hit) continue;
    for (size_t i = b; i < e; ++i) {
      if (logits[i] == top) return static_cast<int32_t>(i);
    }
  }
  size_t best = 0;
  for (size_t i = 1; i < n; ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return static_cast<int32_t>(best);
}

Sampler::Sampler(const SamplingParams& params) : Sampler(params, {}, {}) {}

Sampler::Sampler(const SamplingParams& params, const std::vector<int32_t>& prompt,
                 const std::vector<int32_t>& stop_ids)
    : params_(params), processor_(params, prompt, stop_ids), rng_(params.seed) {
  params_.validate();
}

TokenLogprob Sampler::last_logprob(int32_t token, size_t top_n) const {
  if (!last_raw_) throw std::logic_error("last_logprob() before sample()");
  // The processed row is the processor's own buffer (found anew: a Sampler may have moved).
  const float* row = last_processed_ ? processor_.row() : last_raw_;
  return token_logprob(row, last_vocab_, token, top_n);
}

int32_t Sampler::sample(const float* raw, size_t vocab) {
  const float* logits = processor_.apply(raw, vocab);
  last_raw_ = raw;
  last_processed_ = logits != raw;
  last_vocab_ = vocab;
  const int32_t token = draw(logits, vocab);
  processor_.accept(token);
  return token;
}

int32_t Sampler::draw(const float* logits, size_t vocab) {
  if (params_.temperature == 0.0f) return argmax(logits, vocab);

  candidates_.resize(vocab);
  for (size_t i = 0; i < vocab; ++i) candidates_[i] = {logits[i], static_cast<int32_t>(i)};
  auto by_logit = [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  size_t keep = vocab;
  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < vocab) {
    keep = static_cast<size_t>(params_.top_k);
    std::partial_sort(candidates_.begin(), candidates_.begin() + keep, candidates_.end(), by_logit);
  } else {
    std::sort(candidates_.begin(), candidates_.end(), by_logit);
  }
  // Softmax at the temperature over the kept candidates (sorted, so [0] is the max).
  const float max_logit = candidates_[0].first;
  double total = 0;
  std::vector<double> probs(keep);
  for (size_t i = 0; i < keep; ++i) {
    probs[i] = std::exp((candidates_[i].first - max_logit) / params_.temperature);
    total += probs[i];
  }
  // Min-p: the candidates at least min_p times as likely as the most likely (probs[0] = 1).
  if (params_.min_p > 0.0f) {
    size_t n = 1;
    while (n < keep && probs[n] >= double(params_.min_p)) ++n;
    keep = n;
    total = 0;
    for (size_t i = 0; i < keep; ++i) total += probs[i];
  }
  // Nucleus: the smallest prefix whose mass reaches top_p (at least one token).
  if (params_.top_p < 1.0f) {
    double mass = 0;
    size_t n = 0;
    while (n < keep) {
      mass += probs[n] / total;
      ++n;
      if (mass >= params_.top_p) break;
    }
    keep = n;
    total = 0;
    for (size_t i = 0; i < keep; ++i) total += probs[i];
  }
  std::uniform_real_distribution<double> uniform(0.0, total);
  double r = uniform(rng_);
  for (size_t i = 0; i < keep; ++i) {
    r -= probs[i];
    if (r <= 0) return candidates_[i].second;
  }
  return candidates_[keep - 1].second;
}

}  // namespace adakv::runtime

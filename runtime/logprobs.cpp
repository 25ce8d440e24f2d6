#include "runtime/logprobs.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace adakv::runtime {

TokenLogprob token_logprob(const float* logits, size_t vocab, int32_t token, size_t top_n) {
  if (token < 0 || size_t(token) >= vocab) {
    throw std::out_of_range("token " + std::to_string(token) + " is outside the vocabulary");
  }
  double top = -std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < vocab; ++i) top = std::max(top, double(logits[i]));
  double sum = 0;
  for (size_t i = 0; i < vocab; ++i) sum += std::exp(double(logits[i]) - top);
  // Every logit -inf (nothing left to sample): every token is impossible.
  const double lse = std::isfinite(top) ? top + std::log(sum) : top;
  auto lp = [&](size_t i) {
    return std::isfinite(lse) ? double(logits[i]) - lse : -std::numeric_limits<double>::infinity();
  };
  TokenLogprob out;
  out.token = token;
  out.logprob = lp(size_t(token));
  top_n = std::min(top_n, vocab);
  if (top_n == 0) return out;
  std::vector<int32_t> ids(vocab);
  for (size_t i = 0; i < vocab; ++i) ids[i] = int32_t(i);
  std::partial_sort(ids.begin(), ids.begin() + long(top_n), ids.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  for (size_t i = 0; i < top_n; ++i) out.top.push_back({ids[i], lp(size_t(ids[i]))});
  return out;
}

}  // namespace adakv::runtime

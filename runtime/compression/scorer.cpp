#include "runtime/compression/scorer.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "kernels/ops.h"

namespace adakv::compression {

void pool1d(const float* in, float* out, size_t n, size_t kernel, Pooling pooling, size_t shift) {
  const ptrdiff_t half = static_cast<ptrdiff_t>(kernel / 2);
  const ptrdiff_t back = half + static_cast<ptrdiff_t>(shift);
  const ptrdiff_t ahead = half - static_cast<ptrdiff_t>(shift);
  for (ptrdiff_t i = 0; i < static_cast<ptrdiff_t>(n); ++i) {
    const ptrdiff_t lo = std::max<ptrdiff_t>(0, i - back);
    const ptrdiff_t hi = std::min<ptrdiff_t>(static_cast<ptrdiff_t>(n) - 1, i + ahead);
    if (pooling == Pooling::kMax) {
      float m = in[lo];
      for (ptrdiff_t j = lo + 1; j <= hi; ++j) m = std::max(m, in[j]);
      out[i] = m;
    } else {
      float s = 0;
      for (ptrdiff_t j = lo; j <= hi; ++j) s += in[j];
      out[i] = s / static_cast<float>(kernel);
    }
  }
}

namespace {

// Pooling along the sequence and aggregation over each GQA group: [Hq][n_keys] observed
// attention -> [Hkv][prefix] scores. Clobbers the sink positions of `mass`.
std::vector<float> pool_and_aggregate(std::vector<float>& mass, size_t n_keys, size_t prefix,
                                      size_t Hq, size_t Hkv, const CompressionConfig& c) {
  const size_t group = Hq / Hkv;
  std::vector<float> pooled(Hq * prefix), scores(Hkv * prefix);
  const size_t sink = std::min(c.pool_sink, prefix);
  for (size_t h = 0; h < Hq; ++h) {
    float* row = mass.data() + h * n_keys;
    float* out = pooled.data() + h * prefix;
    // Most heads park most of their attention on the first token. Pooled with the rest, that
    // one peak would lift its kernel/2 neighbours above every real score of the head: they
    // would be kept in every head and, for Ada-KV, decide the budgets.
    const std::vector<float> sink_mass(row, row + sink);
    std::fill(row, row + sink, 0.0f);
    pool1d(row, out, prefix, c.pool_kernel, c.pooling, c.pool_shift);
    std::copy(sink_mass.begin(), sink_mass.end(), out);
  }
  for (size_t g = 0; g < Hkv; ++g) {
    float* out = scores.data() + g * prefix;
    for (size_t j = 0; j < prefix; ++j) {
      float agg = c.gqa == GqaAggregation::kMax ? pooled[g * group * prefix + j] : 0.0f;
      for (size_t r = 0; r < group; ++r) {
        const float v = pooled[(g * group + r) * prefix + j];
        agg = c.gqa == GqaAggregation::kMax ? std::max(agg, v) : agg + v;
      }
      out[j] = c.gqa == GqaAggregation::kMax ? agg : agg / static_cast<float>(group);
    }
  }
  return scores;
}

}  // namespace

std::vector<float> score_observations(const float* q_obs, size_t q_stride, const float* k,
                                      size_t k_stride, size_t n_keys, size_t n_obs, size_t Hq,
                                      size_t Hkv, size_t Dh, const CompressionConfig& c,
                                      std::vector<float>* peak_scores, kernels::Backend& backend) {
  if (n_obs == 0 || n_obs >= n_keys) {
    throw std::invalid_argument("score_observations: need 1 <= observed queries < keys");
  }
  const size_t prefix = n_keys - n_obs;
  const float scale = 1.0f / std::sqrt(static_cast<float>(Dh));
  // Weighted look-ahead: the look-ahead queries (all after the first window ones) are summed
  // apart and scaled, and the window's, which see only the prompt's keys, added on the prefix.
  const bool weighted = c.lookahead_weight != 1.0 && n_obs > c.window;
  const size_t first = weighted ? c.window : 0;
  std::vector<float> mass(Hq * n_keys), peak(peak_scores ? Hq * n_keys : 0);
  float* peak_out = peak_scores ? peak.data() : nullptr;
  backend.window_attention_mass(mass.data(), q_obs + first * q_stride, q_stride, k, k_stride,
                                n_keys, n_obs - first, Hq, Hkv, Dh, scale, peak_out);
  if (weighted) {
    const size_t n_prompt = n_keys - (n_obs - c.window);
    std::vector<float> window_mass(Hq * n_prompt), window_peak(peak_out ? Hq * n_prompt : 0);
    backend.window_attention_mass(window_mass.data(), q_obs, q_stride, k, k_stride, n_prompt,
                                  c.window, Hq, Hkv, Dh, scale,
                                  peak_out ? window_peak.data() : nullptr);
    const auto w = static_cast<float>(c.lookahead_weight);
    for (size_t h = 0; h < Hq; ++h) {
      for (size_t j = 0; j < prefix; ++j) {
        const size_t i = h * n_keys + j, iw = h * n_prompt + j;
        mass[i] = window_mass[iw] + w * mass[i];
        if (peak_out) peak[i] = std::max(window_peak[iw], w * peak[i]);
      }
    }
  }
  if (peak_scores) *peak_scores = pool_and_aggregate(peak, n_keys, prefix, Hq, Hkv, c);
  return pool_and_aggregate(mass, n_keys, prefix, Hq, Hkv, c);
}

std::vector<float> score_layer(const float* q, size_t q_stride, const float* k, size_t k_stride,
                               size_t n, size_t Hq, size_t Hkv, size_t Dh,
                               const CompressionConfig& c, std::vector<float>* peak_scores,
                               kernels::Backend& backend) {
  const size_t W = c.window;
  if (W == 0 || W >= n) throw std::invalid_argument("score_layer: need 1 <= window < prompt");
  return score_observations(q + (n - W) * q_stride, q_stride, k, k_stride, n, W, Hq, Hkv, Dh, c,
                            peak_scores, backend);
}

}  // namespace adakv::compression

#include "runtime/compression/scorer.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "kernels/ops.h"

namespace adakv::compression {

void pool1d(const float* in, float* out, size_t n, size_t kernel, Pooling pooling, size_t shift) {
  kernels::pool1d(in, out, n, kernel, pooling == Pooling::kMax, shift);
}

namespace {

kernels::ScorePooling score_pooling(const CompressionConfig& c) {
  kernels::ScorePooling p;
  p.sink = c.pool_sink;
  p.kernel = c.pool_kernel;
  p.max_pool = c.pooling == Pooling::kMax;
  p.shift = c.pool_shift;
  p.gqa_max = c.gqa == GqaAggregation::kMax;
  return p;
}

// Pooling along the sequence and aggregation over each GQA group on the backend, then the one
// download of the layer: [Hq][n_keys] observed attention -> [Hkv][prefix] scores on the host.
std::vector<float> pool_and_download(kernels::Backend& backend, const float* mass, size_t n_keys,
                                     size_t prefix, size_t Hq, size_t Hkv,
                                     const CompressionConfig& c) {
  std::vector<float> scores(Hkv * prefix);
  if (scores.empty()) return scores;
  const kernels::Buffer out = backend.allocate(scores.size() * sizeof(float));
  backend.pool_scores(out.as<float>(), mass, n_keys, prefix, Hq, Hkv, score_pooling(c));
  backend.download(scores.data(), out.data(), scores.size() * sizeof(float));
  return scores;
}

// mass[i] *= weights[i] over [Hq][n_keys]: through the host, as the scores leave it anyway.
void weigh_mass(kernels::Backend& backend, float* mass, const std::vector<float>& weights) {
  std::vector<float> host(weights.size());
  backend.download(host.data(), mass, host.size() * sizeof(float));
  for (size_t i = 0; i < host.size(); ++i) host[i] *= weights[i];
  backend.upload(mass, host.data(), host.size() * sizeof(float));
}

}  // namespace

std::vector<float> score_observations(const float* q_obs, size_t q_stride, const float* k,
                                      size_t k_stride, size_t n_keys, size_t n_obs, size_t Hq,
                                      size_t Hkv, size_t Dh, const CompressionConfig& c,
                                      std::vector<float>* peak_scores, kernels::Backend& backend,
                                      const std::vector<float>* key_weights) {
  if (n_obs == 0 || n_obs >= n_keys) {
    throw std::invalid_argument("score_observations: need 1 <= observed queries < keys");
  }
  const size_t prefix = n_keys - n_obs;
  const float scale = 1.0f / std::sqrt(static_cast<float>(Dh));
  // Weighted look-ahead: the look-ahead queries (all after the first window ones) are summed
  // apart and scaled, and the window's, which see only the prompt's keys, added on the prefix.
  const bool weighted = c.lookahead_weight != 1.0 && n_obs > c.window;
  const size_t first = weighted ? c.window : 0;
  const size_t mass_bytes = Hq * n_keys * sizeof(float);
  const kernels::Buffer mass = backend.allocate(mass_bytes);
  const kernels::Buffer peak = peak_scores ? backend.allocate(mass_bytes) : kernels::Buffer();
  float* peak_out = peak_scores ? peak.as<float>() : nullptr;
  backend.window_attention_mass(mass.as<float>(), q_obs + first * q_stride, q_stride, k, k_stride,
                                n_keys, n_obs - first, Hq, Hkv, Dh, scale, peak_out);
  if (weighted) {
    const size_t n_prompt = n_keys - (n_obs - c.window);
    const size_t window_bytes = Hq * n_prompt * sizeof(float);
    const kernels::Buffer window_mass = backend.allocate(window_bytes);
    const kernels::Buffer window_peak =
        peak_out ? backend.allocate(window_bytes) : kernels::Buffer();
    backend.window_attention_mass(window_mass.as<float>(), q_obs, q_stride, k, k_stride, n_prompt,
                                  c.window, Hq, Hkv, Dh, scale,
                                  peak_out ? window_peak.as<float>() : nullptr);
    backend.blend_scores(mass.as<float>(), peak_out, window_mass.as<float>(),
                         peak_out ? window_peak.as<float>() : nullptr, Hq, n_keys, n_prompt, prefix,
                         static_cast<float>(c.lookahead_weight));
  }
  if (key_weights) {
    if (key_weights->size() != Hq * n_keys) {
      throw std::invalid_argument("score_observations: key weights must be [Hq][n_keys]");
    }
    weigh_mass(backend, mass.as<float>(), *key_weights);
    if (peak_out) weigh_mass(backend, peak_out, *key_weights);
  }
  if (peak_scores) {
    *peak_scores = pool_and_download(backend, peak_out, n_keys, prefix, Hq, Hkv, c);
  }
  return pool_and_download(backend, mass.as<float>(), n_keys, prefix, Hq, Hkv, c);
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

// Ada-KV scoring after the window's attention mass: the weighted blend of the look-ahead
// queries' mass with the window's, the smoothing along the sequence and the aggregation over each
// GQA group. The arithmetic (its order and float types) is that of the scorer it replaces, so
// scores, and the tokens they keep, stay bit for bit the same.
#include <algorithm>
#include <vector>

#include "kernels/backend.h"
#include "kernels/ops.h"

namespace adakv::kernels {

void pool1d(const float* in, float* out, size_t n, size_t kernel, bool max_pool, size_t shift) {
  const ptrdiff_t half = static_cast<ptrdiff_t>(kernel / 2);
  const ptrdiff_t back = half + static_cast<ptrdiff_t>(shift);
  const ptrdiff_t ahead = half - static_cast<ptrdiff_t>(shift);
  for (ptrdiff_t i = 0; i < static_cast<ptrdiff_t>(n); ++i) {
    const ptrdiff_t lo = std::max<ptrdiff_t>(0, i - back);
    const ptrdiff_t hi = std::min<ptrdiff_t>(static_cast<ptrdiff_t>(n) - 1, i + ahead);
    if (max_pool) {
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

Status blend_scores(float* mass, float* peak, const float* window_mass, const float* window_peak,
                    size_t Hq, size_t n_keys, size_t n_window, size_t prefix, float weight,
                    Stream) {
  if (prefix > n_keys || prefix > n_window) return Status::kInvalidArgument;
  if ((peak == nullptr) != (window_peak == nullptr)) return Status::kInvalidArgument;
  if (Hq == 0 || prefix == 0) return Status::kOk;
  if (!mass || !window_mass) return Status::kInvalidArgument;
  for (size_t h = 0; h < Hq; ++h) {
    for (size_t j = 0; j < prefix; ++j) {
      const size_t i = h * n_keys + j, iw = h * n_window + j;
      mass[i] = window_mass[iw] + weight * mass[i];
      if (peak) peak[i] = std::max(window_peak[iw], weight * peak[i]);
    }
  }
  return Status::kOk;
}

Status pool_scores(float* scores, const float* mass, size_t n_keys, size_t prefix, size_t Hq,
                   size_t Hkv, const ScorePooling& pooling, Stream) {
  if (Hkv == 0 || Hq % Hkv != 0 || prefix > n_keys) return Status::kInvalidArgument;
  if (pooling.kernel == 0 || pooling.shift > pooling.kernel / 2) return Status::kInvalidArgument;
  if (Hq == 0 || prefix == 0) return Status::kOk;
  if (!scores || !mass) return Status::kInvalidArgument;
  const size_t group = Hq / Hkv;
  const size_t sink = std::min(pooling.sink, prefix);
  // Every head is pooled before any score is written, so scores may overwrite mass.
  std::vector<float> row(prefix), pooled(Hq * prefix);
  for (size_t h = 0; h < Hq; ++h) {
    const float* in = mass + h * n_keys;
    float* out = pooled.data() + h * prefix;
    // The sink keeps its own mass and is zeros to the pooling of the others: one peak on the
    // first token would otherwise lift its kernel/2 neighbours above every real score.
    std::fill(row.begin(), row.begin() + sink, 0.0f);
    std::copy(in + sink, in + prefix, row.begin() + sink);
    pool1d(row.data(), out, prefix, pooling.kernel, pooling.max_pool, pooling.shift);
    std::copy(in, in + sink, out);
  }
  const bool gqa_max = pooling.gqa_max;
  for (size_t g = 0; g < Hkv; ++g) {
    float* out = scores + g * prefix;
    for (size_t j = 0; j < prefix; ++j) {
      float agg = gqa_max ? pooled[g * group * prefix + j] : 0.0f;
      for (size_t r = 0; r < group; ++r) {
        const float v = pooled[(g * group + r) * prefix + j];
        agg = gqa_max ? std::max(agg, v) : agg + v;
      }
      out[j] = gqa_max ? agg : agg / static_cast<float>(group);
    }
  }
  return Status::kOk;
}

}  // namespace adakv::kernels

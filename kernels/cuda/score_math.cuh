// The per-element math of the CUDA scoring kernels (score_ops.cu), as __host__ __device__
// functions so that tests/gpu/device_math_scoring.cu runs the very same code on the host against
// the CPU twins (kernels/cpu/score_pooling.cpp, window_scores.cpp).
//
// pool_scores and blend_scores are bit for bit the CPU's: the same float operations in the same
// order. Each rounding step is spelled out (mul_rn, add_rn, div_rn, fmaf) so that neither nvcc
// nor the host compiler fuses or reorders it. Where the CPU twin has a + b * c, GCC compiles it
// at -march=native with its default -ffp-contract=fast (which -std=c++20 keeps for C++) into
// one fma, so the math here is fmaf there: the blend's window_mass + weight * mass, and the
// window mass's sum of probabilities.
//
// window_attention_mass is split into per-chunk softmax statistics, their merge and the summed
// probabilities; the functions below fix which keys and chunks each window row sees and how the
// pieces combine. Its exp and sums differ from the CPU's in the last bits (tolerance).
#pragma once

#include <math.h>

#include <cstddef>

#include "kernels/backend.h"
#include "kernels/cuda/rounding.cuh"

namespace adakv::kernels::cuda {

// ---- Rounding steps that no compiler contracts ------------------------------------------------

// std::max(a, b) to the bit (NaNs and signed zeros included): b only when a < b.
__host__ __device__ inline float max_like_std(float a, float b) {
  return a < b ? b : a;
}

// ---- blend_scores -----------------------------------------------------------------------------

// mass[i] <- window_mass[iw] + weight * mass[i], in one rounding like the CPU's contracted loop.
__host__ __device__ inline float blend_mass(float window_mass, float weight, float mass) {
  return fmaf(weight, mass, window_mass);
}

// peak[i] <- max(window_peak[iw], weight * peak[i]).
__host__ __device__ inline float blend_peak(float window_peak, float weight, float peak) {
  return max_like_std(window_peak, mul_rn(weight, peak));
}

// ---- pool_scores ------------------------------------------------------------------------------

// The span [lo, hi] that position i of a row of n (>= 1) pools: [i - kernel/2 - shift,
// i + kernel/2 - shift] clipped to [0, n), so lo <= i <= hi (shift <= kernel / 2).
struct PoolSpan {
  ptrdiff_t lo, hi;
};

__host__ __device__ inline PoolSpan pool_span(size_t i, size_t n, size_t kernel, size_t shift) {
  const ptrdiff_t half = static_cast<ptrdiff_t>(kernel / 2);
  const ptrdiff_t back = half + static_cast<ptrdiff_t>(shift);
  const ptrdiff_t ahead = half - static_cast<ptrdiff_t>(shift);
  const ptrdiff_t at = static_cast<ptrdiff_t>(i), last = static_cast<ptrdiff_t>(n) - 1;
  return PoolSpan{at - back < 0 ? 0 : at - back, at + ahead < last ? at + ahead : last};
}

// Entry j of the row that is pooled: the sinks (j < sink) are zeros to their neighbours' pooling.
__host__ __device__ inline float pool_input(const float* row, ptrdiff_t j, size_t sink) {
  return static_cast<size_t>(j) < sink ? 0.0f : row[j];
}

// Position i (< prefix) of one head's row of mass after pooling: a sink keeps its own mass, the
// others pool [lo, hi] (max from row[lo] on; average from 0 in order, over `kernel` so that the
// clipped padding counts as zeros), the CPU's pool1d over the sink-zeroed row.
__host__ __device__ inline float pooled_mass(const float* row, size_t i, size_t prefix,
                                             const ScorePooling& pooling) {
  if (i < pooling.sink) return row[i];
  const PoolSpan span = pool_span(i, prefix, pooling.kernel, pooling.shift);
  if (pooling.max_pool) {
    float m = pool_input(row, span.lo, pooling.sink);
    for (ptrdiff_t j = span.lo + 1; j <= span.hi; ++j) {
      m = max_like_std(m, pool_input(row, j, pooling.sink));
    }
    return m;
  }
  float s = 0.0f;
  for (ptrdiff_t j = span.lo; j <= span.hi; ++j) s = add_rn(s, pool_input(row, j, pooling.sink));
  return div_rn(s, static_cast<float>(pooling.kernel));
}

// scores[g][j] of pool_scores: the pooled rows of the group's heads g * group .. g * group +
// group - 1 (rows of mass n_keys floats apart) at position j, maxed or summed in head order and
// averaged. Requires group >= 1 and j < prefix <= n_keys.
__host__ __device__ inline float pool_score(const float* mass, size_t n_keys, size_t prefix,
                                            size_t group, size_t g, size_t j,
                                            const ScorePooling& pooling) {
  const float* rows = mass + g * group * n_keys;
  const float first = pooled_mass(rows, j, prefix, pooling);
  float agg = pooling.gqa_max ? first : 0.0f;
  for (size_t r = 0; r < group; ++r) {
    const float v = r == 0 ? first : pooled_mass(rows + r * n_keys, j, prefix, pooling);
    agg = pooling.gqa_max ? max_like_std(agg, v) : add_rn(agg, v);
  }
  return pooling.gqa_max ? agg : div_rn(agg, static_cast<float>(group));
}

// ---- window_attention_mass --------------------------------------------------------------------

// Keys per chunk of the window kernels (one thread each): softmax statistics are formed per
// chunk and merged, so the result depends only on n, never on the launch.
inline constexpr unsigned kWindowKeys = 128;

// Window row i (0-based; position first + i, first = n - W) sees keys 0 .. first + i.
__host__ __device__ inline bool key_visible(size_t j, size_t first, size_t i) {
  return j <= first + i;
}

// The first window row that sees key j0 (later rows see it too).
__host__ __device__ inline size_t first_row_seeing(size_t j0, size_t first) {
  return j0 > first ? j0 - first : 0;
}

// The last chunk holding a key that window row i sees.
__host__ __device__ inline size_t last_chunk_seen(size_t first, size_t i) {
  return (first + i) / kWindowKeys;
}

// A window query, pre-scaled like the CPU's before its dot products.
__host__ __device__ inline float scaled_query(float q, float scale) {
  return mul_rn(q, scale);
}

// One step of a dot product over the head dimension, in increasing d.
__host__ __device__ inline float dot_step(float acc, float q_scaled, float k) {
  return fmaf(q_scaled, k, acc);
}

// One chunk's share of a row's softmax: the largest logit among the row's keys in the chunk
// and sum exp(logit - max) over them.
struct SoftmaxPartial {
  float max, sum;
};

// A row's softmax over all its keys: its largest logit and 1 / sum exp(logit - max).
struct SoftmaxStats {
  float max, inv_sum;
};

// The chunks' partials 0 .. count-1 (count >= 1, each with at least one key) merged in chunk
// order: each chunk's sum rescaled to the row's maximum.
__host__ __device__ inline SoftmaxStats merge_partials(const SoftmaxPartial* partial,
                                                       size_t count) {
  float m = partial[0].max;
  for (size_t c = 1; c < count; ++c) m = max_like_std(m, partial[c].max);
  float sum = 0.0f;
  for (size_t c = 0; c < count; ++c) sum = fmaf(partial[c].sum, expf(partial[c].max - m), sum);
  return SoftmaxStats{m, div_rn(1.0f, sum)};
}

// exp(logit - max) of a key in a row of statistics `stats`, the CPU's exponential.
__host__ __device__ inline float window_exp(float logit, const SoftmaxStats& stats) {
  return expf(logit - stats.max);
}

// The key's probability, exp(logit - max) * (1 / sum), as the CPU forms it for the peak.
__host__ __device__ inline float window_probability(float e, const SoftmaxStats& stats) {
  return mul_rn(e, stats.inv_sum);
}

// `sum` plus the key's probability in one rounding: the CPU's out[j] += e * (1 / sum), which
// GCC contracts into an fma.
__host__ __device__ inline float add_probability(float sum, float e, const SoftmaxStats& stats) {
  return fmaf(e, stats.inv_sum, sum);
}

}  // namespace adakv::kernels::cuda

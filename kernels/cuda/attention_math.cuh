// The index math and online-softmax steps of the CUDA attention kernels (attention_ops.cu), as
// __host__ __device__ functions so that tests/gpu/device_math_kv.cu runs them on the host: which
// keys a query row sees, which sequence a row of a paged batch belongs to, the checks of a
// PagedSequence (kernels/cpu/paged_attention.cpp's validate, head by head), and the steps of the
// online softmax in the order the kernels take them.
//
// One query row of one head is folded over its keys in tiles of kKeyTile keys, in key order:
//   scores s_j = (sum_d q[d] k_j[d]) * scale, each dot summed in kWarp lane partials (lane l
//   takes d = l, l + 32, ...) then folded by a butterfly of shuffles;
//   tile maximum in key order; m' = max(m, tile max); correction c = exp(m - m');
//   p_j = exp(s_j - m'); l' = l * c + (sum of the tile's p_j in key order);
//   acc[d] = acc[d] * c + sum_j p_j v_j[d] in key order;
// and out[d] = acc[d] * (1 / l) at the end. The order depends only on the row's number of keys
// and the head size, never on the launch or on the other rows of the batch.
#pragma once

#include <math.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/kv_elements.cuh"
#include "kernels/ops.h"

namespace adakv::kernels::cuda {

inline constexpr unsigned kAttnWarp = 32;
// Keys per tile of the online softmax.
inline constexpr unsigned kKeyTile = 64;

// Causal query t of T (cache index n_kv - T + t) sees cache entries 0 .. n_kv - T + t.
__host__ __device__ inline size_t causal_visible(size_t n_kv, size_t T, size_t t) {
  return n_kv - T + t + 1;
}

// New query i of n_queries in a head of `length` tokens sees that head's first
// length - n_queries + i + 1 tokens.
__host__ __device__ inline size_t paged_visible(size_t length, size_t n_queries, size_t i) {
  return length - n_queries + i + 1;
}

// The sequence whose rows hold batch row r: offsets[s] is sequence s's first row (offsets[0] = 0,
// offsets[n_seqs] = the rows of the batch, r below that).
__host__ __device__ inline size_t seq_of_row(const unsigned long long* offsets, size_t n_seqs,
                                             unsigned long long r) {
  size_t lo = 0, hi = n_seqs;  // offsets[lo] <= r < offsets[hi]
  while (hi - lo > 1) {
    const size_t mid = lo + (hi - lo) / 2;
    if (offsets[mid] <= r) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// The checks of attention_paged's CPU twin for sequence `seq` and its KV head h: its pointers
// set, at least one query, rows that do not overlap when there are several, the head at least
// n_queries long with a table whose ceil(length / block_tokens) ids are not negative.
__host__ __device__ inline bool paged_head_ok(const PagedSequence& seq, size_t h, size_t Hq,
                                              size_t head_dim, size_t block_tokens) {
  if (!seq.block_ids || !seq.lengths || !seq.q || !seq.out || seq.n_queries == 0) return false;
  if (seq.n_queries > 1 && (seq.q_stride < Hq * head_dim || seq.out_stride < Hq * head_dim)) {
    return false;
  }
  const size_t length = seq.lengths[h];
  const int32_t* ids = seq.block_ids[h];
  if (length < seq.n_queries || !ids) return false;
  const size_t blocks = (length + block_tokens - 1) / block_tokens;
  for (size_t b = 0; b < blocks; ++b) {
    if (ids[b] < 0) return false;
  }
  return true;
}

// The byte offset in the pool of the block holding token j of a head whose block table is ids.
__host__ __device__ inline size_t paged_block_offset(const int32_t* ids, const KvGeometry& g,
                                                     size_t j) {
  return static_cast<size_t>(ids[j / g.block_tokens]) * g.block_bytes;
}

// ---- The online softmax's steps ---------------------------------------------------------------

// One lane's share of a dot product: acc + q[d] * k[d], one rounding.
__host__ __device__ inline float attn_dot_step(float acc, float q, float k) {
  return fmaf(q, k, acc);
}

// A key's score from its folded dot product.
__host__ __device__ inline float attn_score(float dot, float scale) {
  return mul_rn(dot, scale);
}

// The largest of a tile's n >= 1 scores, in key order.
__host__ __device__ inline float attn_tile_max(const float* s, size_t n) {
  float m = s[0];
  for (size_t j = 1; j < n; ++j) m = fmaxf(m, s[j]);
  return m;
}

// exp(m - m_new): 0 while the state is empty (m = -inf), 1 when the maximum stays.
__host__ __device__ inline float attn_correction(float m, float m_new) {
  return expf(m - m_new);
}

__host__ __device__ inline float attn_weight(float score, float m) {
  return expf(score - m);
}

// l * c + the sum of the tile's n weights in key order.
__host__ __device__ inline float attn_running_sum(float l, float correction, const float* p,
                                                  size_t n) {
  float sum = 0.0f;
  for (size_t j = 0; j < n; ++j) sum += p[j];
  return fmaf(l, correction, sum);
}

// One step of acc[d]'s sum over a tile: a + p_j * v_j[d], one rounding (a starts at
// acc[d] * correction).
__host__ __device__ inline float attn_value_step(float a, float p, float v) {
  return fmaf(p, v, a);
}

__host__ __device__ inline float attn_rescale(float acc, float correction) {
  return mul_rn(acc, correction);
}

__host__ __device__ inline float attn_output(float acc, float l) {
  return mul_rn(acc, div_rn(1.0f, l));
}

}  // namespace adakv::kernels::cuda

// Causal grouped-query attention over a contiguous KV cache, blocked with an online softmax
// (the flash-attention recurrence) so that memory stays O(block) for any prompt length.
//
// Two paths compute the same thing:
//  - tiled (prefill: T >= kQueryBlock, Dh a multiple of the vector width, up to 128): keys are
//    first packed transposed per KV head, [key block][d][kKeyBlock], so that a tile of
//    kQueryBlock x kKeyBlock scores is a small matrix product whose inner loop runs along the
//    keys in whole vectors; P x V then runs along the head dimension. Both keep a few query rows
//    of accumulators in registers, which is where the time goes at long prompts. The softmax
//    step between them keeps each score row in registers (vector exp, shuffle reductions).
//  - rowwise (decode and odd shapes): one query at a time, one dot product per key.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cpu/vec_exp.h"
#include "kernels/ops.h"

namespace adakv::kernels {
namespace {

constexpr size_t kQueryBlock = 16;
constexpr size_t kKeyBlock = 64;
// One native vector: the register blocking below must fit the register file, or the compiler
// spills accumulators to the stack on every step (a 16-float vector on AVX2 is two registers,
// so the 4 x 4 block that fits AVX-512's 32 registers would need 32 of AVX2's 16).
#if defined(__AVX512F__)
constexpr size_t kLanes = 16;
constexpr size_t kRowsPerPass = 4;  // rows x kColsPerPass accumulators: 16 of 32 registers
#else
constexpr size_t kLanes = 8;
constexpr size_t kRowsPerPass = 2;  // 8 accumulators of 16 registers
#endif
constexpr size_t kColsPerPass = 4;  // vectors per row in one register block
constexpr size_t kKeyVecs = kKeyBlock / kLanes;

// GCC/Clang vector extension: lowered to the widest vectors the target has.
using Vec = float __attribute__((vector_size(kLanes * sizeof(float))));
using IVec = int32_t __attribute__((vector_size(kLanes * sizeof(int32_t))));

inline Vec load(const float* p) {
  Vec v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store(float* p, Vec v) {
  std::memcpy(p, &v, sizeof v);
}
// x - 0 is x for every x (even -0), so this folds to a plain broadcast; x + 0 would not.
inline Vec splat(float x) {
  return x - Vec{};
}

float dot(const float* a, const float* b, size_t n) {
  float s = 0;
#pragma omp simd reduction(+ : s)
  for (size_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// The one micro-kernel of the tiled path, a register-tiled small matrix product:
//   c[r][:] = (scale ? c[r][:] * scale[r] : 0) + sum_k a[r][k] * b[k][:]
// for rows r < R and k < K, each c and b row NV whole vectors long (strides in floats). R * NV
// accumulators stay in registers; each step loads NV vectors of b and R scalars of a.
template <size_t R, size_t NV>
void gemm_tile(float* c, size_t c_stride, const float* scale, const float* a, size_t a_stride,
               const float* b, size_t b_stride, size_t K) {
  Vec acc[R][NV] = {};
  if (scale) {
    for (size_t r = 0; r < R; ++r) {
      for (size_t v = 0; v < NV; ++v) acc[r][v] = load(c + r * c_stride + v * kLanes) * scale[r];
    }
  }
  for (size_t k = 0; k < K; ++k) {
    Vec bk[NV];
    for (size_t v = 0; v < NV; ++v) bk[v] = load(b + k * b_stride + v * kLanes);
    for (size_t r = 0; r < R; ++r) {
      const Vec ar = splat(a[r * a_stride + k]);
      for (size_t v = 0; v < NV; ++v) acc[r][v] += ar * bk[v];
    }
  }
  for (size_t r = 0; r < R; ++r) {
    for (size_t v = 0; v < NV; ++v) store(c + r * c_stride + v * kLanes, acc[r][v]);
  }
}

// The same product for a whole tile, ROWS x NV vectors, as register blocks of kRowsPerPass rows
// x kColsPerPass vectors (scale, when given, has ROWS entries).
template <size_t ROWS, size_t NV>
void gemm_blocks(float* c, size_t c_stride, const float* scale, const float* a, size_t a_stride,
                 const float* b, size_t b_stride, size_t K) {
  constexpr size_t R = kRowsPerPass, P = NV < kColsPerPass ? NV : kColsPerPass;
  static_assert(ROWS % R == 0 && NV % P == 0, "tile must split into whole register blocks");
  for (size_t r0 = 0; r0 < ROWS; r0 += R) {
    for (size_t v0 = 0; v0 < NV; v0 += P) {
      gemm_tile<R, P>(c + r0 * c_stride + v0 * kLanes, c_stride, scale ? scale + r0 : nullptr,
                      a + r0 * a_stride, a_stride, b + v0 * kLanes, b_stride, K);
    }
  }
}

// scores[i][j] = q[i] . key j of the block, for all kQueryBlock rows. q: [kQueryBlock][Dh]
// (pre-scaled), kt: [Dh][kKeyBlock] (the packed block), scores: [kQueryBlock][kKeyBlock].
void score_tile(float* scores, const float* q, const float* kt, size_t Dh) {
  gemm_blocks<kQueryBlock, kKeyVecs>(scores, kKeyBlock, nullptr, q, Dh, kt, kKeyBlock, Dh);
}

// e^x on a whole vector: exp_inplace's polynomial (vec_exp.cpp; relative error below 3e-7,
// inputs clamped to [-87, 88]) kept in registers, so that a score row never goes through
// memory for it.
inline Vec exp_vec(Vec x) {
  x = x < splat(-87.0f) ? splat(-87.0f) : x;
  x = x > splat(88.0f) ? splat(88.0f) : x;
  const Vec kf = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round to nearest
  Vec r = x - kf * 0.693145751953125f;
  r = r - kf * 1.428606765330187045e-06f;
  Vec p = splat(1.0f / 720.0f);
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const IVec bits = (__builtin_convertvector(kf, IVec) + 127) << 23;
  Vec scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

// Folds the lanes of v with op (max, +) in log2(kLanes) shuffle steps, in registers.
template <typename Op>
inline float reduce_lanes(Vec v, Op op) {
#if defined(__AVX512F__)
  v = op(v, __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7));
  v = op(v, __builtin_shufflevector(v, v, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11));
  v = op(v, __builtin_shufflevector(v, v, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13));
  v = op(v, __builtin_shufflevector(v, v, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14));
#else
  v = op(v, __builtin_shufflevector(v, v, 4, 5, 6, 7, 0, 1, 2, 3));
  v = op(v, __builtin_shufflevector(v, v, 2, 3, 0, 1, 6, 7, 4, 5));
  v = op(v, __builtin_shufflevector(v, v, 1, 0, 3, 2, 5, 4, 7, 6));
#endif
  return v[0];
}

// One row of a score tile in the online softmax: s[j] becomes exp(s[j] - m) for the visible
// keys and 0 for the rest, where m is the new running maximum; updates max and sum and returns
// the factor exp(old max - new max) that rescales the row's accumulated output.
float softmax_row_update(float* s, size_t visible, float& row_max, float& row_sum) {
  IVec lane;
  for (size_t l = 0; l < kLanes; ++l) lane[l] = static_cast<int32_t>(l);
  const int32_t vis = static_cast<int32_t>(visible);
  Vec v[kKeyVecs];
  Vec vmax = splat(row_max);
  for (size_t c = 0; c < kKeyVecs; ++c) {
    v[c] = load(s + c * kLanes);
    if (visible < kKeyBlock) {
      v[c] = lane + static_cast<int32_t>(c * kLanes) < vis
                 ? v[c]
                 : splat(-std::numeric_limits<float>::infinity());
    }
    vmax = v[c] > vmax ? v[c] : vmax;
  }
  const float m = reduce_lanes(vmax, [](Vec a, Vec b) { return a > b ? a : b; });
  Vec vsum{};
  for (size_t c = 0; c < kKeyVecs; ++c) {
    Vec e = exp_vec(v[c] - m);
    // Masked keys: exp(-inf) clamps to ~1e-38; they must weigh exactly 0.
    if (visible < kKeyBlock) e = lane + static_cast<int32_t>(c * kLanes) < vis ? e : Vec{};
    store(s + c * kLanes, e);
    vsum += e;
  }
  const float sum = reduce_lanes(vsum, [](Vec a, Vec b) { return a + b; });
  const float correction = std::exp(row_max - m);
  row_sum = row_sum * correction + sum;
  row_max = m;
  return correction;
}

// acc[i][:] = acc[i][:] * correction[i] + sum_j p[i][j] * v[j][:], for j < nk.
// acc: [kQueryBlock][Dh] with Dh = DV * kLanes; p: [kQueryBlock][kKeyBlock]; v rows strided.
template <size_t DV>
void accumulate_tile(float* acc, const float* correction, const float* p, const float* v,
                     size_t v_stride, size_t nk) {
  gemm_blocks<kQueryBlock, DV>(acc, DV * kLanes, correction, p, kKeyBlock, v, v_stride, nk);
}

template <size_t DV>
void attention_tiled(float* out, const float* q, const float* k, const float* v, size_t T,
                     size_t n_kv, size_t Hq, size_t Hkv, size_t q_stride, size_t kv_stride,
                     size_t out_stride, float scale) {
  constexpr size_t Dh = DV * kLanes;
  const size_t group = Hq / Hkv;
  const size_t offset = n_kv - T;  // cache index of query 0
  const size_t n_qblocks = (T + kQueryBlock - 1) / kQueryBlock;
  const size_t n_kblocks = (n_kv + kKeyBlock - 1) / kKeyBlock;
  const size_t packed_block = Dh * kKeyBlock;

  // kt[g][kb][d][j] = key (kb * kKeyBlock + j) of KV head g, dimension d; zero past n_kv.
  std::vector<float> kt(Hkv * n_kblocks * packed_block);
#pragma omp parallel for collapse(2) schedule(static)
  for (size_t g = 0; g < Hkv; ++g) {
    for (size_t kb = 0; kb < n_kblocks; ++kb) {
      float* dst = kt.data() + (g * n_kblocks + kb) * packed_block;
      for (size_t j = 0; j < kKeyBlock; ++j) {
        const size_t key = kb * kKeyBlock + j;
        if (key >= n_kv) {
          for (size_t d = 0; d < Dh; ++d) dst[d * kKeyBlock + j] = 0.0f;
          continue;
        }
        const float* src = k + key * kv_stride + g * Dh;
        for (size_t d = 0; d < Dh; ++d) dst[d * kKeyBlock + j] = src[d];
      }
    }
  }

#pragma omp parallel
  {
    alignas(64) float qt[kQueryBlock * Dh];
    alignas(64) float scores[kQueryBlock * kKeyBlock];
    alignas(64) float acc[kQueryBlock * Dh];
    float row_max[kQueryBlock], row_sum[kQueryBlock], correction[kQueryBlock];

#pragma omp for collapse(2) schedule(dynamic)
    for (size_t h = 0; h < Hq; ++h) {
      for (size_t qb = 0; qb < n_qblocks; ++qb) {
        const size_t g = h / group;
        const size_t q0 = qb * kQueryBlock;
        const size_t nq = std::min(kQueryBlock, T - q0);
        // Rows past nq are zero queries: computed and discarded, so the tile code has no tails.
        for (size_t i = 0; i < kQueryBlock; ++i) {
          const float* qi = q + (q0 + i) * q_stride + h * Dh;
          for (size_t d = 0; d < Dh; ++d) qt[i * Dh + d] = i < nq ? qi[d] * scale : 0.0f;
        }
        std::fill(acc, acc + kQueryBlock * Dh, 0.0f);
        std::fill(row_max, row_max + kQueryBlock, -std::numeric_limits<float>::infinity());
        std::fill(row_sum, row_sum + kQueryBlock, 0.0f);

        const size_t keys_end = offset + q0 + nq;  // exclusive, for the block's last query
        for (size_t k0 = 0; k0 < keys_end; k0 += kKeyBlock) {
          const size_t kb = k0 / kKeyBlock;
          score_tile(scores, qt, kt.data() + (g * n_kblocks + kb) * packed_block, Dh);
          for (size_t i = 0; i < kQueryBlock; ++i) {
            // Query i sees keys up to offset + q0 + i; key k0 is visible to every query because
            // blocks start at 0, so each row's running maximum is finite after the first block.
            const size_t last = offset + q0 + std::min(i, nq - 1);
            const size_t visible = last + 1 > k0 ? std::min(kKeyBlock, last + 1 - k0) : 0;
            correction[i] =
                softmax_row_update(scores + i * kKeyBlock, visible, row_max[i], row_sum[i]);
          }
          const size_t nk = std::min(kKeyBlock, keys_end - k0);
          accumulate_tile<DV>(acc, correction, scores, v + k0 * kv_stride + g * Dh, kv_stride, nk);
        }
        for (size_t i = 0; i < nq; ++i) {
          float* oi = out + (q0 + i) * out_stride + h * Dh;
          const float inv = 1.0f / row_sum[i];
          for (size_t d = 0; d < Dh; ++d) oi[d] = acc[i * Dh + d] * inv;
        }
      }
    }
  }
}

void attention_rowwise(float* out, const float* q, const float* k, const float* v, size_t T,
                       size_t n_kv, size_t Hq, size_t Hkv, size_t Dh, size_t q_stride,
                       size_t kv_stride, size_t out_stride, float scale) {
  constexpr size_t kKeys = 128;
  const size_t group = Hq / Hkv;
  const size_t offset = n_kv - T;
  const float neg_inf = -std::numeric_limits<float>::infinity();

#pragma omp parallel
  {
    std::vector<float> acc(Dh), scores(kKeys);
#pragma omp for collapse(2) schedule(dynamic)
    for (size_t h = 0; h < Hq; ++h) {
      for (size_t t = 0; t < T; ++t) {
        const size_t g = h / group;
        const float* qt = q + t * q_stride + h * Dh;
        const size_t visible = offset + t + 1;
        std::fill(acc.begin(), acc.end(), 0.0f);
        float row_max = neg_inf, row_sum = 0;
        for (size_t k0 = 0; k0 < visible; k0 += kKeys) {
          const size_t nk = std::min(kKeys, visible - k0);
          float m = row_max;
          for (size_t j = 0; j < nk; ++j) {
            scores[j] = dot(qt, k + (k0 + j) * kv_stride + g * Dh, Dh) * scale;
            m = std::max(m, scores[j]);
          }
          const float correction = std::exp(row_max - m);
          float sum = row_sum * correction;
          for (size_t d = 0; d < Dh; ++d) acc[d] *= correction;
          for (size_t j = 0; j < nk; ++j) scores[j] -= m;
          exp_inplace(scores.data(), nk);
          for (size_t j = 0; j < nk; ++j) {
            const float p = scores[j];
            sum += p;
            const float* vj = v + (k0 + j) * kv_stride + g * Dh;
#pragma omp simd
            for (size_t d = 0; d < Dh; ++d) acc[d] += p * vj[d];
          }
          row_max = m;
          row_sum = sum;
        }
        float* ot = out + t * out_stride + h * Dh;
        const float inv = 1.0f / row_sum;
        for (size_t d = 0; d < Dh; ++d) ot[d] = acc[d] * inv;
      }
    }
  }
}

}  // namespace

Status attention_causal(float* out, const float* q, const float* k, const float* v, size_t T,
                        size_t n_kv, size_t Hq, size_t Hkv, size_t Dh, size_t q_stride,
                        size_t kv_stride, size_t out_stride, float scale, Stream) {
  if (Hkv == 0 || Hq % Hkv != 0 || T > n_kv || Dh == 0) return Status::kInvalidArgument;
  if (T == 0) return Status::kOk;
  // The tiled path is instantiated per head size (whole vectors per row).
  const auto tiled = Dh == 16    ? attention_tiled<16 / kLanes>
                     : Dh == 32  ? attention_tiled<32 / kLanes>
                     : Dh == 64  ? attention_tiled<64 / kLanes>
                     : Dh == 128 ? attention_tiled<128 / kLanes>
                                 : nullptr;
  if (T >= kQueryBlock && tiled) {
    tiled(out, q, k, v, T, n_kv, Hq, Hkv, q_stride, kv_stride, out_stride, scale);
    return Status::kOk;
  }
  attention_rowwise(out, q, k, v, T, n_kv, Hq, Hkv, Dh, q_stride, kv_stride, out_stride, scale);
  return Status::kOk;
}

}  // namespace adakv::kernels

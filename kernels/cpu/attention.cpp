// Causal grouped-query attention over a contiguous KV cache, blocked with an online softmax
// (the flash-attention recurrence) so that memory stays O(block) for any prompt length.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/vec_exp.h"
#include "kernels/ops.h"

namespace adakv::kernels {
namespace {

constexpr size_t kQueryBlock = 16;
constexpr size_t kKeyBlock = 128;

float dot(const float* a, const float* b, size_t n) {
  float s = 0;
#pragma omp simd reduction(+ : s)
  for (size_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

}  // namespace

Status attention_causal(float* out, const float* q, const float* k, const float* v, size_t T,
                        size_t n_kv, size_t Hq, size_t Hkv, size_t Dh, size_t q_stride,
                        size_t kv_stride, size_t out_stride, float scale, Stream) {
  if (Hkv == 0 || Hq % Hkv != 0 || T > n_kv || Dh == 0) return Status::kInvalidArgument;
  if (T == 0) return Status::kOk;
  const size_t group = Hq / Hkv;
  const size_t offset = n_kv - T;  // cache index of query 0
  const size_t n_qblocks = (T + kQueryBlock - 1) / kQueryBlock;
  const float neg_inf = -std::numeric_limits<float>::infinity();

#pragma omp parallel
  {
    std::vector<float> acc(kQueryBlock * Dh), scores(kKeyBlock);
    float row_max[kQueryBlock], row_sum[kQueryBlock];

#pragma omp for collapse(2) schedule(dynamic)
    for (size_t h = 0; h < Hq; ++h) {
      for (size_t qb = 0; qb < n_qblocks; ++qb) {
        const size_t g = h / group;
        const size_t q0 = qb * kQueryBlock;
        const size_t nq = std::min(kQueryBlock, T - q0);
        std::fill(acc.begin(), acc.begin() + nq * Dh, 0.0f);
        std::fill(row_max, row_max + nq, neg_inf);
        std::fill(row_sum, row_sum + nq, 0.0f);

        const size_t keys_end = offset + q0 + nq;  // exclusive, for the block's last query
        for (size_t k0 = 0; k0 < keys_end; k0 += kKeyBlock) {
          const size_t k1 = std::min(k0 + kKeyBlock, keys_end);
          for (size_t i = 0; i < nq; ++i) {
            const size_t visible_end = std::min(k1, offset + q0 + i + 1);
            if (visible_end <= k0) continue;
            const size_t nk = visible_end - k0;
            const float* qi = q + (q0 + i) * q_stride + h * Dh;
            float m = row_max[i];
            for (size_t j = 0; j < nk; ++j) {
              scores[j] = dot(qi, k + (k0 + j) * kv_stride + g * Dh, Dh) * scale;
              m = std::max(m, scores[j]);
            }
            float* ai = acc.data() + i * Dh;
            const float correction = std::exp(row_max[i] - m);
            float sum = row_sum[i] * correction;
            for (size_t d = 0; d < Dh; ++d) ai[d] *= correction;
            for (size_t j = 0; j < nk; ++j) scores[j] -= m;
            exp_inplace(scores.data(), nk);
            for (size_t j = 0; j < nk; ++j) {
              const float p = scores[j];
              sum += p;
              const float* vj = v + (k0 + j) * kv_stride + g * Dh;
#pragma omp simd
              for (size_t d = 0; d < Dh; ++d) ai[d] += p * vj[d];
            }
            row_max[i] = m;
            row_sum[i] = sum;
          }
        }
        for (size_t i = 0; i < nq; ++i) {
          float* oi = out + (q0 + i) * out_stride + h * Dh;
          const float inv = 1.0f / row_sum[i];
          for (size_t d = 0; d < Dh; ++d) oi[d] = acc[i * Dh + d] * inv;
        }
      }
    }
  }
  return Status::kOk;
}

}  // namespace adakv::kernels

// Observation-window attention mass (the Ada-KV / SnapKV scorer's input): the causal softmax
// attention of the last W prompt queries over the prompt, recomputed from Q and K and summed
// over the window (and, on request, its largest value over the window). Per query head only a
// W x n score tile is formed, never n x n; it is one GEMM (the window's queries against every
// key), most of whose causally masked corner is computed and ignored (W is small next to n).
#include <cblas.h>

#include <algorithm>
#include <vector>

#include "kernels/cpu/blas_threads.h"
#include "kernels/cpu/vec_exp.h"
#include "kernels/ops.h"

namespace adakv::kernels {

Status window_attention_mass(float* out, const float* q, size_t q_stride, const float* k,
                             size_t k_stride, size_t n, size_t W, size_t Hq, size_t Hkv, size_t Dh,
                             float scale, float* peak, Stream) {
  if (Hkv == 0 || Hq % Hkv != 0 || Dh == 0 || W == 0 || W > n) return Status::kInvalidArgument;
  if (!out || !q || !k) return Status::kInvalidArgument;
  if ((W > 1 && q_stride < Hq * Dh) || (n > 1 && k_stride < Hkv * Dh)) {
    return Status::kInvalidArgument;
  }
  const size_t group = Hq / Hkv;
  const size_t first = n - W;  // position of the window's first query
  blas_single_threaded();

#pragma omp parallel
  {
    std::vector<float> window_q(W * Dh), scores(W * n);
#pragma omp for schedule(dynamic, 1)
    for (size_t h = 0; h < Hq; ++h) {
      const size_t g = h / group;
      // The window's queries of this head, pre-scaled and contiguous.
      for (size_t i = 0; i < W; ++i) {
        const float* qi = q + i * q_stride + h * Dh;
        for (size_t d = 0; d < Dh; ++d) window_q[i * Dh + d] = qi[d] * scale;
      }
      // scores[i][j] = q_i . k_j for every key; query i (position first + i) reads only keys
      // j <= first + i below.
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(W), static_cast<int>(n),
                  static_cast<int>(Dh), 1.0f, window_q.data(), static_cast<int>(Dh), k + g * Dh,
                  static_cast<int>(std::max(k_stride, Dh)), 0.0f, scores.data(),
                  static_cast<int>(n));

      float* oh = out + h * n;
      float* ph = peak ? peak + h * n : nullptr;
      std::fill(oh, oh + n, 0.0f);
      if (ph) std::fill(ph, ph + n, 0.0f);
      for (size_t i = 0; i < W; ++i) {
        float* si = scores.data() + i * n;
        const size_t n_keys = first + i + 1;
        const float m = *std::max_element(si, si + n_keys);
#pragma omp simd
        for (size_t j = 0; j < n_keys; ++j) si[j] -= m;
        exp_inplace(si, n_keys);
        float sum = 0;
#pragma omp simd reduction(+ : sum)
        for (size_t j = 0; j < n_keys; ++j) sum += si[j];
        const float inv = 1.0f / sum;
#pragma omp simd
        for (size_t j = 0; j < n_keys; ++j) oh[j] += si[j] * inv;
        if (ph) {
#pragma omp simd
          for (size_t j = 0; j < n_keys; ++j) ph[j] = std::max(ph[j], si[j] * inv);
        }
      }
    }
  }
  return Status::kOk;
}

}  // namespace adakv::kernels

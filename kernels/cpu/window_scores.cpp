// Observation-window attention mass (the Ada-KV / SnapKV scorer's input): the causal softmax
// attention of the last W prompt queries over the prompt, recomputed from Q and K and summed
// over the window (and, on request, its largest value over the window). Per query head the
// window is taken kQueryTile queries at a time: one GEMM of those queries against the keys the
// last of them can see, so the score tile stays in cache and its size does not grow with W (a
// reconstruct window is as long as the context it repeats). Each query row is still reduced
// into the head's sums in window order, so the result does not depend on the tile size.
#include <cblas.h>

#include <algorithm>
#include <vector>

#include "kernels/cpu/blas_threads.h"
#include "kernels/cpu/vec_exp.h"
#include "kernels/ops.h"

namespace adakv::kernels {
namespace {

constexpr size_t kQueryTile = 64;

}  // namespace

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
    const size_t tile = std::min(W, kQueryTile);
    std::vector<float> tile_q(tile * Dh), scores(tile * n);
#pragma omp for schedule(dynamic, 1)
    for (size_t h = 0; h < Hq; ++h) {
      const size_t g = h / group;
      float* oh = out + h * n;
      float* ph = peak ? peak + h * n : nullptr;
      std::fill(oh, oh + n, 0.0f);
      if (ph) std::fill(ph, ph + n, 0.0f);
      for (size_t i0 = 0; i0 < W; i0 += tile) {
        const size_t rows = std::min(tile, W - i0);
        const size_t cols = first + i0 + rows;  // the keys the tile's last query can see
        // The tile's queries of this head, pre-scaled and contiguous.
        for (size_t i = 0; i < rows; ++i) {
          const float* qi = q + (i0 + i) * q_stride + h * Dh;
          for (size_t d = 0; d < Dh; ++d) tile_q[i * Dh + d] = qi[d] * scale;
        }
        // scores[i][j] = q_i . k_j; query i0 + i (position first + i0 + i) reads only keys
        // j <= first + i0 + i below.
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(rows),
                    static_cast<int>(cols), static_cast<int>(Dh), 1.0f, tile_q.data(),
                    static_cast<int>(Dh), k + g * Dh, static_cast<int>(std::max(k_stride, Dh)),
                    0.0f, scores.data(), static_cast<int>(cols));
        for (size_t i = 0; i < rows; ++i) {
          float* si = scores.data() + i * cols;
          const size_t n_keys = first + i0 + i + 1;
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
  }
  return Status::kOk;
}

}  // namespace adakv::kernels

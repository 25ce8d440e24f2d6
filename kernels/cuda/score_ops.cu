// The scoring group's kernels (score_ops.h), their per-element math in score_math.cuh.
//
// window_attention_mass, for the W window rows of each query head over n keys, in chunks of
// kWindowKeys keys (one thread per key, one block per (chunk, head)):
//   1. window_partials_kernel: each row's logits in the chunk (the window's queries against the
//      chunk's keys, staged in shared memory a slice of the head dimension at a time), their
//      maximum and sum exp(logit - maximum) by fixed-order block reductions -> one
//      SoftmaxPartial per (head, row, chunk) in scratch;
//   2. window_stats_kernel: one thread per (head, row) merges the row's partials in chunk order
//      -> SoftmaxStats (maximum, 1 / sum);
//   3. window_mass_kernel: the logits again; each thread adds its key's probabilities over the
//      window rows in row order (the CPU's order) into out, and maxes them into peak.
// The logits are formed twice rather than stored: the scratch stays Hq * W * (n / 128 + 1)
// pairs of floats instead of Hq * W * n floats. Every sum has a fixed order, so results depend
// on the inputs and n only.
//
// blend_scores: one thread per (head, key < prefix). pool_scores: one thread per (KV head, key
// < prefix), which pools each head of its group at that key straight from mass; when scores
// overlaps mass (the in-place call) the scores go to scratch first and are copied over after.
//
// Scratch memory is the stream's (cudaMallocAsync), freed on the stream after the last kernel
// that reads it.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/score_math.cuh"
#include "kernels/cuda/score_ops.h"

namespace adakv::kernels::cuda {
namespace {

constexpr unsigned kWarp = 32;
constexpr unsigned kWarps = kWindowKeys / kWarp;
// Window rows whose logits a thread holds at once (registers), and head dimensions staged in
// shared memory per step.
constexpr unsigned kRows = 8;
constexpr unsigned kSlice = 32;
// Grid limits: chunks go along x, heads along y; kernels loop over both grid-stride.
constexpr size_t kMaxGridX = INT_MAX;
constexpr size_t kMaxGridY = 65535;

// Memory on `stream` for one op, freed on the stream when the op's launches are issued (or one
// of them throws).
class StreamScratch {
 public:
  StreamScratch(cudaStream_t stream, size_t bytes) : stream_(stream) {
    check_cuda(cudaMallocAsync(&data_, bytes, stream), "cudaMallocAsync (scoring scratch)");
  }
  ~StreamScratch() {
    if (data_) cudaFreeAsync(data_, stream_);
  }
  StreamScratch(const StreamScratch&) = delete;
  StreamScratch& operator=(const StreamScratch&) = delete;
  void* data() const { return data_; }

 private:
  cudaStream_t stream_;
  void* data_ = nullptr;
};

// window_attention_mass's sizes. q row i of head h starts at q + i * q_stride + h * Dh, key j of
// KV head g at k + j * k_stride + g * Dh.
struct WindowShape {
  size_t n, W, Hq, group, Dh, q_stride, k_stride, n_chunks;
  float scale;
  __host__ __device__ size_t first() const { return n - W; }
};

// The shared memory of a chunk's logits: the rows' scaled queries [d][row] and the chunk's keys
// [key][d] (padded a float so that thread t reading key t hits bank (t + d) % 32).
struct LogitTiles {
  float q[kSlice][kRows];
  float k[kWindowKeys][kSlice + 1];
};

// acc[r] <- the logit of window row i0 + r (r < rows <= kRows) against this thread's key
// j0 + threadIdx.x of head h (0 for a thread past n or a row past `rows`). Every thread of the
// block calls it with the same arguments but acc.
__device__ void chunk_logits(float (&acc)[kRows], const float* q, const float* k,
                             const WindowShape& s, size_t h, size_t i0, size_t rows, size_t j0,
                             LogitTiles& tiles) {
  const unsigned t = threadIdx.x;
  const size_t g = h / s.group;
#pragma unroll
  for (unsigned r = 0; r < kRows; ++r) acc[r] = 0.0f;
  for (size_t d0 = 0; d0 < s.Dh; d0 += kSlice) {
    const unsigned width = static_cast<unsigned>(s.Dh - d0 < kSlice ? s.Dh - d0 : kSlice);
    __syncthreads();  // the previous slice (or call) is read
    for (unsigned e = t; e < kRows * kSlice; e += kWindowKeys) {
      const unsigned r = e / kSlice, d = e % kSlice;
      tiles.q[d][r] = r < rows && d < width
                          ? scaled_query(q[(i0 + r) * s.q_stride + h * s.Dh + d0 + d], s.scale)
                          : 0.0f;
    }
    for (unsigned e = t; e < kWindowKeys * kSlice; e += kWindowKeys) {
      const unsigned key = e / kSlice, d = e % kSlice;
      const size_t j = j0 + key;
      tiles.k[key][d] = j < s.n && d < width ? k[j * s.k_stride + g * s.Dh + d0 + d] : 0.0f;
    }
    __syncthreads();
    for (unsigned d = 0; d < width; ++d) {
      const float kd = tiles.k[t][d];
#pragma unroll
      for (unsigned r = 0; r < kRows; ++r) acc[r] = dot_step(acc[r], tiles.q[d][r], kd);
    }
  }
}

// v[r] <- the maximum (kMax) or the sum of v[r] over the block's threads, in a fixed order (a
// butterfly within each warp, then the warps in order); every thread gets the result.
template <bool kMax>
__device__ void block_reduce(float (&v)[kRows], float (&partial)[kRows][kWarps]) {
  const unsigned lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
#pragma unroll
  for (unsigned r = 0; r < kRows; ++r) {
    for (unsigned offset = kWarp / 2; offset > 0; offset /= 2) {
      const float other = __shfl_xor_sync(0xffffffffu, v[r], offset);
      v[r] = kMax ? fmaxf(v[r], other) : add_rn(v[r], other);
    }
  }
  if (lane == 0) {
#pragma unroll
    for (unsigned r = 0; r < kRows; ++r) partial[r][warp] = v[r];
  }
  __syncthreads();
#pragma unroll
  for (unsigned r = 0; r < kRows; ++r) {
    float total = partial[r][0];
    for (unsigned w = 1; w < kWarps; ++w) {
      total = kMax ? fmaxf(total, partial[r][w]) : add_rn(total, partial[r][w]);
    }
    v[r] = total;
  }
  __syncthreads();  // `partial` is free for the next reduction
}

// Pass 1: partial[(h * W + i) * n_chunks + c] for every row i that sees a key of chunk c.
__global__ void __launch_bounds__(kWindowKeys)
    window_partials_kernel(SoftmaxPartial* partial, const float* q, const float* k, WindowShape s) {
  __shared__ LogitTiles tiles;
  __shared__ float reduce[kRows][kWarps];
  const size_t first = s.first();
  for (size_t c = blockIdx.x; c < s.n_chunks; c += gridDim.x) {
    const size_t j0 = c * kWindowKeys, j = j0 + threadIdx.x;
    for (size_t h = blockIdx.y; h < s.Hq; h += gridDim.y) {
      // Row i0 sees key j0 (the block's thread 0), so every row's maximum below is a logit.
      for (size_t i0 = first_row_seeing(j0, first); i0 < s.W; i0 += kRows) {
        const size_t rows = s.W - i0 < kRows ? s.W - i0 : kRows;
        float logit[kRows];
        chunk_logits(logit, q, k, s, h, i0, rows, j0, tiles);
        bool seen[kRows];
        float m[kRows], e[kRows];
#pragma unroll
        for (unsigned r = 0; r < kRows; ++r) {
          seen[r] = r < rows && key_visible(j, first, i0 + r);
          m[r] = seen[r] ? logit[r] : -INFINITY;
        }
        block_reduce<true>(m, reduce);
#pragma unroll
        for (unsigned r = 0; r < kRows; ++r) e[r] = seen[r] ? expf(logit[r] - m[r]) : 0.0f;
        block_reduce<false>(e, reduce);
        if (threadIdx.x == 0) {
#pragma unroll
          for (unsigned r = 0; r < kRows; ++r) {
            if (r < rows) partial[(h * s.W + i0 + r) * s.n_chunks + c] = SoftmaxPartial{m[r], e[r]};
          }
        }
      }
    }
  }
}

// Pass 2: stats[h * W + i] from row i's partials, chunks 0 .. last_chunk_seen.
__global__ void window_stats_kernel(SoftmaxStats* stats, const SoftmaxPartial* partial,
                                    WindowShape s) {
  const size_t rows = s.Hq * s.W;
  for (size_t row = blockIdx.x * size_t{blockDim.x} + threadIdx.x; row < rows;
       row += size_t{gridDim.x} * blockDim.x) {
    const size_t i = row % s.W;
    stats[row] = merge_partials(partial + row * s.n_chunks, last_chunk_seen(s.first(), i) + 1);
  }
}

// Pass 3: out[h][j] = sum over rows i seeing j, in row order, of the probability; peak[h][j] =
// their maximum (from 0).
__global__ void __launch_bounds__(kWindowKeys)
    window_mass_kernel(float* out, float* peak, const SoftmaxStats* stats, const float* q,
                       const float* k, WindowShape s) {
  __shared__ LogitTiles tiles;
  const size_t first = s.first();
  for (size_t c = blockIdx.x; c < s.n_chunks; c += gridDim.x) {
    const size_t j0 = c * kWindowKeys, j = j0 + threadIdx.x;
    for (size_t h = blockIdx.y; h < s.Hq; h += gridDim.y) {
      float sum = 0.0f, largest = 0.0f;
      for (size_t i0 = first_row_seeing(j0, first); i0 < s.W; i0 += kRows) {
        const size_t rows = s.W - i0 < kRows ? s.W - i0 : kRows;
        float logit[kRows];
        chunk_logits(logit, q, k, s, h, i0, rows, j0, tiles);
#pragma unroll
        for (unsigned r = 0; r < kRows; ++r) {
          if (r < rows && key_visible(j, first, i0 + r)) {
            const SoftmaxStats& row = stats[h * s.W + i0 + r];
            const float e = window_exp(logit[r], row);
            sum = add_probability(sum, e, row);
            largest = max_like_std(largest, window_probability(e, row));
          }
        }
      }
      if (j < s.n) {
        out[h * s.n + j] = sum;
        if (peak) peak[h * s.n + j] = largest;
      }
    }
  }
}

__global__ void blend_scores_kernel(float* mass, float* peak, const float* window_mass,
                                    const float* window_peak, size_t Hq, size_t n_keys,
                                    size_t n_window, size_t prefix, float weight) {
  const size_t total = Hq * prefix;
  for (size_t idx = blockIdx.x * size_t{blockDim.x} + threadIdx.x; idx < total;
       idx += size_t{gridDim.x} * blockDim.x) {
    const size_t h = idx / prefix, j = idx % prefix;
    const size_t i = h * n_keys + j, iw = h * n_window + j;
    mass[i] = blend_mass(window_mass[iw], weight, mass[i]);
    if (peak) peak[i] = blend_peak(window_peak[iw], weight, peak[i]);
  }
}

__global__ void pool_scores_kernel(float* scores, const float* mass, size_t n_keys, size_t prefix,
                                   size_t Hkv, size_t group, ScorePooling pooling) {
  const size_t total = Hkv * prefix;
  for (size_t idx = blockIdx.x * size_t{blockDim.x} + threadIdx.x; idx < total;
       idx += size_t{gridDim.x} * blockDim.x) {
    const size_t g = idx / prefix, j = idx % prefix;
    scores[idx] = pool_score(mass, n_keys, prefix, group, g, j, pooling);
  }
}

void reject(const char* op) {
  check(Status::kInvalidArgument, op);
}

}  // namespace

void window_attention_mass(cudaStream_t stream, float* out, const float* q, size_t q_stride,
                           const float* k, size_t k_stride, size_t n, size_t W, size_t Hq,
                           size_t Hkv, size_t Dh, float scale, float* peak) {
  // The CPU twin's checks (kernels/cpu/window_scores.cpp), in its order.
  const char* op = "window_attention_mass";
  if (Hkv == 0 || Hq % Hkv != 0 || Dh == 0 || W == 0 || W > n) reject(op);
  if (!out || !q || !k) reject(op);
  if ((W > 1 && q_stride < Hq * Dh) || (n > 1 && k_stride < Hkv * Dh)) reject(op);
  if (Hq == 0) return;

  const size_t n_chunks = (n + kWindowKeys - 1) / kWindowKeys, rows = Hq * W;
  const WindowShape s{n, W, Hq, Hq / Hkv, Dh, q_stride, k_stride, n_chunks, scale};
  StreamScratch scratch(stream, rows * (sizeof(SoftmaxStats) + n_chunks * sizeof(SoftmaxPartial)));
  auto* stats = static_cast<SoftmaxStats*>(scratch.data());
  auto* partial = reinterpret_cast<SoftmaxPartial*>(stats + rows);

  const dim3 grid(static_cast<unsigned>(std::min(n_chunks, kMaxGridX)),
                  static_cast<unsigned>(std::min(Hq, kMaxGridY)));
  window_partials_kernel<<<grid, kWindowKeys, 0, stream>>>(partial, q, k, s);
  check_launch("window_partials_kernel");
  window_stats_kernel<<<blocks_for(rows), kThreads, 0, stream>>>(stats, partial, s);
  check_launch("window_stats_kernel");
  window_mass_kernel<<<grid, kWindowKeys, 0, stream>>>(out, peak, stats, q, k, s);
  check_launch("window_mass_kernel");
}

void blend_scores(cudaStream_t stream, float* mass, float* peak, const float* window_mass,
                  const float* window_peak, size_t Hq, size_t n_keys, size_t n_window,
                  size_t prefix, float weight) {
  // The CPU twin's checks (kernels/cpu/score_pooling.cpp), in its order.
  const char* op = "blend_scores";
  if (prefix > n_keys || prefix > n_window) reject(op);
  if ((peak == nullptr) != (window_peak == nullptr)) reject(op);
  if (Hq == 0 || prefix == 0) return;
  if (!mass || !window_mass) reject(op);
  blend_scores_kernel<<<blocks_for(Hq * prefix), kThreads, 0, stream>>>(
      mass, peak, window_mass, window_peak, Hq, n_keys, n_window, prefix, weight);
  check_launch("blend_scores_kernel");
}

void pool_scores(cudaStream_t stream, float* scores, const float* mass, size_t n_keys,
                 size_t prefix, size_t Hq, size_t Hkv, const ScorePooling& pooling) {
  // The CPU twin's checks (kernels/cpu/score_pooling.cpp), in its order.
  const char* op = "pool_scores";
  if (Hkv == 0 || Hq % Hkv != 0 || prefix > n_keys) reject(op);
  if (pooling.kernel == 0 || pooling.shift > pooling.kernel / 2) reject(op);
  if (Hq == 0 || prefix == 0) return;
  if (!scores || !mass) reject(op);

  // Threads read mass across the whole group while others write scores: an overlap (scores may
  // alias mass) sends the scores through scratch.
  const size_t n_scores = Hkv * prefix;
  const auto s0 = reinterpret_cast<uintptr_t>(scores), m0 = reinterpret_cast<uintptr_t>(mass);
  const uintptr_t s1 = s0 + n_scores * sizeof(float);
  const uintptr_t m1 = m0 + ((Hq - 1) * n_keys + prefix) * sizeof(float);
  const bool overlap = s0 < m1 && m0 < s1;
  if (!overlap) {
    pool_scores_kernel<<<blocks_for(n_scores), kThreads, 0, stream>>>(scores, mass, n_keys, prefix,
                                                                      Hkv, Hq / Hkv, pooling);
    check_launch("pool_scores_kernel");
    return;
  }
  StreamScratch scratch(stream, n_scores * sizeof(float));
  auto* staged = static_cast<float*>(scratch.data());
  pool_scores_kernel<<<blocks_for(n_scores), kThreads, 0, stream>>>(staged, mass, n_keys, prefix,
                                                                    Hkv, Hq / Hkv, pooling);
  check_launch("pool_scores_kernel");
  check_cuda(
      cudaMemcpyAsync(scores, staged, n_scores * sizeof(float), cudaMemcpyDeviceToDevice, stream),
      "cudaMemcpyAsync (pool_scores)");
}

}  // namespace adakv::kernels::cuda

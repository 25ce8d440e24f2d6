// Row-wise and element-wise kernels: RMSNorm, SwiGLU, residual add, bias add, the interleave of
// vocab-parallel logit shards. Each follows its CPU twin (kernels/cpu/elementwise.cpp,
// kernels/cpu/cpu_backend.cpp) operation for operation, so results differ from the CPU's only
// by the order of RMSNorm's double sum and by expf's last bit.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.h"

namespace adakv::kernels::cuda {
namespace {

constexpr unsigned kWarp = 32;

// The sum of every thread's `v`, returned to all threads of the block (blockDim.x ==
// kThreads). `partial` holds kThreads / kWarp values.
__device__ double block_sum(double v, double* partial) {
  for (unsigned offset = kWarp / 2; offset > 0; offset /= 2) {
    v += __shfl_down_sync(0xffffffffu, v, offset);
  }
  const unsigned lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  double total = 0;
  for (unsigned i = 0; i < kThreads / kWarp; ++i) total += partial[i];
  // Every thread has read `partial` before the caller's next block_sum overwrites it.
  __syncthreads();
  return total;
}

// One block per row. The sum of squares is in double like the CPU's (a float sum over a long
// row drifts from PyTorch's pairwise reduction); out may alias x: every read of a row happens
// before block_sum returns, every write after.
__global__ void rmsnorm_kernel(float* out, const float* x, const float* w, size_t rows, size_t dim,
                               float eps) {
  __shared__ double partial[kThreads / kWarp];
  for (size_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * dim;
    float* yr = out + r * dim;
    double ss = 0;
    for (size_t i = threadIdx.x; i < dim; i += blockDim.x) ss += double(xr[i]) * xr[i];
    ss = block_sum(ss, partial);
    const float inv = 1.0f / sqrtf(static_cast<float>(ss / dim) + eps);
    for (size_t i = threadIdx.x; i < dim; i += blockDim.x) yr[i] = (xr[i] * inv) * w[i];
  }
}

__global__ void swiglu_kernel(float* out, const float* gate_up, size_t T, size_t F) {
  const size_t n = T * F;
  for (size_t idx = blockIdx.x * size_t(blockDim.x) + threadIdx.x; idx < n;
       idx += size_t(gridDim.x) * blockDim.x) {
    const size_t t = idx / F, i = idx % F;
    const float g = gate_up[t * 2 * F + i], u = gate_up[t * 2 * F + F + i];
    out[idx] = g / (1.0f + expf(-g)) * u;
  }
}

__global__ void add_kernel(float* out, const float* a, const float* b, size_t n) {
  for (size_t idx = blockIdx.x * size_t(blockDim.x) + threadIdx.x; idx < n;
       idx += size_t(gridDim.x) * blockDim.x) {
    out[idx] = a[idx] + b[idx];
  }
}

// One thread per element of the rows x n block: y[r][i] += bias[i], rows ldy floats apart.
__global__ void add_bias_kernel(float* y, const float* bias, size_t rows, size_t n, size_t ldy) {
  const size_t total = rows * n;
  for (size_t idx = blockIdx.x * size_t(blockDim.x) + threadIdx.x; idx < total;
       idx += size_t(gridDim.x) * blockDim.x) {
    const size_t r = idx / n, i = idx % n;
    y[r * ldy + i] += bias[i];
  }
}

// One thread per output element: logits[t][s * cols + c] = gathered[s][t][c].
__global__ void interleave_shards_kernel(float* logits, const float* gathered, size_t shards,
                                         size_t rows, size_t cols) {
  const size_t row_len = shards * cols, n = rows * row_len;
  for (size_t idx = blockIdx.x * size_t(blockDim.x) + threadIdx.x; idx < n;
       idx += size_t(gridDim.x) * blockDim.x) {
    const size_t t = idx / row_len, s = (idx % row_len) / cols, c = idx % cols;
    logits[idx] = gathered[(s * rows + t) * cols + c];
  }
}

}  // namespace

void launch_rmsnorm(float* out, const float* x, const float* w, size_t rows, size_t dim, float eps,
                    cudaStream_t stream) {
  if (rows == 0) return;
  const unsigned blocks = static_cast<unsigned>(std::min(rows, kMaxBlocks));
  rmsnorm_kernel<<<blocks, kThreads, 0, stream>>>(out, x, w, rows, dim, eps);
  check_launch("rmsnorm_kernel");
}

void launch_swiglu(float* out, const float* gate_up, size_t T, size_t F, cudaStream_t stream) {
  if (T == 0 || F == 0) return;
  swiglu_kernel<<<blocks_for(T * F), kThreads, 0, stream>>>(out, gate_up, T, F);
  check_launch("swiglu_kernel");
}

void launch_add(float* out, const float* a, const float* b, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  add_kernel<<<blocks_for(n), kThreads, 0, stream>>>(out, a, b, n);
  check_launch("add_kernel");
}

void launch_add_bias(float* y, const float* bias, size_t rows, size_t n, size_t ldy,
                     cudaStream_t stream) {
  if (rows == 0 || n == 0) return;
  add_bias_kernel<<<blocks_for(rows * n), kThreads, 0, stream>>>(y, bias, rows, n, ldy);
  check_launch("add_bias_kernel");
}

void launch_interleave_shards(float* logits, const float* gathered, size_t shards, size_t rows,
                              size_t cols, cudaStream_t stream) {
  if (shards == 0 || rows == 0 || cols == 0) return;
  interleave_shards_kernel<<<blocks_for(shards * rows * cols), kThreads, 0, stream>>>(
      logits, gathered, shards, rows, cols);
  check_launch("interleave_shards_kernel");
}

}  // namespace adakv::kernels::cuda

// The row gather (kernels/cpu/gather_rows.cpp's twin): a reduction for the range of the row
// numbers (the caller checks it on the host before anything is copied) and the copy itself,
// in the widest word that every address, stride and row length allows.
#include <climits>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.h"

namespace adakv::kernels::cuda {
namespace {

// One block: range[0] = min(rows), range[1] = max(rows).
__global__ void row_range_kernel(const int32_t* rows, size_t n, int32_t* range) {
  __shared__ int32_t lo[kThreads], hi[kThreads];
  int32_t mn = INT_MAX, mx = INT_MIN;
  for (size_t i = threadIdx.x; i < n; i += blockDim.x) {
    mn = min(mn, rows[i]);
    mx = max(mx, rows[i]);
  }
  lo[threadIdx.x] = mn;
  hi[threadIdx.x] = mx;
  __syncthreads();
  for (unsigned half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      lo[threadIdx.x] = min(lo[threadIdx.x], lo[threadIdx.x + half]);
      hi[threadIdx.x] = max(hi[threadIdx.x], hi[threadIdx.x + half]);
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    range[0] = lo[0];
    range[1] = hi[0];
  }
}

// Strides and row length in words of Word; blocks over rows, threads over a row's words.
template <typename Word>
__global__ void gather_rows_kernel(Word* dst, size_t dst_stride, const Word* src, size_t src_stride,
                                   size_t row_words, const int32_t* rows, size_t n) {
  for (size_t i = blockIdx.x; i < n; i += gridDim.x) {
    const Word* s = src + static_cast<size_t>(rows[i]) * src_stride;
    Word* d = dst + i * dst_stride;
    for (size_t w = threadIdx.x; w < row_words; w += blockDim.x) d[w] = s[w];
  }
}

template <typename Word>
void launch_words(void* dst, size_t dst_stride, const void* src, size_t src_stride,
                  size_t row_bytes, const int32_t* rows, size_t n, cudaStream_t stream) {
  const unsigned blocks = static_cast<unsigned>(std::min(n, kMaxBlocks));
  gather_rows_kernel<Word><<<blocks, kThreads, 0, stream>>>(
      static_cast<Word*>(dst), dst_stride / sizeof(Word), static_cast<const Word*>(src),
      src_stride / sizeof(Word), row_bytes / sizeof(Word), rows, n);
  check_launch("gather_rows_kernel");
}

}  // namespace

void launch_row_range(const int32_t* rows, size_t n, int32_t* range, cudaStream_t stream) {
  row_range_kernel<<<1, kThreads, 0, stream>>>(rows, n, range);
  check_launch("row_range_kernel");
}

void launch_gather_rows(void* dst, size_t dst_stride, const void* src, size_t src_stride,
                        size_t row_bytes, const int32_t* rows, size_t n, cudaStream_t stream) {
  if (n == 0 || row_bytes == 0) return;
  const uintptr_t bits = reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src) |
                         dst_stride | src_stride | row_bytes;
  if (bits % 16 == 0)
    return launch_words<uint4>(dst, dst_stride, src, src_stride, row_bytes, rows, n, stream);
  if (bits % 8 == 0)
    return launch_words<uint2>(dst, dst_stride, src, src_stride, row_bytes, rows, n, stream);
  if (bits % 4 == 0)
    return launch_words<uint32_t>(dst, dst_stride, src, src_stride, row_bytes, rows, n, stream);
  if (bits % 2 == 0)
    return launch_words<uint16_t>(dst, dst_stride, src, src_stride, row_bytes, rows, n, stream);
  launch_words<uint8_t>(dst, dst_stride, src, src_stride, row_bytes, rows, n, stream);
}

}  // namespace adakv::kernels::cuda

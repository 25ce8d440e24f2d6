// Row gathers by a list of row numbers (the rows of a batch that produce logits, the staged rows
// of a step): byte copies, one row at a time.
#include <algorithm>
#include <cstring>

#include "kernels/ops.h"

namespace adakv::kernels {

Status gather_rows(void* dst, size_t dst_stride, const void* src, size_t src_stride,
                   size_t row_bytes, const int32_t* rows, size_t n, Stream) {
  if (n == 0 || row_bytes == 0) return Status::kOk;
  if (!dst || !src || !rows) return Status::kInvalidArgument;
  if (n > 1 && dst_stride < row_bytes) return Status::kInvalidArgument;
  int32_t last = 0;
  for (size_t i = 0; i < n; ++i) {
    if (rows[i] < 0) return Status::kInvalidArgument;
    last = std::max(last, rows[i]);
  }
  // The spans written and read, as addresses: they may lie in different allocations.
  const auto d = reinterpret_cast<uintptr_t>(dst), s = reinterpret_cast<uintptr_t>(src);
  const uintptr_t d_end = d + (n - 1) * dst_stride + row_bytes;
  const uintptr_t s_end = s + static_cast<size_t>(last) * src_stride + row_bytes;
  if (d < s_end && s < d_end) return Status::kInvalidArgument;
  for (size_t i = 0; i < n; ++i) {
    std::memcpy(static_cast<uint8_t*>(dst) + i * dst_stride,
                static_cast<const uint8_t*>(src) + static_cast<size_t>(rows[i]) * src_stride,
                row_bytes);
  }
  return Status::kOk;
}

}  // namespace adakv::kernels

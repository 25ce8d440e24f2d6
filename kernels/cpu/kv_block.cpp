// Writing and reading token rows of one KV block (layout: KvBlockLayout in ops.h). Writes
// convert float32 to the block's dtype; reads convert back, and are on the decode hot path
// (attention_paged dequantizes through them), so they are written to vectorise.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "kernels/cpu/bf16_round.h"
#include "kernels/cpu/kv_rows.h"
#include "kernels/ops.h"

namespace adakv::kernels {
namespace {

constexpr float kE4M3Max = 448.0f;

bool valid_rows(const KvBlockLayout& layout, size_t row0, size_t n) {
  return kv_rows::valid_layout(layout) && row0 <= layout.block_tokens &&
         n <= layout.block_tokens - row0;
}

// The byte offset of element (row, 0) of the K or V part (which = 0 or 1).
size_t row_offset(const KvBlockLayout& layout, int which, size_t row) {
  return (which == 0 ? layout.k_offset() : layout.v_offset()) +
         row * layout.head_dim * layout.elem_bytes();
}

size_t scale_offset(const KvBlockLayout& layout, int which, size_t row) {
  return layout.scales_offset() + (which * layout.block_tokens + row) * sizeof(float);
}

// E4M3 decode without branches or tables so that the loop vectorises. For a normal code the
// 7 magnitude bits shifted under float's exponent field give the same value times 2^-120
// (exponent bias 127 instead of 7), so adding 120 to the exponent fixes it; subnormal codes
// are m * 2^-9 directly; 0x7F is NaN. The selects are bit masks: GCC does not if-convert the
// equivalent float ternaries. Tested against e4m3_to_fp32 on all 256 codes.
inline float e4m3_decode(uint8_t c) {
  const uint32_t magnitude = c & 0x7Fu;
  const uint32_t normal = (magnitude << 20) + (120u << 23);
  const uint32_t subnormal = std::bit_cast<uint32_t>(static_cast<float>(magnitude) * 0x1p-9f);
  const uint32_t is_normal = 0u - static_cast<uint32_t>(magnitude >= 8);
  const uint32_t is_nan = 0u - static_cast<uint32_t>(magnitude == 0x7F);
  uint32_t bits = (normal & is_normal) | (subnormal & ~is_normal);
  bits = (bits & ~is_nan) | (0x7FC00000u & is_nan);
  return std::bit_cast<float>(bits | ((c & 0x80u) << 24));
}

}  // namespace

namespace kv_rows {

bool valid_layout(const KvBlockLayout& layout) {
  return layout.block_tokens > 0 && layout.head_dim > 0 && layout.dtype <= KvDtype::kE4M3;
}

// Blocks are byte arrays with no alignment promise for their 16- or 32-bit parts, so every
// multi-byte load and store goes through memcpy (one instruction once compiled).
void write_row(uint8_t* block, const KvBlockLayout& layout, int which, size_t row,
               const float* src) {
  uint8_t* dst = block + row_offset(layout, which, row);
  const size_t dim = layout.head_dim;
  switch (layout.dtype) {
    case KvDtype::kF32:
      std::memcpy(dst, src, dim * sizeof(float));
      break;
    case KvDtype::kBF16:
      for (size_t d = 0; d < dim; ++d) {
        const uint16_t h = bf16_bits_rounded(std::bit_cast<uint32_t>(src[d]));
        std::memcpy(dst + 2 * d, &h, sizeof(h));
      }
      break;
    case KvDtype::kE4M3: {
      float amax = 0.0f;  // NaNs are skipped: std::max keeps the first argument on NaN
      for (size_t d = 0; d < dim; ++d) amax = std::max(amax, std::fabs(src[d]));
      float scale = amax / kE4M3Max;
      // An all-zero row (or one so tiny that its scale underflows) stores zeros with scale 1.
      if (!(scale > 0.0f)) scale = 1.0f;
      for (size_t d = 0; d < dim; ++d) dst[d] = fp32_to_e4m3(src[d] / scale);
      std::memcpy(block + scale_offset(layout, which, row), &scale, sizeof(scale));
      break;
    }
  }
}

// The rows of one part are contiguous in the block, so bf16 is one loop over n * head_dim.
void read_rows(const uint8_t* block, const KvBlockLayout& layout, int which, size_t row0, size_t n,
               float* dst) {
  const uint8_t* src = block + row_offset(layout, which, row0);
  const size_t dim = layout.head_dim;
  switch (layout.dtype) {
    case KvDtype::kF32:
      std::memcpy(dst, src, n * dim * sizeof(float));
      break;
    case KvDtype::kBF16:
#pragma omp simd
      for (size_t i = 0; i < n * dim; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, sizeof(h));
        dst[i] = bf16_to_fp32(h);
      }
      break;
    case KvDtype::kE4M3:
      for (size_t r = 0; r < n; ++r) {
        float scale;
        std::memcpy(&scale, block + scale_offset(layout, which, row0 + r), sizeof(scale));
        const uint8_t* row = src + r * dim;
        float* out = dst + r * dim;
        if (std::isnan(scale)) {
          // A NaN scale makes the whole row that NaN, quieted: which NaN a NaN code times a NaN
          // scale gives depends on the operand order the compiler picks, and the CUDA twin
          // (e4m3_dequantize) must give the same bits.
          const float quiet = std::bit_cast<float>(std::bit_cast<uint32_t>(scale) | 0x00400000u);
          std::fill(out, out + dim, quiet);
          continue;
        }
#pragma omp simd
        for (size_t d = 0; d < dim; ++d) out[d] = e4m3_decode(row[d]) * scale;
      }
      break;
  }
}

}  // namespace kv_rows

using kv_rows::read_rows;
using kv_rows::write_row;

Status kv_block_write(uint8_t* block, const KvBlockLayout& layout, size_t row0, const float* k,
                      const float* v, size_t n, size_t src_stride, Stream) {
  if (!valid_rows(layout, row0, n)) return Status::kInvalidArgument;
  if (n == 0) return Status::kOk;
  if (!block || !k || !v) return Status::kInvalidArgument;
  if (n > 1 && src_stride < layout.head_dim) return Status::kInvalidArgument;  // rows overlap
  for (size_t i = 0; i < n; ++i) {
    write_row(block, layout, 0, row0 + i, k + i * src_stride);
    write_row(block, layout, 1, row0 + i, v + i * src_stride);
  }
  return Status::kOk;
}

Status kv_block_read(const uint8_t* block, const KvBlockLayout& layout, size_t row0, size_t n,
                     float* k, float* v, Stream) {
  if (!valid_rows(layout, row0, n)) return Status::kInvalidArgument;
  if (n == 0) return Status::kOk;
  if (!block || !k || !v) return Status::kInvalidArgument;
  read_rows(block, layout, 0, row0, n, k);
  read_rows(block, layout, 1, row0, n, v);
  return Status::kOk;
}

}  // namespace adakv::kernels

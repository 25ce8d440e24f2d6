// The per-element math of the CUDA KV-pool and attention kernels (kv_ops.cu, attention_ops.cu)
// as __host__ __device__ functions, so that tests/gpu/device_math_kv.cu runs the very same code
// on the host against the CPU twins (kernels/cpu/kv_convert.cpp, kv_block.cpp, kv_pool.cpp):
//  - bf16 rounding and widening, bit for bit the CPU's bf16_bits_rounded and bf16_to_fp32;
//  - E4M3 encoding and decoding, bit for bit fp32_to_e4m3 and kv_block.cpp's e4m3_decode;
//  - the E4M3 row scale (max |x| over the row, NaNs skipped, mapped to 448) and the division
//    by it, bit for bit kv_rows::write_row;
//  - the decoded product code * scale, bit for bit what kv_rows::read_rows gives on x86,
//    NaN patterns included (a GPU multiply returns its own canonical NaN, so the NaN cases are
//    spelled out);
//  - the byte offsets of a slot's K row, V row and E4M3 scales in the pool (KvBlockLayout).
// Every rounding step is explicit (div_rn, mul_rn): nvcc neither fuses nor approximates them.
//
// Blocks are byte arrays with no alignment promise for their 16- and 32-bit parts (an E4M3
// block's scales sit at 2 * block_tokens * head_dim bytes, odd multiples of 2 included, and a
// caller may hand kv_block_write any byte address), so multi-byte loads and stores check the
// address and fall back to single bytes.
#pragma once

#include <math.h>
#include <string.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/rounding.cuh"
#include "kernels/kv_layout.h"

namespace adakv::kernels::cuda {

// ---- Bits and rounding steps ------------------------------------------------------------------

__host__ __device__ inline uint32_t kv_float_bits(float x) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(x);
#else
  uint32_t b;
  memcpy(&b, &x, sizeof b);
  return b;
#endif
}

__host__ __device__ inline float kv_bits_float(uint32_t b) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(b);
#else
  float x;
  memcpy(&x, &b, sizeof x);
  return x;
#endif
}

__host__ __device__ inline bool kv_is_nan(float x) {
  return (kv_float_bits(x) & 0x7FFFFFFFu) > 0x7F800000u;
}

// ---- Unaligned little-endian loads and stores -------------------------------------------------

__host__ __device__ inline uint16_t load_u16_bytewise(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | (p[1] << 8));
}

__host__ __device__ inline uint32_t load_u32_bytewise(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}

__host__ __device__ inline void store_u16_bytewise(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}

__host__ __device__ inline void store_u32_bytewise(uint8_t* p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
  p[2] = static_cast<uint8_t>(v >> 16);
  p[3] = static_cast<uint8_t>(v >> 24);
}

__host__ __device__ inline uint16_t load_u16(const uint8_t* p) {
#ifdef __CUDA_ARCH__
  if ((reinterpret_cast<uintptr_t>(p) & 1u) == 0) return *reinterpret_cast<const uint16_t*>(p);
  return load_u16_bytewise(p);
#else
  uint16_t v;
  memcpy(&v, p, sizeof v);
  return v;
#endif
}

__host__ __device__ inline uint32_t load_u32(const uint8_t* p) {
#ifdef __CUDA_ARCH__
  if ((reinterpret_cast<uintptr_t>(p) & 3u) == 0) return *reinterpret_cast<const uint32_t*>(p);
  return load_u32_bytewise(p);
#else
  uint32_t v;
  memcpy(&v, p, sizeof v);
  return v;
#endif
}

__host__ __device__ inline void store_u16(uint8_t* p, uint16_t v) {
#ifdef __CUDA_ARCH__
  if ((reinterpret_cast<uintptr_t>(p) & 1u) == 0) {
    *reinterpret_cast<uint16_t*>(p) = v;
    return;
  }
  store_u16_bytewise(p, v);
#else
  memcpy(p, &v, sizeof v);
#endif
}

__host__ __device__ inline void store_u32(uint8_t* p, uint32_t v) {
#ifdef __CUDA_ARCH__
  if ((reinterpret_cast<uintptr_t>(p) & 3u) == 0) {
    *reinterpret_cast<uint32_t*>(p) = v;
    return;
  }
  store_u32_bytewise(p, v);
#else
  memcpy(p, &v, sizeof v);
#endif
}

// ---- bfloat16 ---------------------------------------------------------------------------------

// Round to nearest even on the 16 dropped bits; a NaN keeps its top payload bits with the quiet
// bit forced (kernels/cpu/bf16_round.h, operation for operation).
__host__ __device__ inline uint16_t bf16_round(float x) {
  const uint32_t bits = kv_float_bits(x);
  const uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
  const uint32_t nan = (bits >> 16) | 0x0040u;
  return static_cast<uint16_t>((bits & 0x7FFFFFFFu) > 0x7F800000u ? nan : rounded);
}

__host__ __device__ inline float bf16_widen(uint16_t h) {
  return kv_bits_float(static_cast<uint32_t>(h) << 16);
}

// ---- OCP FP8 E4M3 (e4m3fn: no infinities, max 448, NaN = S.1111.111) -------------------------

inline constexpr float kE4M3Max = 448.0f;

// fp32_to_e4m3 (kv_convert.cpp): round to nearest even, saturating to +-448 (infinities
// included); NaN -> 0x7F.
__host__ __device__ inline uint8_t e4m3_encode(float x) {
  if (kv_is_nan(x)) return 0x7F;
  const uint32_t bits = kv_float_bits(x);
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80u);
  const float a = fabsf(x);
  if (a >= kE4M3Max) return sign | 0x7E;
  if (a < 0x1p-6f) {
    // m * 2^-9, m = 0..8: the scaling is exact and rintf rounds ties to even.
    return sign | static_cast<uint8_t>(rintf(a * 512.0f));
  }
  const uint32_t abits = bits & 0x7FFFFFFFu;
  const uint32_t lsb = (abits >> 20) & 1u;
  const uint32_t rounded = (abits + 0x7FFFFu + lsb) >> 20;
  return sign | static_cast<uint8_t>(rounded - (120u << 3));
}

// kv_block.cpp's e4m3_decode: the exact value of a code; the NaN codes give sign | 0x7FC00000.
__host__ __device__ inline float e4m3_decode(uint8_t c) {
  const uint32_t magnitude = c & 0x7Fu;
  const uint32_t sign = static_cast<uint32_t>(c & 0x80u) << 24;
  if (magnitude == 0x7F) return kv_bits_float(0x7FC00000u | sign);
  if (magnitude >= 8) return kv_bits_float(((magnitude << 20) + (120u << 23)) | sign);
  return kv_bits_float(kv_float_bits(static_cast<float>(magnitude) * 0x1p-9f) | sign);
}

// One step of a row's max |x| in d order (std::max(amax, std::fabs(x)) of kv_rows::write_row):
// a NaN x leaves amax as it is. Started from +0, the result never is a NaN.
__host__ __device__ inline float e4m3_amax_step(float amax, float x) {
  const float a = fabsf(x);
  return amax < a ? a : amax;
}

// Two partial maxima of one row (each from e4m3_amax_step, never NaN, both >= 0): the maximum is
// the same in any order, so lanes may fold their partials as a tree.
__host__ __device__ inline float e4m3_amax_merge(float a, float b) {
  return a < b ? b : a;
}

// The row's scale: max |x| mapped to 448; an all-zero row (or one whose scale underflows) gets 1.
__host__ __device__ inline float e4m3_row_scale(float amax) {
  const float scale = div_rn(amax, kE4M3Max);
  return scale > 0.0f ? scale : 1.0f;
}

__host__ __device__ inline uint8_t e4m3_quantize(float x, float scale) {
  return e4m3_encode(div_rn(x, scale));
}

// e4m3_decode(code) * scale with the NaN results of the CPU's kv_block_read (x86): a NaN operand
// comes back quieted, the scale's when both are NaN (the operand order GCC gives that multiply;
// the ops never store a NaN scale), and 0 * inf gives the default NaN 0xFFC00000.
__host__ __device__ inline float e4m3_dequantize(uint8_t code, float scale) {
  if (kv_is_nan(scale)) return kv_bits_float(kv_float_bits(scale) | 0x00400000u);
  const float x = e4m3_decode(code);
  if (kv_is_nan(x)) return x;
  const float p = mul_rn(x, scale);
  return kv_is_nan(p) ? kv_bits_float(0xFFC00000u) : p;
}

// ---- The pool's geometry ----------------------------------------------------------------------

// KvBlockLayout's offsets as plain values a kernel can take by value (KvBlockLayout's methods
// are host functions). Block b starts at pool + b * block_bytes:
//   K rows [block_tokens][row_bytes] at 0, V rows at v_offset, then for E4M3 the K scales
//   [block_tokens] and the V scales [block_tokens] as float32 at scales_offset.
struct KvGeometry {
  size_t block_tokens, head_dim, row_bytes, v_offset, scales_offset, block_bytes;
  KvDtype dtype;
};

inline KvGeometry kv_geometry(const KvBlockLayout& layout) {
  return KvGeometry{
      layout.block_tokens, layout.head_dim,        layout.head_dim * layout.elem_bytes(),
      layout.v_offset(),   layout.scales_offset(), layout.block_bytes(),
      layout.dtype};
}

// The byte offset, from the block's start, of row `row` of the K (which = 0) or V (which = 1)
// part, and of that row's E4M3 scale.
__host__ __device__ inline size_t kv_row_offset(const KvGeometry& g, int which, size_t row) {
  return (which == 0 ? 0 : g.v_offset) + row * g.row_bytes;
}

__host__ __device__ inline size_t kv_scale_offset(const KvGeometry& g, int which, size_t row) {
  return g.scales_offset + (static_cast<size_t>(which) * g.block_tokens + row) * sizeof(float);
}

// Slot s = block id * block_tokens + row: the byte offset of its block in the pool, and its row.
__host__ __device__ inline size_t kv_slot_block(const KvGeometry& g, size_t slot) {
  return slot / g.block_tokens * g.block_bytes;
}

__host__ __device__ inline size_t kv_slot_row(const KvGeometry& g, size_t slot) {
  return slot % g.block_tokens;
}

// The bytes of one slot laid end to end (kv_copy_rows' snapshot): K row, V row and, for E4M3,
// the K scale then the V scale.
__host__ __device__ inline size_t kv_slot_bytes(const KvGeometry& g) {
  return 2 * g.row_bytes + (g.dtype == KvDtype::kE4M3 ? 2 * sizeof(float) : 0);
}

// The pool offset of byte b (< kv_slot_bytes) of slot `slot` in that order.
__host__ __device__ inline size_t kv_slot_byte_offset(const KvGeometry& g, size_t slot, size_t b) {
  const size_t block = kv_slot_block(g, slot), row = kv_slot_row(g, slot);
  if (b < g.row_bytes) return block + kv_row_offset(g, 0, row) + b;
  if (b < 2 * g.row_bytes) return block + kv_row_offset(g, 1, row) + (b - g.row_bytes);
  const size_t s = b - 2 * g.row_bytes;  // 0..7: the K scale's 4 bytes, then the V scale's
  return block + kv_scale_offset(g, static_cast<int>(s / sizeof(float)), row) + s % sizeof(float);
}

// ---- Elements of a row ------------------------------------------------------------------------

// Element d of a stored row (row points at the row's first byte) as float32; `scale` is the
// row's E4M3 scale (ignored for the other dtypes). kv_block_read's value, bit for bit.
__host__ __device__ inline float kv_load_element(const uint8_t* row, KvDtype dtype, size_t d,
                                                 float scale) {
  switch (dtype) {
    case KvDtype::kF32:
      return kv_bits_float(load_u32(row + d * sizeof(float)));
    case KvDtype::kBF16:
      return bf16_widen(load_u16(row + d * sizeof(uint16_t)));
    default:
      return e4m3_dequantize(row[d], scale);
  }
}

// Element d of a row being stored; `scale` is the row's E4M3 scale (e4m3_row_scale over the
// whole row), ignored for the other dtypes. kv_block_write's bytes.
__host__ __device__ inline void kv_store_element(uint8_t* row, KvDtype dtype, size_t d, float x,
                                                 float scale) {
  switch (dtype) {
    case KvDtype::kF32:
      store_u32(row + d * sizeof(float), kv_float_bits(x));
      break;
    case KvDtype::kBF16:
      store_u16(row + d * sizeof(uint16_t), bf16_round(x));
      break;
    default:
      row[d] = e4m3_quantize(x, scale);
      break;
  }
}

// A row's E4M3 scale, stored and read at kv_scale_offset.
__host__ __device__ inline float kv_load_scale(const uint8_t* at) {
  return kv_bits_float(load_u32(at));
}

__host__ __device__ inline void kv_store_scale(uint8_t* at, float scale) {
  store_u32(at, kv_float_bits(scale));
}

}  // namespace adakv::kernels::cuda

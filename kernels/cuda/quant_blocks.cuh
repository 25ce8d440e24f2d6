// The dequantization of the GGUF (ggml) weight formats of kernels/quant.h as __host__ __device__
// functions: one weight element of a row (WeightLayout::kRows) or of interleaved weights
// (kInterleaved) decoded to float32. The CUDA kernels (quant_ops.cu, through quant_tiles.cuh)
// decode with exactly these, and tests/gpu/device_math_quant.cu runs them on the host against the
// CPU's dequantization (kernels/cpu/quant_matmul.cpp scalar_dequant_rows and its piece<F>,
// quant_interleaved.cpp dequantize_interleaved_row) bit for bit.
//
// The value of a quantized element is the CPU scalar code's
//   dw * float(s) * float(q) + mw
// (dw the piece's float scale, s Q6_K's 16-element scale or 1, q the stored integer, mw the
// piece's float min or 0), each operation rounded on its own: the products are exact in float32
// anyway (at most 11 + 8 + 6 significant bits), so the one rounding is the final add, and an FMA
// would give the same bits; spelling the steps out (mul_rn, add_rn) keeps it so whatever the
// compiler contracts. Adding a zero mw is kept too: it turns d * 0 = -0 (d < 0) into +0, as the
// CPU does.
//
// Every byte is loaded on its own (little-endian, like GGUF and both hosts and GPUs), so a row
// may start at any address.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/cuda/rounding.cuh"
#include "kernels/quant.h"

namespace adakv::kernels::cuda::qblocks {

// ---- Bits and roundings -------------------------------------------------------------------

__host__ __device__ inline float bits_to_float(uint32_t b) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(b);
#else
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
#endif
}

// a * b + c in one rounding (IEEE fma on both sides).
__host__ __device__ inline float fma_rn(float a, float b, float c) {
#ifdef __CUDA_ARCH__
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

__host__ __device__ inline uint32_t load_u16(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8;
}

__host__ __device__ inline uint32_t load_u32(const uint8_t* p) {
  return load_u16(p) | load_u16(p + 2) << 16;
}

// IEEE half to float, exact, in integer operations only: subnormals are normalized, infinities
// stay infinite and a NaN keeps its sign and payload (shifted into the top of float's mantissa),
// as kernels/half.h fp16_to_fp32 does.
__host__ __device__ inline float half_to_float(uint32_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t mant = h & 0x3FFu;
  if (exp == 0x1F) return bits_to_float(sign | 0x7F800000u | mant << 13);
  if (exp != 0) return bits_to_float(sign | (exp + 112) << 23 | mant << 13);
  if (mant == 0) return bits_to_float(sign);
  // mant * 2^-24 with its top bit at position p: 1.f * 2^(p - 24), float exponent p + 103.
  int p = 9;
  while ((mant >> p) == 0) --p;
  mant = (mant << (23 - p)) & 0x7FFFFFu;
  return bits_to_float(sign | static_cast<uint32_t>(p + 103) << 23 | mant);
}

__host__ __device__ inline float bf16_to_float(uint32_t h) {
  return bits_to_float((h & 0xFFFFu) << 16);
}

__host__ __device__ inline float load_half(const uint8_t* p) {
  return half_to_float(load_u16(p));
}

// ---- Block geometry -----------------------------------------------------------------------

// block_elements(f) and block_bytes(f) of kernels/quant.h, usable on the device.
__host__ __device__ constexpr size_t elements_of(WeightFormat f) {
  switch (f) {
    case WeightFormat::kF32:
    case WeightFormat::kF16:
    case WeightFormat::kBF16:
      return 1;
    case WeightFormat::kQ4_K:
    case WeightFormat::kQ5_K:
    case WeightFormat::kQ6_K:
      return 256;
    default:
      return 32;
  }
}

__host__ __device__ constexpr size_t bytes_of(WeightFormat f) {
  switch (f) {
    case WeightFormat::kF32:
      return 4;
    case WeightFormat::kF16:
    case WeightFormat::kBF16:
      return 2;
    case WeightFormat::kQ8_0:
      return 34;
    case WeightFormat::kQ4_0:
      return 18;
    case WeightFormat::kQ4_1:
      return 20;
    case WeightFormat::kQ5_0:
      return 22;
    case WeightFormat::kQ5_1:
      return 24;
    case WeightFormat::kQ4_K:
      return 144;
    case WeightFormat::kQ5_K:
      return 176;
    case WeightFormat::kQ6_K:
      return 210;
  }
  return 0;
}

// ---- Rows layout --------------------------------------------------------------------------

// The CPU's value of an element: dw * s * q + mw, step by step (see the top of this file).
__host__ __device__ inline float piece_value(float dw, int s, int q, float mw) {
  return add_rn(mul_rn(mul_rn(dw, static_cast<float>(s)), static_cast<float>(q)), mw);
}

// The 6-bit scale and min of 32-element sub-block `sub` (0..7) of a Q4_K / Q5_K block from its
// 12 scale bytes (kernels/cpu/quant_impl.h k_scales_mins, one entry of it).
__host__ __device__ inline void k_scale_min(const uint8_t* s, int sub, int& sc, int& mn) {
  if (sub < 4) {
    sc = s[sub] & 0x3F;
    mn = s[sub + 4] & 0x3F;
  } else {
    sc = (s[sub + 4] & 0x0F) | ((s[sub - 4] >> 2) & 0x30);
    mn = (s[sub + 4] >> 4) | ((s[sub] >> 2) & 0x30);
  }
}

// Element k of a row of format F (the row starts at `row`, k < the row's length), as float32.
template <WeightFormat F>
__host__ __device__ inline float weight_element(const uint8_t* row, size_t k) {
  if constexpr (F == WeightFormat::kF32) {
    return bits_to_float(load_u32(row + 4 * k));
  } else if constexpr (F == WeightFormat::kF16) {
    return half_to_float(load_u16(row + 2 * k));
  } else if constexpr (F == WeightFormat::kBF16) {
    return bf16_to_float(load_u16(row + 2 * k));
  } else {
    const size_t j = k / 32;  // the 32-element piece
    const int l = static_cast<int>(k % 32);
    if constexpr (F == WeightFormat::kQ8_0) {
      const uint8_t* b = row + j * 34;
      return piece_value(load_half(b), 1, static_cast<int8_t>(b[2 + l]), 0.0f);
    } else if constexpr (F == WeightFormat::kQ4_0 || F == WeightFormat::kQ4_1) {
      constexpr bool kMin = F == WeightFormat::kQ4_1;
      const uint8_t* b = row + j * (kMin ? 20 : 18);
      const uint8_t* qs = b + (kMin ? 4 : 2);
      const int nib = l < 16 ? qs[l] & 0x0F : qs[l - 16] >> 4;
      return piece_value(load_half(b), 1, nib - (kMin ? 0 : 8), kMin ? load_half(b + 2) : 0.0f);
    } else if constexpr (F == WeightFormat::kQ5_0 || F == WeightFormat::kQ5_1) {
      constexpr bool kMin = F == WeightFormat::kQ5_1;
      const uint8_t* b = row + j * (kMin ? 24 : 22);
      const uint32_t qh = load_u32(b + (kMin ? 4 : 2));
      const uint8_t* qs = b + (kMin ? 8 : 6);
      const int nib = l < 16 ? qs[l] & 0x0F : qs[l - 16] >> 4;
      const int q = nib | static_cast<int>((qh >> l) & 1) << 4;
      return piece_value(load_half(b), 1, q - (kMin ? 0 : 16), kMin ? load_half(b + 2) : 0.0f);
    } else if constexpr (F == WeightFormat::kQ4_K || F == WeightFormat::kQ5_K) {
      constexpr bool k5 = F == WeightFormat::kQ5_K;
      const uint8_t* b = row + (j / 8) * (k5 ? 176 : 144);
      const int sub = static_cast<int>(j % 8);
      int sc, mn;
      k_scale_min(b + 4, sub, sc, mn);
      const float dw = mul_rn(load_half(b), static_cast<float>(sc));
      const float mw = -mul_rn(load_half(b + 2), static_cast<float>(mn));
      const uint8_t* qs = b + (k5 ? 48 : 16);
      int q = (qs[(sub / 2) * 32 + l] >> (4 * (sub % 2))) & 0x0F;
      if constexpr (k5) q |= ((b[16 + l] >> sub) & 1) << 4;
      return piece_value(dw, 1, q, mw);
    } else {
      static_assert(F == WeightFormat::kQ6_K, "a format of kernels/quant.h");
      const uint8_t* b = row + (j / 8) * 210;
      const int sub = static_cast<int>(j % 8);
      const int c = sub / 4, g = sub % 4;
      const uint8_t* ql = b + c * 64 + (g % 2) * 32;
      const uint8_t* qh = b + 128 + c * 32;
      const int s = static_cast<int8_t>(b[192 + 8 * c + 2 * g + l / 16]);
      const int lo = (ql[l] >> (4 * (g / 2))) & 0x0F;
      const int hi = (qh[l] >> (2 * g)) & 0x03;
      return piece_value(load_half(b + 208), s, (lo | hi << 4) - 32, 0.0f);
    }
  }
}

// ---- Interleaved layout (Q8_0, Q4_0, Q4_1) -------------------------------------------------

// Whether F has an interleaved layout (kernels/quant.h interleavable).
__host__ __device__ constexpr bool interleavable_format(WeightFormat f) {
  return f == WeightFormat::kQ8_0 || f == WeightFormat::kQ4_0 || f == WeightFormat::kQ4_1;
}

// Element k of row n of N x K weights `w` interleaved in groups of kInterleaveRows rows
// (kernels/quant.h WeightLayout::kInterleaved), as float32: the value
// kernels/cpu/quant_interleaved.cpp block_weight gives (Q8_0 d q, Q4_0 d (q - 8), Q4_1 d q + m in
// one rounding), plus 0 as its dequantize_interleaved_row adds (a -0 reads +0).
template <WeightFormat F>
__host__ __device__ inline float interleaved_element(const uint8_t* w, size_t K, size_t n,
                                                     size_t k) {
  static_assert(interleavable_format(F), "Q8_0, Q4_0 or Q4_1");
  constexpr size_t kG = kInterleaveRows;
  constexpr size_t kBlock = bytes_of(F) * kG;  // one block of 32 elements of kG rows
  const uint8_t* blk = w + (n / kG) * (K / 32) * kBlock + (k / 32) * kBlock;
  const size_t j = n % kG, l = k % 32;
  const float d = load_half(blk + 2 * j);
  const uint8_t* q = blk + (F == WeightFormat::kQ4_1 ? 64 : 32);
  float v;
  if constexpr (F == WeightFormat::kQ8_0) {
    v = mul_rn(d, static_cast<float>(static_cast<int8_t>(q[l * kG + j])));
  } else {
    const uint8_t byte = q[(l / 2) * kG + j];
    const int nib = l % 2 ? byte >> 4 : byte & 0x0F;
    if constexpr (F == WeightFormat::kQ4_0) {
      v = mul_rn(d, static_cast<float>(nib - 8));
    } else {
      v = fma_rn(static_cast<float>(nib), d, load_half(blk + 32 + 2 * j));
    }
  }
  return add_rn(v, 0.0f);
}

}  // namespace adakv::kernels::cuda::qblocks

// decode_blocks (kernels/quant.h): the scalar decoding of every weight format to float32, one
// function per block format. Each follows the arithmetic of the `gguf` PyPI package's dequantize
// step by step (float32 products and sums, each rounded on its own), so the GGUF reader's
// dequantize (model/gguf/dequant.cpp) is bit-identical to that package, and the scalar level's
// float32 panels are the same values.
#include <cstring>

#include "kernels/cpu/quant_impl.h"
#include "kernels/half.h"
#include "kernels/quant.h"

// A fused multiply-add rounds once where numpy rounds twice: forbid contraction in this file.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace adakv::kernels {

using quant_detail::k_scales_mins;
using quant_detail::load_half;
using quant_detail::load_u16;
using quant_detail::load_u32;

namespace {

// Q4_0 / Q4_1: byte l holds element l (low nibble) and element l + 16 (high nibble).
void decode_q4_0(const uint8_t* b, float* y) {
  const float d = load_half(b);
  const uint8_t* qs = b + 2;
  for (int l = 0; l < 16; ++l) {
    y[l] = d * static_cast<float>((qs[l] & 0x0F) - 8);
    y[l + 16] = d * static_cast<float>((qs[l] >> 4) - 8);
  }
}

void decode_q4_1(const uint8_t* b, float* y) {
  const float d = load_half(b);
  const float m = load_half(b + 2);
  const uint8_t* qs = b + 4;
  for (int l = 0; l < 16; ++l) {
    y[l] = d * static_cast<float>(qs[l] & 0x0F) + m;
    y[l + 16] = d * static_cast<float>(qs[l] >> 4) + m;
  }
}

// Q5_0 / Q5_1: nibbles as Q4, and bit j of qh is the fifth bit of element j.
void decode_q5_0(const uint8_t* b, float* y) {
  const float d = load_half(b);
  const uint32_t qh = load_u32(b + 2);
  const uint8_t* qs = b + 6;
  for (int l = 0; l < 16; ++l) {
    const int lo = (qs[l] & 0x0F) | static_cast<int>(((qh >> l) & 1) << 4);
    const int hi = (qs[l] >> 4) | static_cast<int>(((qh >> (l + 16)) & 1) << 4);
    y[l] = d * static_cast<float>(lo - 16);
    y[l + 16] = d * static_cast<float>(hi - 16);
  }
}

void decode_q5_1(const uint8_t* b, float* y) {
  const float d = load_half(b);
  const float m = load_half(b + 2);
  const uint32_t qh = load_u32(b + 4);
  const uint8_t* qs = b + 8;
  for (int l = 0; l < 16; ++l) {
    const int lo = (qs[l] & 0x0F) | static_cast<int>(((qh >> l) & 1) << 4);
    const int hi = (qs[l] >> 4) | static_cast<int>(((qh >> (l + 16)) & 1) << 4);
    y[l] = d * static_cast<float>(lo) + m;
    y[l + 16] = d * static_cast<float>(hi) + m;
  }
}

void decode_q8_0(const uint8_t* b, float* y) {
  const float d = load_half(b);
  const int8_t* qs = reinterpret_cast<const int8_t*>(b + 2);
  for (int l = 0; l < 32; ++l) y[l] = static_cast<float>(qs[l]) * d;
}

// Q4_K: d, dmin, scales[12], qs[128]. Element c*64 + h*32 + l is nibble h of qs[c*32 + l].
void decode_q4_k(const uint8_t* b, float* y) {
  const float d = load_half(b);
  const float dmin = load_half(b + 2);
  int sc[8], mn[8];
  k_scales_mins(b + 4, sc, mn);
  const uint8_t* qs = b + 16;
  for (int sub = 0; sub < 8; ++sub) {
    const float ds = d * static_cast<float>(sc[sub]);
    const float dm = dmin * static_cast<float>(mn[sub]);
    const int c = sub / 2, h = sub % 2;
    for (int l = 0; l < 32; ++l) {
      const float q = static_cast<float>((qs[c * 32 + l] >> (4 * h)) & 0x0F);
      y[sub * 32 + l] = ds * q - dm;
    }
  }
}

// Q5_K: d, dmin, scales[12], qh[32], qs[128]; low nibbles as Q4_K, bit `sub` of qh[l] on top.
void decode_q5_k(const uint8_t* b, float* y) {
  const float d = load_half(b);
  const float dmin = load_half(b + 2);
  int sc[8], mn[8];
  k_scales_mins(b + 4, sc, mn);
  const uint8_t* qh = b + 16;
  const uint8_t* qs = b + 48;
  for (int sub = 0; sub < 8; ++sub) {
    const float ds = d * static_cast<float>(sc[sub]);
    const float dm = dmin * static_cast<float>(mn[sub]);
    const int c = sub / 2, h = sub % 2;
    for (int l = 0; l < 32; ++l) {
      const int q = ((qs[c * 32 + l] >> (4 * h)) & 0x0F) | (((qh[l] >> sub) & 1) << 4);
      y[sub * 32 + l] = ds * static_cast<float>(q) - dm;
    }
  }
}

// Q6_K: ql[128], qh[64], int8 scales[16], d. Element c*128 + r (c < 2, r < 128): low nibble
// h = r / 64 of ql[c*64 + r % 64], high bits s = r / 32 of qh[c*32 + r % 32]; 16 per scale.
void decode_q6_k(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* scales = reinterpret_cast<const int8_t*>(b + 192);
  const float d = load_half(b + 208);
  float ds[16];
  for (int i = 0; i < 16; ++i) ds[i] = d * static_cast<float>(scales[i]);
  for (int e = 0; e < 256; ++e) {
    const int c = e / 128, r = e % 128;
    const int lo = (ql[c * 64 + r % 64] >> (4 * (r / 64))) & 0x0F;
    const int hi = (qh[c * 32 + r % 32] >> (2 * (r / 32))) & 0x03;
    y[e] = ds[e / 16] * static_cast<float>((lo | (hi << 4)) - 32);
  }
}

using BlockFn = void (*)(const uint8_t*, float*);

BlockFn block_fn(WeightFormat f) {
  switch (f) {
    case WeightFormat::kQ4_0:
      return decode_q4_0;
    case WeightFormat::kQ4_1:
      return decode_q4_1;
    case WeightFormat::kQ5_0:
      return decode_q5_0;
    case WeightFormat::kQ5_1:
      return decode_q5_1;
    case WeightFormat::kQ8_0:
      return decode_q8_0;
    case WeightFormat::kQ4_K:
      return decode_q4_k;
    case WeightFormat::kQ5_K:
      return decode_q5_k;
    case WeightFormat::kQ6_K:
      return decode_q6_k;
    default:
      return nullptr;
  }
}

}  // namespace

void decode_blocks(WeightFormat f, const void* src, float* dst, size_t n) {
  if (n == 0) return;  // dst and src may be null then
  const uint8_t* p = static_cast<const uint8_t*>(src);
  switch (f) {
    case WeightFormat::kF32:
      std::memcpy(dst, p, n * sizeof(float));
      return;
    case WeightFormat::kF16:
      for (size_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(load_u16(p + 2 * i));
      return;
    case WeightFormat::kBF16:
      for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(load_u16(p + 2 * i));
      return;
    default:
      break;
  }
  const BlockFn fn = block_fn(f);
  const size_t elems = block_elements(f), bytes = block_bytes(f);
  for (size_t i = 0; i < n / elems; ++i) fn(p + i * bytes, dst + i * elems);
}

}  // namespace adakv::kernels

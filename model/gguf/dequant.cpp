// Block decoders. Each follows the arithmetic of the `gguf` PyPI package's dequantize step by
// step (float32 products and sums, each rounded on its own), so results are bit-identical.
#include "model/gguf/dequant.h"

#include <fmt/format.h>

#include <cstring>

// A fused multiply-add rounds once where numpy rounds twice: forbid contraction in this file.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace adakv::gguf {

namespace {

struct TypeTraits {
  GgmlType type;
  const char* name;
  uint32_t block_elements;
  uint32_t block_bytes;
  bool can_dequantize;
};

// Q8_1 and Q8_K are activation formats: sizes are known, but the oracle has no decoder.
constexpr TypeTraits kTraits[] = {
    {GgmlType::F32, "F32", 1, 4, true},       {GgmlType::F16, "F16", 1, 2, true},
    {GgmlType::Q4_0, "Q4_0", 32, 18, true},   {GgmlType::Q4_1, "Q4_1", 32, 20, true},
    {GgmlType::Q5_0, "Q5_0", 32, 22, true},   {GgmlType::Q5_1, "Q5_1", 32, 24, true},
    {GgmlType::Q8_0, "Q8_0", 32, 34, true},   {GgmlType::Q8_1, "Q8_1", 32, 36, false},
    {GgmlType::Q2_K, "Q2_K", 256, 84, true},  {GgmlType::Q3_K, "Q3_K", 256, 110, true},
    {GgmlType::Q4_K, "Q4_K", 256, 144, true}, {GgmlType::Q5_K, "Q5_K", 256, 176, true},
    {GgmlType::Q6_K, "Q6_K", 256, 210, true}, {GgmlType::Q8_K, "Q8_K", 256, 292, false},
    {GgmlType::BF16, "BF16", 1, 2, true},
};

const TypeTraits* find_traits(uint32_t id) {
  for (const TypeTraits& t : kTraits) {
    if (static_cast<uint32_t>(t.type) == id) return &t;
  }
  return nullptr;
}

const TypeTraits& traits(GgmlType t) {
  const TypeTraits* tr = find_traits(static_cast<uint32_t>(t));
  if (!tr) throw GgufError(fmt::format("gguf: unknown ggml type {}", static_cast<uint32_t>(t)));
  return *tr;
}

uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

float load_f16(const uint8_t* p) {
  return fp16_to_fp32(load_u16(p));
}

// Q4_0 / Q4_1: byte l holds element l (low nibble) and element l + 16 (high nibble).
void dequant_q4_0(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  const uint8_t* qs = b + 2;
  for (int l = 0; l < 16; ++l) {
    y[l] = d * static_cast<float>((qs[l] & 0x0F) - 8);
    y[l + 16] = d * static_cast<float>((qs[l] >> 4) - 8);
  }
}

void dequant_q4_1(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  const float m = load_f16(b + 2);
  const uint8_t* qs = b + 4;
  for (int l = 0; l < 16; ++l) {
    y[l] = d * static_cast<float>(qs[l] & 0x0F) + m;
    y[l + 16] = d * static_cast<float>(qs[l] >> 4) + m;
  }
}

// Q5_0 / Q5_1: nibbles as Q4, and bit j of qh is the fifth bit of element j.
void dequant_q5_0(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  const uint32_t qh = load_u32(b + 2);
  const uint8_t* qs = b + 6;
  for (int l = 0; l < 16; ++l) {
    const int lo = (qs[l] & 0x0F) | static_cast<int>(((qh >> l) & 1) << 4);
    const int hi = (qs[l] >> 4) | static_cast<int>(((qh >> (l + 16)) & 1) << 4);
    y[l] = d * static_cast<float>(lo - 16);
    y[l + 16] = d * static_cast<float>(hi - 16);
  }
}

void dequant_q5_1(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  const float m = load_f16(b + 2);
  const uint32_t qh = load_u32(b + 4);
  const uint8_t* qs = b + 8;
  for (int l = 0; l < 16; ++l) {
    const int lo = (qs[l] & 0x0F) | static_cast<int>(((qh >> l) & 1) << 4);
    const int hi = (qs[l] >> 4) | static_cast<int>(((qh >> (l + 16)) & 1) << 4);
    y[l] = d * static_cast<float>(lo) + m;
    y[l + 16] = d * static_cast<float>(hi) + m;
  }
}

void dequant_q8_0(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  const int8_t* qs = reinterpret_cast<const int8_t*>(b + 2);
  for (int l = 0; l < 32; ++l) y[l] = static_cast<float>(qs[l]) * d;
}

// Q2_K: scales[16] (low nibble scale, high nibble min), qs[64], d, dmin. Element
// c*128 + s*32 + l (c < 2, s < 4, l < 32) is bits 2s..2s+1 of qs[c*32 + l]; 16 per sub-block.
void dequant_q2_k(const uint8_t* b, float* y) {
  const uint8_t* scales = b;
  const uint8_t* qs = b + 16;
  const float d = load_f16(b + 80);
  const float dmin = load_f16(b + 82);
  for (int e = 0; e < 256; ++e) {
    const int c = e / 128, s = (e / 32) % 4, l = e % 32;
    const float q = static_cast<float>((qs[c * 32 + l] >> (2 * s)) & 3);
    const uint8_t sc = scales[e / 16];
    const float dl = d * static_cast<float>(sc & 0x0F);
    const float ml = dmin * static_cast<float>(sc >> 4);
    y[e] = dl * q - ml;
  }
}

// Q3_K: hmask[32], qs[64], scales[12] (16 packed 6-bit scales, offset 32), d. The low two bits
// are laid out as in Q2_K; bit (e / 32) of hmask[e % 32] *clear* subtracts 4.
void dequant_q3_k(const uint8_t* b, float* y) {
  const uint8_t* hmask = b;
  const uint8_t* qs = b + 32;
  const uint8_t* sc = b + 96;
  const float d = load_f16(b + 108);
  float dl[16];
  for (int i = 0; i < 16; ++i) {
    const int low = (i < 8 ? sc[i] : sc[i - 8] >> 4) & 0x0F;
    const int high = (sc[8 + i % 4] >> (2 * (i / 4))) & 0x03;
    dl[i] = d * static_cast<float>((low | (high << 4)) - 32);
  }
  for (int e = 0; e < 256; ++e) {
    const int c = e / 128, s = (e / 32) % 4, l = e % 32;
    const int low = (qs[c * 32 + l] >> (2 * s)) & 3;
    const int h = ((hmask[l] >> (e / 32)) & 1) ^ 1;
    y[e] = dl[e / 16] * static_cast<float>(low - (h << 2));
  }
}

// 6-bit scales and mins of the eight 32-element sub-blocks of Q4_K and Q5_K.
void k_scale_min(const uint8_t* s, int* sc, int* mn) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = s[j] & 0x3F;
    mn[j] = s[j + 4] & 0x3F;
    sc[j + 4] = (s[j + 8] & 0x0F) | ((s[j] >> 2) & 0x30);
    mn[j + 4] = (s[j + 8] >> 4) | ((s[j + 4] >> 2) & 0x30);
  }
}

// Q4_K: d, dmin, scales[12], qs[128]. Element c*64 + h*32 + l is nibble h of qs[c*32 + l].
void dequant_q4_k(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  const float dmin = load_f16(b + 2);
  int sc[8], mn[8];
  k_scale_min(b + 4, sc, mn);
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
void dequant_q5_k(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  const float dmin = load_f16(b + 2);
  int sc[8], mn[8];
  k_scale_min(b + 4, sc, mn);
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
void dequant_q6_k(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* scales = reinterpret_cast<const int8_t*>(b + 192);
  const float d = load_f16(b + 208);
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

BlockFn block_fn(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_0:
      return dequant_q4_0;
    case GgmlType::Q4_1:
      return dequant_q4_1;
    case GgmlType::Q5_0:
      return dequant_q5_0;
    case GgmlType::Q5_1:
      return dequant_q5_1;
    case GgmlType::Q8_0:
      return dequant_q8_0;
    case GgmlType::Q2_K:
      return dequant_q2_k;
    case GgmlType::Q3_K:
      return dequant_q3_k;
    case GgmlType::Q4_K:
      return dequant_q4_k;
    case GgmlType::Q5_K:
      return dequant_q5_k;
    case GgmlType::Q6_K:
      return dequant_q6_k;
    default:
      return nullptr;
  }
}

}  // namespace

const char* type_name(GgmlType t) {
  const TypeTraits* tr = find_traits(static_cast<uint32_t>(t));
  return tr ? tr->name : "unknown";
}

GgmlType type_from_id(uint32_t id) {
  const TypeTraits* tr = find_traits(id);
  if (!tr) throw GgufError(fmt::format("gguf: unknown ggml type {}", id));
  return tr->type;
}

size_t block_elements(GgmlType t) {
  return traits(t).block_elements;
}

size_t block_bytes(GgmlType t) {
  return traits(t).block_bytes;
}

uint64_t bytes_for(GgmlType t, uint64_t n) {
  const TypeTraits& tr = traits(t);
  if (n % tr.block_elements != 0) {
    throw GgufError(fmt::format("gguf: {} elements are not a whole number of {} blocks of {}", n,
                                tr.name, tr.block_elements));
  }
  const uint64_t blocks = n / tr.block_elements;
  uint64_t bytes;
  if (__builtin_mul_overflow(blocks, uint64_t{tr.block_bytes}, &bytes)) {
    throw GgufError(
        fmt::format("gguf: {} elements of {} overflow a 64-bit byte count", n, tr.name));
  }
  return bytes;
}

bool can_dequantize(GgmlType t) {
  const TypeTraits* tr = find_traits(static_cast<uint32_t>(t));
  return tr && tr->can_dequantize;
}

void dequantize(GgmlType t, const void* src, float* dst, size_t n) {
  const TypeTraits& tr = traits(t);
  if (!tr.can_dequantize) {
    throw GgufError(fmt::format("gguf: cannot dequantize type {}", tr.name));
  }
  if (n % tr.block_elements != 0) {
    throw GgufError(
        fmt::format("gguf: dequantize: {} elements are not a whole number of {} "
                    "blocks of {}",
                    n, tr.name, tr.block_elements));
  }
  if (n == 0) return;  // dst and src may be null then
  const uint8_t* p = static_cast<const uint8_t*>(src);
  switch (t) {
    case GgmlType::F32:
      std::memcpy(dst, p, n * sizeof(float));
      return;
    case GgmlType::F16:
      for (size_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(load_u16(p + 2 * i));
      return;
    case GgmlType::BF16:
      for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(load_u16(p + 2 * i));
      return;
    default:
      break;
  }
  const BlockFn fn = block_fn(t);
  const size_t blocks = n / tr.block_elements;
  for (size_t i = 0; i < blocks; ++i) {
    fn(p + i * tr.block_bytes, dst + i * tr.block_elements);
  }
}

float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1F;
  uint32_t mant = h & 0x3FF;
  uint32_t bits;
  if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (mant << 13);  // inf, or NaN with its payload
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {
    // Subnormal: shift the mantissa up to the implicit bit, lowering the exponent each step.
    exp = 113;
    while ((mant & 0x400) == 0) {
      mant <<= 1;
      --exp;
    }
    bits = sign | (exp << 23) | ((mant & 0x3FF) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t fp32_to_fp16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  x &= 0x7FFFFFFF;
  if (x >= 0x7F800000) {
    if (x == 0x7F800000) return sign | 0x7C00;
    return static_cast<uint16_t>(sign | 0x7E00 | ((x >> 13) & 0x3FF));  // quiet NaN
  }
  if (x >= 0x477FF000) return sign | 0x7C00;  // 65520 and up round to infinity
  if (x < 0x38800000) {
    // Below the smallest normal half: a subnormal in units of 2^-24, rounded to nearest even.
    if (x <= 0x33000000) return sign;  // at most 2^-25: ties to the even zero
    const uint32_t mant = (x & 0x7FFFFF) | 0x800000;
    const uint32_t shift = 126 - (x >> 23);
    uint32_t r = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1))) ++r;
    return static_cast<uint16_t>(sign | r);
  }
  const uint32_t r = x - 0x38000000;  // rebias the exponent from 127 to 15
  uint32_t h = r >> 13;
  const uint32_t rem = r & 0x1FFF;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) ++h;
  return static_cast<uint16_t>(sign | h);
}

float bf16_to_fp32(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

}  // namespace adakv::gguf

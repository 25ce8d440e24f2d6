// Block formats of ggml types. The formats the kernels read are decoded by kernels::decode_blocks;
// the others here. Each decoder follows the arithmetic of the `gguf` PyPI package's dequantize
// step by step (float32 products and sums, each rounded on its own), so results are
// bit-identical.
#include "model/gguf/dequant.h"

#include <fmt/format.h>

#include <cstring>

#include "kernels/half.h"
#include "kernels/quant.h"

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

float load_f16(const uint8_t* p) {
  return fp16_to_fp32(load_u16(p));
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

using BlockFn = void (*)(const uint8_t*, float*);

// The types kernels::decode_blocks has no format for.
BlockFn block_fn(GgmlType t) {
  switch (t) {
    case GgmlType::Q2_K:
      return dequant_q2_k;
    case GgmlType::Q3_K:
      return dequant_q3_k;
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
  if (kernels::is_weight_format(static_cast<uint32_t>(t))) {
    kernels::decode_blocks(static_cast<kernels::WeightFormat>(t), src, dst, n);
    return;
  }
  const uint8_t* p = static_cast<const uint8_t*>(src);
  const BlockFn fn = block_fn(t);
  const size_t blocks = n / tr.block_elements;
  for (size_t i = 0; i < blocks; ++i) {
    fn(p + i * tr.block_bytes, dst + i * tr.block_elements);
  }
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

}  // namespace adakv::gguf

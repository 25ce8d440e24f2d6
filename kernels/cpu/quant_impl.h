// Internals of matmul_quant shared by its per-level implementations (quant_*.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/half.h"
#include "kernels/quant.h"

namespace adakv::kernels::quant_detail {

// Activations are quantized in blocks of this many elements (all quantized K are multiples).
inline constexpr size_t kActBlock = 32;

// From this many activation rows on (MatmulPath::kAuto), weights are decoded to float32 panels
// for a BLAS GEMM.
inline constexpr size_t kGemmMinRows = 32;

// One matmul_quant call as the row kernels see it.
struct Job {
  float* y;  // [M][N], row stride ldy
  size_t N;
  size_t ldy;
  bool accumulate;   // y += x W^T instead of y = x W^T
  const uint8_t* w;  // N rows of row_bytes
  size_t row_bytes;
  size_t K;
  const float* x;     // float formats: [M][K]
  const int8_t* xq;   // quantized formats: [M][K] int8 activations
  const float* xd;    // [M][K / 32] their scales
  const float* xs;    // [M][K / 32] scale * sum of the block's int8
  const int16_t* xw;  // int16 dots: [M][K] activations rounded to 16 bits per 32 elements
  const float* xwd;   // [M][K / 32] their scales
  const float* xws;   // [M][K / 32] the float sum of the block's x (a format's min multiplies it)
};

// Writes (or adds, when the job accumulates) one output element.
__attribute__((always_inline)) inline void store(const Job& job, size_t m, size_t n, float v) {
  float& out = job.y[m * job.ldy + n];
  out = job.accumulate ? out + v : v;
}

// Computes y[m][n] for n in [n0, n1), m in [m0, m1). Each y element is computed the same way
// whatever the ranges, so any split over threads gives identical results.
using RowsFn = void (*)(const Job&, size_t n0, size_t n1, size_t m0, size_t m1);

// Decodes rows [n0, n1) of the weights to float32, out: [n1 - n0][K] (the GEMM path).
using DequantFn = void (*)(const Job&, size_t n0, size_t n1, float* out);

RowsFn scalar_rows(WeightFormat f);
DequantFn scalar_dequant(WeightFormat f);
DequantFn avx2_dequant(WeightFormat f);
RowsFn avx2_rows(WeightFormat f);
RowsFn avx512_rows(WeightFormat f);
// The float-dots path on float32 activations, weights converted in registers: null for the
// float formats (their own rows already take float activations).
RowsFn avx2_float_dots(WeightFormat f);
RowsFn avx512_float_dots(WeightFormat f);
// The int16-dots path (Job::xw, xwd, xws): null for the float formats.
RowsFn scalar_int16_dots(WeightFormat f);
RowsFn avx2_int16_dots(WeightFormat f);

// Rounds rows [m0, m1) of x [M][K] to int16 per 32 elements: d = max|x| / 32767,
// q = round(x / d) to nearest, ties to even; s = the float sum of the block's x, added in the
// order of an 8-lane vector sum (lane i: x[i], x[8 + i], x[16 + i], x[24 + i]), then lanes i and
// i + 4, then (0 + 2) + (1 + 3).
void quantize_acts16(const float* x, size_t m0, size_t m1, size_t K, int16_t* xw, float* xd,
                     float* xs);
// The same values, AVX2.
void avx2_quantize_acts16(const float* x, size_t m0, size_t m1, size_t K, int16_t* xw, float* xd,
                          float* xs);

// One product against interleaved weights (WeightLayout::kInterleaved, kernels/quant.h).
struct InterleavedJob {
  float* y;  // [M][N], row stride ldy
  size_t ldy;
  bool accumulate;
  const uint8_t* w;  // ceil(N / 16) groups of group_bytes
  size_t group_bytes;
  size_t N;
  size_t K;
  const float* x;   // [M][K]
  const float* xt;  // the float dots: x transposed, [K][M] (a k's activation rows side by side)
  size_t M;
  // The int16 dots: Job::xw, xwd, xws ([M][K], [M][K / 32] each), and the same transposed for
  // the SIMD kernels: xpairs [K / 2][M] (elements 2i and 2i + 1 of a row as one int32, 2i low),
  // xwdt and xwst [K / 32][M].
  const int16_t* xw = nullptr;
  const float* xwd = nullptr;
  const float* xws = nullptr;
  const int32_t* xpairs = nullptr;
  const float* xwdt = nullptr;
  const float* xwst = nullptr;
};

// y rows [m0, m1), columns of groups [g0, g1): each output one FMA chain along K in k order.
using InterleavedDotsFn = void (*)(const InterleavedJob&, size_t g0, size_t g1, size_t m0,
                                   size_t m1);
// Groups [g, g + ng) as float32 weights, panel [K][16 * ng] (column c is weight row 16 g + c).
using InterleavedPanelFn = void (*)(const InterleavedJob&, size_t g, size_t ng, float* panel);

InterleavedDotsFn avx512_interleaved_dots(WeightFormat f);
InterleavedPanelFn avx512_interleaved_panel(WeightFormat f);
InterleavedDotsFn avx2_interleaved_dots(WeightFormat f);
// The int16 dots on interleaved weights (InterleavedJob::xw, xwd, xws): null unless the CPU has
// AVX-512 VNNI.
InterleavedDotsFn avx512_interleaved_int16_dots(WeightFormat f);
bool cpu_has_avx512_vnni();
InterleavedPanelFn avx2_interleaved_panel(WeightFormat f);

// Columns [k0, k1) of x [M][K] transposed into xt [K][M] (AVX-512; others: a scalar loop).
void avx512_transpose(const float* x, size_t M, size_t K, size_t k0, size_t k1, float* xt);

// matmul_quant on interleaved weights (quant_interleaved.cpp); arguments already checked.
Status matmul_interleaved(float* y, const float* x, const uint8_t* w, WeightFormat f, size_t M,
                          size_t N, size_t K, const MatmulOptions& options);
// Row n of interleaved weights as float32, out [K].
void dequantize_interleaved_row(const uint8_t* w, WeightFormat f, size_t K, size_t n, float* out);

constexpr bool is_float_format(WeightFormat f) {
  return f == WeightFormat::kF32 || f == WeightFormat::kF16 || f == WeightFormat::kBF16;
}

inline uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

inline float load_half(const uint8_t* p) {
  return fp16_to_fp32(load_u16(p));
}

// The 6-bit scales and mins of the eight 32-element sub-blocks of Q4_K / Q5_K (12 bytes).
inline void k_scales_mins(const uint8_t* s, int* sc, int* mn) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = s[j] & 0x3F;
    mn[j] = s[j + 4] & 0x3F;
    sc[j + 4] = (s[j + 8] & 0x0F) | ((s[j] >> 2) & 0x30);
    mn[j + 4] = (s[j + 8] >> 4) | ((s[j + 4] >> 2) & 0x30);
  }
}

}  // namespace adakv::kernels::quant_detail

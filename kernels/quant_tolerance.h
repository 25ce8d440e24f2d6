// Tolerances of matmul_quant against dequantize-then-float32-matmul, per weight format, in one
// place (tests/unit/test_quant_matmul.cpp uses them). For one output element y[m][n], with W
// dequantized to float32 and amax(k) the largest |x[m][i]| in the 32-element block holding k:
//
//   |got - ref| <= act * sum_k |W[n][k]| * amax(k) / 127  +  rel * sum_k |x[m][k] * W[n][k]|
//
//  - act: rounding of the activations to int8 (quantized formats with M < 32 only; llama.cpp does
//    the same; the M >= 32 path decodes the weights to float32 and stays well inside the bound):
//    each x[k] moves by at most half a step, amax / 127 / 2. This term is the error budget of
//    8-bit activations; on random data the dot products land ~1e-3 (relative to sum |x w|) from
//    float32 and at most ~1e-2 on single blocks.
//  - rel: float32 rounding (sums in another order, FMA, the scales' products).
//  - MatmulPath::kInt16Dots rounds activations to 16 bits instead (steps of amax / 32767): its
//    activation term is act * kInt16ActFactor.
#pragma once

#include "kernels/quant.h"

namespace adakv::kernels {

struct QuantTolerance {
  float act;  // times sum_k |W[n][k]| * amax(k) / 127
  float rel;  // times sum_k |x[m][k] * W[n][k]|
};

inline constexpr QuantTolerance quant_tolerance(WeightFormat f) {
  switch (f) {
    case WeightFormat::kF32:
    case WeightFormat::kF16:
    case WeightFormat::kBF16:
      return {0.0f, 2e-6f};
    default:
      return {0.5f * (1.0f + 1e-4f), 1e-5f};
  }
}

// The activation term of the 16-bit path relative to the 8-bit one: 127 / 32767.
inline constexpr float kInt16ActFactor = 127.0f / 32767.0f;

// Interleaved weights (WeightLayout::kInterleaved): one float32 FMA chain along K per output,
// no activation rounding; relative to sum_k |x w|.
inline constexpr float kInterleavedRel = 1e-5f;

// Two dispatch levels (e.g. scalar vs AVX2) on the same input, relative to sum_k |x w|: the
// integer dot products are exact in both; only the order of the float32 accumulation differs.
inline constexpr float kQuantLevelAgreementRel = 1e-5f;

}  // namespace adakv::kernels

// Tolerances of the tests, per dtype, in one place. Relative to the largest reference value.
#pragma once

namespace adakv::test {

inline constexpr float kF32Rel = 1e-5f;      // element-wise float32 ops vs a double reference
inline constexpr float kF32GemmRel = 1e-5f;  // float32 GEMM (blocked sums) vs a double reference
inline constexpr float kLogitsRel = 1e-3f;   // adakv vs HF transformers fp32 logits
// Storage rounding of one KV value, relative to the value: half an ulp of the format.
inline constexpr float kBF16Rel = 0x1p-8f;  // 7 explicit mantissa bits
inline constexpr float kE4M3Rel = 0x1p-4f;  // 3 explicit mantissa bits (normal range)
// Attention (online softmax, split-K merge) in float32 vs a double reference on the same K/V.
inline constexpr float kF32AttentionRel = 2e-5f;

}  // namespace adakv::test

// Tolerances of the tests, per dtype, in one place. Relative to the largest reference value.
#pragma once

namespace adakv::test {

inline constexpr float kF32Rel = 1e-5f;      // element-wise float32 ops vs a double reference
inline constexpr float kF32GemmRel = 1e-5f;  // float32 GEMM (blocked sums) vs a double reference
inline constexpr float kLogitsRel = 1e-3f;   // adakv vs HF transformers fp32 logits

}  // namespace adakv::test

// Block formats of ggml tensor types and their decoding to float32.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/half.h"
#include "model/gguf/gguf.h"

namespace adakv::gguf {

const char* type_name(GgmlType t);
// Throws GgufError for a type id this reader does not know.
GgmlType type_from_id(uint32_t id);
// Elements per block (1 for F32/F16/BF16, 32 for Q4_0..Q8_0, 256 for K-quants).
size_t block_elements(GgmlType t);
// Bytes per block.
size_t block_bytes(GgmlType t);
// Bytes of n elements; n must be a multiple of block_elements(t) (throws GgufError otherwise).
uint64_t bytes_for(GgmlType t, uint64_t n);
// True when dequantize() supports the type.
bool can_dequantize(GgmlType t);

// Decodes n elements (a multiple of block_elements(t)) from src into dst.
// Precondition: src holds bytes_for(t, n) bytes. Throws GgufError for unsupported types.
void dequantize(GgmlType t, const void* src, float* dst, size_t n);

using kernels::bf16_to_fp32;
using kernels::fp16_to_fp32;
uint16_t fp32_to_fp16(float f);  // round to nearest even

}  // namespace adakv::gguf

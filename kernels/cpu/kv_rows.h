// The row conversions of the KV blocks (kv_block.cpp), shared by the block ops and the pool ops
// (kv_pool.cpp) so that both store and decode the same bytes.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/kv_layout.h"

namespace adakv::kernels::kv_rows {

// block_tokens and head_dim nonzero, dtype one of KvDtype's.
bool valid_layout(const KvBlockLayout& layout);
// Converts one float32 row (head_dim floats) into row `row` of the K (which = 0) or V (which = 1)
// part of `block`, with its scale for E4M3.
void write_row(uint8_t* block, const KvBlockLayout& layout, int which, size_t row,
               const float* src);
// Decodes n consecutive rows of the K or V part, from row0, into dst ([n][head_dim]).
void read_rows(const uint8_t* block, const KvBlockLayout& layout, int which, size_t row0, size_t n,
               float* dst);

}  // namespace adakv::kernels::kv_rows

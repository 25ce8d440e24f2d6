// How the KV pool stores keys and values: the element type and the layout of one block.
#pragma once

#include <cstddef>
#include <cstdint>

namespace adakv::kernels {

// Element type of stored keys and values.
enum class KvDtype : uint8_t { kF32 = 0, kBF16 = 1, kE4M3 = 2 };

// One block of the KV pool holds `block_tokens` tokens of ONE KV head of ONE layer:
//   K [block_tokens][head_dim] in dtype, then V [block_tokens][head_dim] in dtype, then, for
//   E4M3 only, K scales [block_tokens] and V scales [block_tokens] as float32 (one scale per
//   token row: value = e4m3 * scale, the scale mapping the row's max |x| to 448).
// Block b starts at pool + b * block_bytes().
struct KvBlockLayout {
  size_t block_tokens = 16;
  size_t head_dim = 64;
  KvDtype dtype = KvDtype::kF32;

  size_t elem_bytes() const { return dtype == KvDtype::kF32 ? 4 : dtype == KvDtype::kBF16 ? 2 : 1; }
  size_t k_offset() const { return 0; }
  size_t v_offset() const { return block_tokens * head_dim * elem_bytes(); }
  size_t scales_offset() const { return 2 * block_tokens * head_dim * elem_bytes(); }
  size_t block_bytes() const {
    return scales_offset() + (dtype == KvDtype::kE4M3 ? 2 * block_tokens * sizeof(float) : 0);
  }
};

}  // namespace adakv::kernels

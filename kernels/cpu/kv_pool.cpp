// The KV pool ops over slots (block id * block_tokens + row): appends of a step's new rows,
// byte copies of rows (compaction, copies of a sequence) and reads of rows as float32. Rows are
// converted by the same functions as the block ops (kv_rows.h), so a slot holds the bytes
// kv_block_write would have written.
#include <cstring>
#include <vector>

#include "kernels/cpu/kv_rows.h"
#include "kernels/ops.h"

namespace adakv::kernels {
namespace {

// Below this many rows a parallel region costs more than the conversions.
constexpr size_t kParallelRows = 64;

uint8_t* block_of(uint8_t* pool, const KvBlockLayout& layout, size_t slot) {
  return pool + slot / layout.block_tokens * layout.block_bytes();
}

const uint8_t* block_of(const uint8_t* pool, const KvBlockLayout& layout, size_t slot) {
  return pool + slot / layout.block_tokens * layout.block_bytes();
}

// Every slot >= 0, or -1 (nothing) where may_skip.
bool valid_slots(const int32_t* slots, size_t n, bool may_skip) {
  for (size_t i = 0; i < n; ++i) {
    if (slots[i] < (may_skip ? -1 : 0)) return false;
  }
  return true;
}

// The bytes of one slot: its K row, its V row and, for E4M3, their two scales. `to_slot` copies
// between the slot and `flat` (2 * row_bytes [+ 2 scales]) in one direction or the other.
void move_slot(uint8_t* pool, const KvBlockLayout& layout, size_t slot, uint8_t* flat,
               bool to_slot) {
  uint8_t* block = block_of(pool, layout, slot);
  const size_t row = slot % layout.block_tokens;
  const size_t row_bytes = layout.head_dim * layout.elem_bytes();
  const size_t offsets[4] = {layout.k_offset() + row * row_bytes,
                             layout.v_offset() + row * row_bytes,
                             layout.scales_offset() + row * sizeof(float),
                             layout.scales_offset() + (layout.block_tokens + row) * sizeof(float)};
  const size_t sizes[4] = {row_bytes, row_bytes, sizeof(float), sizeof(float)};
  const int parts = layout.dtype == KvDtype::kE4M3 ? 4 : 2;
  for (int p = 0; p < parts; ++p) {
    uint8_t* at = block + offsets[p];
    if (to_slot) {
      std::memcpy(at, flat, sizes[p]);
    } else {
      std::memcpy(flat, at, sizes[p]);
    }
    flat += sizes[p];
  }
}

}  // namespace

Status kv_append(uint8_t* pool, const KvBlockLayout& layout, const float* k, const float* v,
                 size_t stride, size_t n_tokens, size_t n_heads, const int32_t* slots, Stream) {
  if (!kv_rows::valid_layout(layout)) return Status::kInvalidArgument;
  const size_t n = n_tokens * n_heads;
  if (n == 0) return Status::kOk;
  if (!pool || !k || !v || !slots) return Status::kInvalidArgument;
  if (n_tokens > 1 && stride < n_heads * layout.head_dim) return Status::kInvalidArgument;
  if (!valid_slots(slots, n, true)) return Status::kInvalidArgument;
  const size_t dim = layout.head_dim;
#pragma omp parallel for schedule(static) if (n >= kParallelRows)
  for (size_t i = 0; i < n; ++i) {
    if (slots[i] < 0) continue;
    const size_t slot = static_cast<size_t>(slots[i]);
    const size_t src = (i / n_heads) * stride + (i % n_heads) * dim;
    uint8_t* block = block_of(pool, layout, slot);
    kv_rows::write_row(block, layout, 0, slot % layout.block_tokens, k + src);
    kv_rows::write_row(block, layout, 1, slot % layout.block_tokens, v + src);
  }
  return Status::kOk;
}

Status kv_copy_rows(uint8_t* pool, const KvBlockLayout& layout, const int32_t* src,
                    const int32_t* dst, size_t n, Stream) {
  if (!kv_rows::valid_layout(layout)) return Status::kInvalidArgument;
  if (n == 0) return Status::kOk;
  if (!pool || !src || !dst) return Status::kInvalidArgument;
  if (!valid_slots(src, n, false) || !valid_slots(dst, n, false)) return Status::kInvalidArgument;
  // Every source is read before any destination is written: the snapshot the op promises,
  // whatever the order of the moves.
  const size_t slot_bytes = 2 * layout.head_dim * layout.elem_bytes() +
                            (layout.dtype == KvDtype::kE4M3 ? 2 * sizeof(float) : 0);
  std::vector<uint8_t> snapshot(n * slot_bytes);
  for (size_t i = 0; i < n; ++i) {
    move_slot(pool, layout, static_cast<size_t>(src[i]), snapshot.data() + i * slot_bytes, false);
  }
  for (size_t i = 0; i < n; ++i) {
    if (src[i] == dst[i]) continue;
    move_slot(pool, layout, static_cast<size_t>(dst[i]), snapshot.data() + i * slot_bytes, true);
  }
  return Status::kOk;
}

Status kv_gather(float* k, float* v, size_t stride, const uint8_t* pool,
                 const KvBlockLayout& layout, const int32_t* slots, size_t n, Stream) {
  if (!kv_rows::valid_layout(layout)) return Status::kInvalidArgument;
  if (n == 0) return Status::kOk;
  if (!k || !pool || !slots) return Status::kInvalidArgument;
  if (n > 1 && stride < layout.head_dim) return Status::kInvalidArgument;
  if (!valid_slots(slots, n, false)) return Status::kInvalidArgument;
#pragma omp parallel for schedule(static) if (n >= kParallelRows)
  for (size_t i = 0; i < n; ++i) {
    const size_t slot = static_cast<size_t>(slots[i]);
    const uint8_t* block = block_of(pool, layout, slot);
    kv_rows::read_rows(block, layout, 0, slot % layout.block_tokens, 1, k + i * stride);
    if (v) kv_rows::read_rows(block, layout, 1, slot % layout.block_tokens, 1, v + i * stride);
  }
  return Status::kOk;
}

}  // namespace adakv::kernels

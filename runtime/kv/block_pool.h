// The KV block pool: one arena of fixed-size blocks, each holding `block_tokens` tokens of K
// and V of ONE KV head of ONE layer (layout: kernels::KvBlockLayout). Sequences own blocks
// through their head tables (kept here too, flat in backend memory: BlockTables); compaction
// returns blocks here, where any sequence can reuse them. A block may be referenced by several
// sequences (the samples of one request share their prompt's full blocks): it returns to the
// free list when its last reference is released.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/backend.h"
#include "runtime/kv/block_tables.h"

namespace adakv::runtime {

class BlockPool {
 public:
  // The arena comes from `backend` (outliving the pool), whose ops read and write the blocks.
  BlockPool(const kernels::KvBlockLayout& layout, size_t n_blocks, kernels::Backend& backend);

  // A free block id with one reference, or -1 when the pool is exhausted.
  int32_t allocate();
  // One more reference to a block in use. Throws std::logic_error on a free or unknown id.
  void share(int32_t id);
  // Drops one reference; the block is free once none is left. Throws std::logic_error on an id
  // that is out of range or already free (a double free is a bug in the caller, never silently
  // accepted).
  void release(int32_t id);
  // References held to a block (0: free).
  uint32_t references(int32_t id) const;

  uint8_t* block(int32_t id) {
    return arena_.as<uint8_t>() + static_cast<size_t>(id) * block_bytes_;
  }
  const uint8_t* block(int32_t id) const {
    return arena_.as<uint8_t>() + static_cast<size_t>(id) * block_bytes_;
  }
  // The arena, backend memory: blocks are reached only through the backend's ops.
  const uint8_t* arena() const { return arena_.as<uint8_t>(); }
  uint8_t* arena() { return arena_.as<uint8_t>(); }
  kernels::Backend& backend() const { return *backend_; }
  // The block tables of the sequences in this pool.
  BlockTables& tables() { return tables_; }
  const BlockTables& tables() const { return tables_; }
  const kernels::KvBlockLayout& layout() const { return layout_; }

  size_t capacity() const { return refs_.size(); }
  size_t free_blocks() const { return free_.size(); }
  size_t used_blocks() const { return capacity() - free_blocks(); }
  size_t block_bytes() const { return block_bytes_; }
  size_t used_bytes() const { return used_blocks() * block_bytes_; }
  size_t free_bytes() const { return free_blocks() * block_bytes_; }

 private:
  kernels::KvBlockLayout layout_;
  size_t block_bytes_;
  kernels::Backend* backend_;
  // Left uninitialised on purpose: a large arena comes from fresh pages that the OS maps only
  // when a block is first written, so a pool sized for the worst case costs only what is used.
  kernels::Buffer arena_;
  std::vector<int32_t> free_;   // a stack: the most recently freed block is reused first
  std::vector<uint32_t> refs_;  // [block]: references held (0: free)
  BlockTables tables_;
};

}  // namespace adakv::runtime

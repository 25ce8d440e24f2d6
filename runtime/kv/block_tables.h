// The block tables of every sequence in a pool, flat in backend memory and owned by the pool:
//   ids     [slot][layer][head][capacity]  block ids of each KV head, in token order (-1 past
//                                          its blocks)
//   lengths [slot][layer][head]            tokens each head holds
//   rows    [slot][layer][head]            a pointer to each head's ids (what attention reads)
// A sequence's cache holds one slot for its life and writes each layer's changes into it as they
// happen: only the new block ids and the layer's lengths move to the backend. Slots and capacity
// grow by doubling; growing reallocates the table, so pointers from rows()/lengths() stay valid
// only until the next write_layer() or acquire() of any slot.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/backend.h"

namespace adakv::runtime {

class BlockTables {
 public:
  explicit BlockTables(kernels::Backend& backend) : backend_(&backend) {}

  // A free slot for a sequence of `layers` x `heads` KV heads (every slot of a table has the
  // shape of the first; another shape is std::invalid_argument). Its lengths start at 0.
  size_t acquire(size_t layers, size_t heads);
  void release(size_t slot);

  // Head g of (slot, layer) now holds blocks[g] (its first synced[g] ids are already in the
  // table; synced[g] becomes blocks[g].size()) and lengths[g] tokens.
  void write_layer(size_t slot, size_t layer,
                   const std::vector<const std::vector<int32_t>*>& blocks,
                   std::vector<size_t>& synced, const std::vector<uint32_t>& lengths);

  // Backend pointers to (slot, layer)'s [heads] row pointers and lengths.
  const int32_t* const* rows(size_t slot, size_t layer) const;
  const uint32_t* lengths(size_t slot, size_t layer) const;

  size_t slots_in_use() const { return in_use_count_; }
  size_t capacity() const { return capacity_; }

 private:
  // Reallocates for `slots` slots of `capacity` ids per head, uploading the host mirror.
  void grow(size_t slots, size_t capacity);
  size_t row(size_t slot, size_t layer, size_t head) const {
    return (slot * layers_ + layer) * heads_ + head;
  }

  kernels::Backend* backend_;
  size_t layers_ = 0, heads_ = 0, slots_ = 0, capacity_ = 0, in_use_count_ = 0;
  std::vector<bool> in_use_;
  // The host's copy of ids and lengths (what growth uploads again).
  std::vector<int32_t> host_ids_;
  std::vector<uint32_t> host_lengths_;
  kernels::Buffer ids_, lengths_, rows_;
};

}  // namespace adakv::runtime

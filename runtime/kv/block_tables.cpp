#include "runtime/kv/block_tables.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace adakv::runtime {

size_t BlockTables::acquire(size_t layers, size_t heads) {
  if (layers == 0 || heads == 0)
    throw std::invalid_argument("a block table needs layers and heads");
  if (slots_ == 0) {
    layers_ = layers;
    heads_ = heads;
  } else if (layers != layers_ || heads != heads_) {
    throw std::invalid_argument("block table of " + std::to_string(layers) + " layers x " +
                                std::to_string(heads) + " heads in a pool whose sequences have " +
                                std::to_string(layers_) + " x " + std::to_string(heads_));
  }
  const auto free = std::find(in_use_.begin(), in_use_.end(), false);
  size_t slot = static_cast<size_t>(free - in_use_.begin());
  if (free == in_use_.end()) {
    grow(std::max<size_t>(4, 2 * slots_), std::max<size_t>(16, capacity_));
    slot = in_use_.size();
    in_use_.resize(slots_, false);
  }
  in_use_[slot] = true;
  ++in_use_count_;
  const size_t first = row(slot, 0, 0), n = layers_ * heads_;
  std::fill_n(host_ids_.begin() + first * capacity_, n * capacity_, -1);
  std::fill_n(host_lengths_.begin() + first, n, 0u);
  backend_->fill(lengths_.as<uint32_t>() + first, 0, n * sizeof(uint32_t));
  return slot;
}

void BlockTables::release(size_t slot) {
  if (slot >= in_use_.size() || !in_use_[slot]) {
    throw std::logic_error("block table: release of slot " + std::to_string(slot) +
                           ", which is not in use");
  }
  in_use_[slot] = false;
  --in_use_count_;
}

void BlockTables::grow(size_t slots, size_t capacity) {
  const size_t heads = slots * layers_ * heads_;
  std::vector<int32_t> ids(heads * capacity, -1);
  std::vector<uint32_t> lengths(heads, 0);
  for (size_t r = 0; r < std::min(heads, slots_ * layers_ * heads_); ++r) {
    std::copy_n(host_ids_.begin() + r * capacity_, capacity_, ids.begin() + r * capacity);
    lengths[r] = host_lengths_[r];
  }
  host_ids_ = std::move(ids);
  host_lengths_ = std::move(lengths);
  slots_ = slots;
  capacity_ = capacity;
  ids_ = backend_->allocate(host_ids_.size() * sizeof(int32_t));
  lengths_ = backend_->allocate(host_lengths_.size() * sizeof(uint32_t));
  backend_->upload(ids_.data(), host_ids_.data(), host_ids_.size() * sizeof(int32_t));
  backend_->upload(lengths_.data(), host_lengths_.data(), host_lengths_.size() * sizeof(uint32_t));
  std::vector<const int32_t*> rows(heads);
  for (size_t r = 0; r < heads; ++r) rows[r] = ids_.as<int32_t>() + r * capacity_;
  rows_ = backend_->allocate(rows.size() * sizeof(const int32_t*));
  backend_->upload(rows_.data(), rows.data(), rows.size() * sizeof(const int32_t*));
}

void BlockTables::write_layer(size_t slot, size_t layer,
                              const std::vector<const std::vector<int32_t>*>& blocks,
                              std::vector<size_t>& synced, const std::vector<uint32_t>& lengths) {
  if (slot >= in_use_.size() || !in_use_[slot] || layer >= layers_ || blocks.size() != heads_ ||
      synced.size() != heads_ || lengths.size() != heads_) {
    throw std::logic_error("block table: bad write of slot " + std::to_string(slot) + " layer " +
                           std::to_string(layer));
  }
  size_t most = 0;
  for (const auto* b : blocks) most = std::max(most, b->size());
  if (most > capacity_) grow(slots_, std::max(most, 2 * capacity_));
  for (size_t g = 0; g < heads_; ++g) {
    const std::vector<int32_t>& ids = *blocks[g];
    const size_t r = row(slot, layer, g), from = std::min(synced[g], ids.size());
    if (ids.size() > from) {
      std::copy(ids.begin() + from, ids.end(), host_ids_.begin() + r * capacity_ + from);
      backend_->upload(ids_.as<int32_t>() + r * capacity_ + from, ids.data() + from,
                       (ids.size() - from) * sizeof(int32_t));
    }
    synced[g] = ids.size();
    host_lengths_[r] = lengths[g];
  }
  const size_t first = row(slot, layer, 0);
  backend_->upload(lengths_.as<uint32_t>() + first, lengths.data(), heads_ * sizeof(uint32_t));
}

const int32_t* const* BlockTables::rows(size_t slot, size_t layer) const {
  return rows_.as<const int32_t*>() + row(slot, layer, 0);
}

const uint32_t* BlockTables::lengths(size_t slot, size_t layer) const {
  return lengths_.as<uint32_t>() + row(slot, layer, 0);
}

}  // namespace adakv::runtime

#include "runtime/kv/block_pool.h"

#include <stdexcept>
#include <string>

namespace adakv::runtime {

BlockPool::BlockPool(const kernels::KvBlockLayout& layout, size_t n_blocks,
                     kernels::Backend& backend)
    : layout_(layout),
      block_bytes_(layout.block_bytes()),
      backend_(&backend),
      arena_(backend.allocate(n_blocks * layout.block_bytes())),
      refs_(n_blocks, 0),
      tables_(backend) {
  if (layout.block_tokens == 0 || layout.head_dim == 0) {
    throw std::invalid_argument("KV block layout needs block_tokens >= 1 and head_dim >= 1");
  }
  if (n_blocks > static_cast<size_t>(INT32_MAX)) {
    throw std::invalid_argument("KV pool of " + std::to_string(n_blocks) + " blocks is too large");
  }
  free_.reserve(n_blocks);
  for (size_t i = n_blocks; i-- > 0;) free_.push_back(static_cast<int32_t>(i));
}

int32_t BlockPool::allocate() {
  if (free_.empty()) return -1;
  const int32_t id = free_.back();
  free_.pop_back();
  refs_[id] = 1;
  return id;
}

void BlockPool::share(int32_t id) {
  if (references(id) == 0) {
    throw std::logic_error("KV pool: share of block " + std::to_string(id) + ", which is free");
  }
  ++refs_[id];
}

void BlockPool::release(int32_t id) {
  if (references(id) == 0) {
    throw std::logic_error("KV pool: double free of block " + std::to_string(id));
  }
  if (--refs_[id] == 0) free_.push_back(id);
}

uint32_t BlockPool::references(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= refs_.size()) {
    throw std::logic_error("KV pool: block " + std::to_string(id) + " does not exist");
  }
  return refs_[id];
}

}  // namespace adakv::runtime

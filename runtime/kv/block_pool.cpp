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
      in_use_(n_blocks, false),
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
  in_use_[id] = true;
  return id;
}

void BlockPool::release(int32_t id) {
  if (id < 0 || static_cast<size_t>(id) >= in_use_.size()) {
    throw std::logic_error("KV pool: release of block " + std::to_string(id) +
                           ", which does not exist");
  }
  if (!in_use_[id]) {
    throw std::logic_error("KV pool: double free of block " + std::to_string(id));
  }
  in_use_[id] = false;
  free_.push_back(id);
}

}  // namespace adakv::runtime

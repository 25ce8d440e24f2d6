// One sequence's KV cache as plain contiguous float32 arrays in backend memory,
// [layer][token][kv head][head_dim]. The uncompressed baseline of the oracle tests; the
// head-paged cache (runtime/kv/) is what serving uses.
#pragma once

#include <vector>

#include "kernels/backend.h"
#include "model/config.h"
#include "model/kv_cache.h"

namespace adakv::runtime {

class ContiguousKvCache : public model::KvCache {
 public:
  // Holds up to `capacity` tokens (prompt + generated) in `backend`'s memory, where it attends.
  ContiguousKvCache(const model::ModelConfig& config, size_t capacity, kernels::Backend& backend);

  size_t next_position() const override { return length_; }
  void append_and_attend(size_t layer, const float* q, size_t q_stride, const float* k,
                         const float* v, size_t kv_stride, size_t n, float* out) override;
  void commit(size_t n) override { length_ += n; }

  size_t capacity() const { return capacity_; }
  // Bytes of K and V held for the tokens stored so far, and reserved in all.
  size_t used_bytes() const;
  size_t reserved_bytes() const;

 private:
  model::ModelConfig config_;
  kernels::Backend* backend_;
  size_t capacity_;
  size_t length_ = 0;
  std::vector<kernels::Buffer> k_, v_;  // per layer: [capacity][n_kv_heads * head_dim]
};

}  // namespace adakv::runtime

// What the forward pass needs from a sequence's KV cache. The runtime owns the storage
// (contiguous now, head-paged with Ada-KV compaction later); the model only appends and attends.
#pragma once

#include <cstddef>

namespace adakv::model {

class KvCache {
 public:
  virtual ~KvCache() = default;

  // Position of the next token (prompt length + tokens generated so far).
  virtual size_t next_position() const = 0;

  // Stores n new tokens' keys (after RoPE) and values for `layer`, then writes the causal
  // attention of their n queries over everything this layer holds.
  //   q:   [n][n_heads][head_dim]      (row stride q_stride floats)
  //   k,v: [n][n_kv_heads][head_dim]   (row stride kv_stride floats)
  //   out: [n][n_heads][head_dim]      (contiguous)
  // Throws std::length_error when the cache cannot hold n more tokens.
  virtual void append_and_attend(size_t layer, const float* q, size_t q_stride, const float* k,
                                 const float* v, size_t kv_stride, size_t n, float* out) = 0;

  // Called once all layers took the n tokens: advances next_position() by n.
  virtual void commit(size_t n) = 0;
};

}  // namespace adakv::model

#include "runtime/contiguous_kv_cache.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/ops.h"

namespace adakv::runtime {

ContiguousKvCache::ContiguousKvCache(const model::ModelConfig& config, size_t capacity,
                                     kernels::Backend& backend)
    : config_(config),
      backend_(&backend),
      capacity_(capacity),
      k_(config.n_layers),
      v_(config.n_layers) {
  for (size_t l = 0; l < config.n_layers; ++l) {
    k_[l].resize(capacity * config.kv_width());
    v_[l].resize(capacity * config.kv_width());
  }
}

void ContiguousKvCache::append_and_attend(size_t layer, const float* q, size_t q_stride,
                                          const float* k, const float* v, size_t kv_stride,
                                          size_t n, float* out) {
  if (length_ + n > capacity_) {
    throw std::length_error("KV cache full: " + std::to_string(length_) + " + " +
                            std::to_string(n) + " tokens exceed its capacity of " +
                            std::to_string(capacity_));
  }
  const size_t W = config_.kv_width();
  float* ks = k_[layer].data();
  float* vs = v_[layer].data();
  for (size_t t = 0; t < n; ++t) {
    std::copy_n(k + t * kv_stride, W, ks + (length_ + t) * W);
    std::copy_n(v + t * kv_stride, W, vs + (length_ + t) * W);
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(config_.head_dim));
  backend_->attention_causal(out, q, ks, vs, n, length_ + n, config_.n_heads, config_.n_kv_heads,
                             config_.head_dim, q_stride, W, config_.q_width(), scale);
}

size_t ContiguousKvCache::used_bytes() const {
  return length_ * config_.kv_bytes_per_token();
}

size_t ContiguousKvCache::reserved_bytes() const {
  return capacity_ * config_.kv_bytes_per_token();
}

}  // namespace adakv::runtime

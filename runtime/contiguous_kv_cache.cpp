#include "runtime/contiguous_kv_cache.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace adakv::runtime {

ContiguousKvCache::ContiguousKvCache(const model::ModelConfig& config, size_t capacity,
                                     kernels::Backend& backend)
    : config_(config),
      backend_(&backend),
      capacity_(capacity),
      k_(config.n_layers),
      v_(config.n_layers) {
  for (size_t l = 0; l < config.n_layers; ++l) {
    k_[l] = backend.allocate(capacity * config.kv_width() * sizeof(float));
    v_[l] = backend.allocate(capacity * config.kv_width() * sizeof(float));
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
  float* ks = k_[layer].as<float>();
  float* vs = v_[layer].as<float>();
  for (size_t t = 0; t < n; ++t) {
    backend_->copy(ks + (length_ + t) * W, k + t * kv_stride, W * sizeof(float));
    backend_->copy(vs + (length_ + t) * W, v + t * kv_stride, W * sizeof(float));
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

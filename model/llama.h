// The llama-family forward pass, written once against kernels/ops.h:
//   x = embed(tokens)
//   per layer: x += o_proj(attention(rope(q), rope(k), v)) on rmsnorm(x)
//              x += down(silu(gate(h)) * up(h)) with h = rmsnorm(x)
//   logits = lm_head(rmsnorm(x))
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/kv_cache.h"
#include "model/weights.h"

namespace adakv::model {

class LlamaModel {
 public:
  LlamaModel(ModelConfig config, Weights weights);
  // Reads config and weights from a GGUF file (throws naming what is wrong).
  static LlamaModel load(const std::string& path);

  const ModelConfig& config() const { return config_; }
  const Weights& weights() const { return weights_; }

  // Runs tokens[0..n) at positions cache.next_position()..+n, appends their K/V to the cache
  // and commits them. Writes logits [n_logits][vocab] of the last n_logits tokens
  // (1 <= n_logits <= n) into `logits`, resized as needed.
  void forward(const int32_t* tokens, size_t n, KvCache& cache, std::vector<float>& logits,
               size_t n_logits = 1) const;

 private:
  ModelConfig config_;
  Weights weights_;
};

}  // namespace adakv::model

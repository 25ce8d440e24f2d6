// Model weights, dequantized to float32 at load. Matrices keep PyTorch's [out][in] layout
// (GGUF ne = [in, out]), so y = x W^T is kernels::matmul(y, x, W, T, out, in).
// A tensor-parallel rank holds only its shard (model/shard.h): the shapes below then use the
// local head counts and ffn width; token_embd and the norms are whole on every rank.
#pragma once

#include <vector>

#include "model/config.h"
#include "model/shard.h"

namespace adakv::gguf {
class GgufFile;
}

namespace adakv::model {

struct LayerWeights {
  std::vector<float> attn_norm;  // [d_model]
  // q, k and v stacked: [(n_heads + 2 n_kv_heads) * head_dim][d_model]. The q and k rows come
  // permuted by the GGUF converter so that RoPE rotates adjacent pairs.
  std::vector<float> wqkv;
  std::vector<float> wo;         // [d_model][n_heads*head_dim]
  std::vector<float> ffn_norm;   // [d_model]
  std::vector<float> w_gate_up;  // gate and up stacked: [2 ffn_dim][d_model]
  std::vector<float> w_down;     // [d_model][ffn_dim]
};

struct Weights {
  std::vector<float> token_embd;   // [vocab][d_model]
  std::vector<float> output_norm;  // [d_model]
  std::vector<float> output;       // [local vocab rows][d_model]; empty when tied to token_embd
  std::vector<LayerWeights> layers;

  size_t bytes() const;

  // The LM head rows of the shard: [shard.vocab_rows][d_model].
  const float* lm_head(const ShardLayout& shard, size_t d_model) const {
    return output.empty() ? token_embd.data() + shard.vocab_begin * d_model : output.data();
  }

  // Checks every tensor's presence, shape and type, then dequantizes the shard's slice only.
  // Throws std::runtime_error naming the tensor on any mismatch.
  static Weights load(const gguf::GgufFile& file, const ModelConfig& config,
                      const ShardLayout& shard);
};

}  // namespace adakv::model

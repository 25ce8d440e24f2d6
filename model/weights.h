// Model weights, dequantized to float32 at load. Matrices keep PyTorch's [out][in] layout
// (GGUF ne = [in, out]), so y = x W^T is kernels::matmul(y, x, W, T, out, in).
#pragma once

#include <vector>

#include "model/config.h"

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
  std::vector<float> output;       // [vocab][d_model]; empty when tied to token_embd
  std::vector<LayerWeights> layers;

  const std::vector<float>& lm_head() const { return output.empty() ? token_embd : output; }
  size_t bytes() const;

  // Checks every tensor's presence, shape and type, then dequantizes. Throws
  // std::runtime_error naming the tensor on any mismatch.
  static Weights load(const gguf::GgufFile& file, const ModelConfig& config);
};

}  // namespace adakv::model

// Hugging Face tensor names (model.layers.N.self_attn.q_proj.weight) and the GGUF names adakv
// loads (blk.N.attn_q.weight), as llama.cpp's converter maps them for llama, mistral and qwen2.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace adakv::hf {

// The GGUF name of a checkpoint tensor; "" for one adakv does not use (rotary inv_freq, ...).
std::string gguf_tensor_name(std::string_view hf_name);

struct RequiredTensor {
  std::string hf_name, gguf_name;
  std::vector<uint64_t> shape;  // as the checkpoint stores it: [out, in] for a matrix; 0 = any
};

struct ModelShape {
  size_t n_layers = 0, d_model = 0, n_heads = 0, n_kv_heads = 0, ffn_dim = 0;
  bool qkv_bias = false;         // blk.N.attn_{q,k,v}.bias
  bool tied_embeddings = false;  // no lm_head.weight
};

// Every tensor a model of that shape needs, with its shape (the vocabulary is left open), in the
// order a GGUF file lists them.
std::vector<RequiredTensor> required_tensors(const ModelShape& m);

}  // namespace adakv::hf

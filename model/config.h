// The hyper-parameters of a llama-family model, read from GGUF metadata (under the
// architecture's key prefix: llama.*, qwen2.*) and validated.
#pragma once

#include <cstddef>
#include <string>

#include "kernels/rope_frequencies.h"
#include "model/architecture.h"

namespace adakv::gguf {
class GgufFile;
}

namespace adakv::model {

struct ModelConfig {
  std::string architecture;   // general.architecture: one of architectures() ("llama", "qwen2")
  std::string name;           // general.name, for display
  size_t n_layers = 0;        // transformer blocks
  size_t d_model = 0;         // residual width (embedding_length)
  size_t n_heads = 0;         // query heads
  size_t n_kv_heads = 0;      // key/value heads (GQA: n_heads is a multiple)
  size_t head_dim = 0;        // per-head width = d_model / n_heads
  size_t rope_dim = 0;        // leading dims of each head that RoPE rotates (usually head_dim)
  size_t ffn_dim = 0;         // SwiGLU hidden width
  size_t vocab_size = 0;      // rows of token_embd
  size_t context_length = 0;  // positions the model was trained for
  float rms_eps = 1e-5f;      // RMSNorm epsilon
  float rope_theta = 10000;   // RoPE base
  // RoPE scaling for positions past the pre-training context (<arch>.rope.scaling.*, or a
  // rope_freqs.weight tensor: Llama 3.1's as llama.cpp's converter stores it).
  kernels::RopeScaling rope_scaling;
  // Tokens a query attends back to when the model uses sliding-window attention (Mistral v0.1),
  // 0 for full attention. adakv attends to every token, which is the same thing while a sequence
  // is no longer than the window: context_length is capped at it.
  size_t sliding_window = 0;
  bool tied_embeddings = false;  // LM head reuses token_embd (no output.weight)
  // The order of the file's q and k rows; the weights are loaded as kAdjacent whatever it is
  // (Weights::load permutes kHalves rows), which is what the forward's RoPE rotates.
  RopePairs rope_pairs = RopePairs::kAdjacent;
  bool qkv_bias = false;  // q, k and v add a bias (blk.N.attn_{q,k,v}.bias, F32)
  // Elements: tensor parallelism cuts the ffn columns at multiples of this, the quantization
  // block of ffn_down's rows (a RowParallel shard holds whole blocks); 1 where any cut works.
  size_t ffn_shard_align = 1;

  // Throws std::runtime_error naming the key or value that is missing or inconsistent.
  static ModelConfig from_gguf(const gguf::GgufFile& file);

  size_t q_width() const { return n_heads * head_dim; }
  size_t kv_width() const { return n_kv_heads * head_dim; }
  // Bytes of float32 K and V for one token over all layers.
  size_t kv_bytes_per_token() const { return 2 * n_layers * kv_width() * sizeof(float); }
};

}  // namespace adakv::model

// Model weights as the GGUF file holds them: every matrix a Linear in its stored block format
// (model/linear.h), read in place from the memory-mapped file where the shard is a range of
// whole rows; only the norms and biases, a few KiB, are decoded to float32.
// A tensor-parallel rank holds only its shard (model/shard.h): q, k, v, gate and up are
// ColumnParallel (the rank's heads and ffn columns, and so are their biases), o and down
// RowParallel; the token
// embedding table is whole on every rank (only the looked-up rows are read), the LM head is the
// shard's vocab rows.
#pragma once

#include <memory>
#include <vector>

#include "model/config.h"
#include "model/linear.h"
#include "model/pipeline_stage.h"
#include "model/shard.h"

namespace adakv::gguf {
class GgufFile;
}

namespace adakv::model {

// A float32 vector of the model (a norm's weight [d_model], a bias): decoded at load, then
// uploaded to the backend.
class VectorWeight {
 public:
  VectorWeight() = default;
  explicit VectorWeight(std::vector<float> values)
      : values_(std::make_shared<const std::vector<float>>(std::move(values))) {}
  size_t size() const { return values_ ? values_->size() : 0; }
  // The host values stay (the CPU backend's constant() views them).
  void upload(kernels::Backend& backend);
  // Backend memory, null before upload().
  const float* data() const { return buffer_ ? buffer_->as<float>() : nullptr; }

 private:
  std::shared_ptr<const std::vector<float>> values_;
  std::shared_ptr<const kernels::Buffer> buffer_;
};

struct LayerWeights {
  VectorWeight attn_norm;  // [d_model]
  // The q and k rows are ordered for RoPE on adjacent pairs: llama GGUFs come so from the
  // converter, files of halves order are reordered at load (model/rope_order.h).
  Linear wq, wk, wv;  // ColumnParallel: [local heads * head_dim][d_model]
  // The biases of q, k and v, one vector [q rows | k rows | v rows] in the order of the rows of
  // wq, wk and wv (a qkv row of the forward takes it at once); empty without config.qkv_bias.
  VectorWeight qkv_bias;
  Linear wo;              // RowParallel: [d_model][local q heads * head_dim]
  VectorWeight ffn_norm;  // [d_model]
  Linear w_gate, w_up;    // ColumnParallel: [local ffn][d_model]
  Linear w_down;          // RowParallel: [d_model][local ffn]
  // wq, wk and wv fused ([q | k | v] rows), and w_gate and w_up ([gate | up] rows), where
  // Linear::fuse can (else empty): the parts then view these Linears' memory.
  Linear wqkv, w_gate_up;
};

struct Weights {
  std::shared_ptr<const gguf::GgufFile> file;  // the mapping the Linears read from
  // The rank's vocab rows of [vocab][d_model]: all of them unless the LM head is vocab-parallel.
  Linear token_embd;
  VectorWeight output_norm;  // [d_model]
  Linear lm_head;            // [shard.vocab_rows][d_model]
  // [n_layers], indexed by the model's layer: a pipeline stage loads only its own (the others
  // stay empty), the embedding only on the first stage and the norm and LM head on the last.
  std::vector<LayerWeights> layers;

  // Bytes one decoded token reads: every layer's matrices, the LM head and the norms.
  size_t bytes() const;

  // Checks every tensor's presence, shape and type, and that the shard's cuts fall on block
  // boundaries. Throws std::runtime_error naming the tensor on any mismatch.
  // The matrices are kept in the layouts `backend` asks for (Backend::weight_layout).
  static Weights load(std::shared_ptr<const gguf::GgufFile> file, const ModelConfig& config,
                      const ShardLayout& shard, const kernels::Backend& backend,
                      const PipelineStage& stage = {});
  // Moves every matrix and norm into `backend`'s memory, each distinct memory once (fused parts
  // and the tied LM head share their owner's copy). Where the backend copied, the host copies
  // the layers own are released.
  void upload(kernels::Backend& backend);
};

}  // namespace adakv::model

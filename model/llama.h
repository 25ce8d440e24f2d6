// The llama-family forward pass, written once against kernels/ops.h:
//   x = embed(tokens)
//   per layer: x += o_proj(attention(rope(q), rope(k), v)) on rmsnorm(x), q, k and v with their
//              biases where the architecture has them (qwen2)
//              x += down(silu(gate(h)) * up(h)) with h = rmsnorm(x)
//   logits = lm_head(rmsnorm(x))
// Under tensor parallelism (model/shard.h) each rank runs its heads and ffn columns; the
// partial outputs of o_proj and down_proj are summed with the device group's all_reduce, the
// only collective of the layer stack. Under pipeline parallelism (model/pipeline_stage.h) a rank
// runs only its stage's layers: the first stage embeds, a later one receives the residual rows
// from the one before, every stage but the last sends them on, and the last alone writes logits.
// Layer indices stay the model's (a stage's caches are addressed by them too).
//
// Every activation, weight and logit lives in the backend's memory: token ids and positions
// are uploaded at the start of a forward, logits stay in the backend until the caller
// downloads the rows it samples (download_logits).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/device_group.h"
#include "kernels/backend.h"
#include "model/config.h"
#include "model/kv_cache.h"
#include "model/output_projection.h"
#include "model/pipeline_stage.h"
#include "model/weights.h"

namespace adakv::model {

// The logits of one forward: [rows][vocab] float32 in the backend's memory (the model's
// workspace), valid until the model's next forward. Empty (rows 0) on a rank that does not
// computes_logits().
struct Logits {
  const float* data = nullptr;
  size_t rows = 0, vocab = 0;
  bool empty() const { return rows == 0; }
};

class LlamaModel {
 public:
  // `tp` (not owned, outliving the model) is the device group of `shard`'s tensor-parallel
  // group; null for one rank. The weights are uploaded to `backend` (outliving the model),
  // where every op runs.
  // `stage`: the layers this rank runs (default: all) and the channel to its neighbours; the
  // weights must have been loaded for the same stage.
  LlamaModel(ModelConfig config, Weights weights, ShardLayout shard, comm::DeviceGroup* tp,
             kernels::Backend& backend, PipelineStage stage = {});
  // Reads config and weights from a GGUF file, one rank on `backend` (throws naming what is
  // wrong).
  static LlamaModel load(const std::string& path, kernels::Backend& backend);

  const ModelConfig& config() const { return config_; }       // the whole model's
  const ModelConfig& local_config() const { return local_; }  // this rank's heads and ffn
  const ShardLayout& shard() const { return shard_; }
  const PipelineStage& stage() const { return stage_; }
  const Weights& weights() const { return weights_; }
  comm::DeviceGroup* tp() const { return tp_; }
  kernels::Backend& backend() const { return *backend_; }
  // True when this rank's forward writes logits (on the last pipeline stage: its tensor-parallel
  // rank 0, or every rank with a vocab-parallel LM head).
  bool computes_logits() const;

  // Token ids are host memory in every forward (the model uploads them).
  //
  // Runs tokens[0..n) at positions cache.next_position()..+n, appends their K/V (this rank's
  // KV heads) to the cache and commits them. Returns the logits [n_logits][vocab] of the last
  // n_logits tokens (1 <= n_logits <= n); empty on a rank that does not computes_logits().
  // Every rank of the group must call it together.
  Logits forward(const int32_t* tokens, size_t n, KvCache& cache, size_t n_logits = 1) const;

  // One decode step of B sequences in one pass, so the weights are read once for all of them:
  // token b goes to *caches[b] at its next position. Logits [B][vocab] (same rule as forward
  // for ranks that do not compute logits).
  Logits forward_batch(const int32_t* tokens, KvCache* const* caches, size_t B) const;

  // One ragged step: every sequence of `batch` takes its batch.tokens(s) rows of `tokens`
  // (packed in sequence order) in ONE forward, prompt chunks and decodes alike. Logits
  // [sum of batch.logit_rows(s)][vocab], in row order (same rule as forward for ranks that do
  // not compute logits).
  Logits forward_ragged(const int32_t* tokens, KvBatch& batch) const;

  // Rows [first, first + count) of `logits` into host memory dst [count][vocab].
  void download_logits(const Logits& logits, size_t first, size_t count, float* dst) const;
  // Every row of `logits`, in host memory (empty for empty logits).
  std::vector<float> logits_to_host(const Logits& logits) const;

 private:
  // The body of every forward: n = the batch's total rows; logits for the last
  // batch.logit_rows(s) rows of each sequence.
  Logits run(const int32_t* tokens, size_t n, KvBatch& batch) const;

  ModelConfig config_;
  ModelConfig local_;
  ShardLayout shard_;
  PipelineStage stage_;
  Weights weights_;
  comm::DeviceGroup* tp_ = nullptr;
  kernels::Backend* backend_;
  // W_o of this shard for output-aware KV scoring, published while the model lives.
  std::shared_ptr<const OutputProjection> output_projection_;
  kernels::RopeFrequencies rope_;  // config_'s rotation, computed once
  // The activations of a forward, kept across calls (a forward runs on one thread at a time).
  mutable kernels::Workspace workspace_;
};

}  // namespace adakv::model

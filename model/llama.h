// The llama-family forward pass, written once against kernels/ops.h:
//   x = embed(tokens)
//   per layer: x += o_proj(attention(rope(q), rope(k), v)) on rmsnorm(x)
//              x += down(silu(gate(h)) * up(h)) with h = rmsnorm(x)
//   logits = lm_head(rmsnorm(x))
// Under tensor parallelism (model/shard.h) each rank runs its heads and ffn columns; the
// partial outputs of o_proj and down_proj are summed with tp.all_reduce, the only collective
// of the layer stack.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "kernels/backend.h"
#include "model/config.h"
#include "model/kv_cache.h"
#include "model/weights.h"

namespace adakv::model {

class LlamaModel {
 public:
  // `tp` (not owned, outliving the model) is the tensor-parallel group of `shard`; null for
  // one rank. Every op runs on `backend` (outliving the model).
  LlamaModel(ModelConfig config, Weights weights, ShardLayout shard, comm::Communicator* tp,
             kernels::Backend& backend = kernels::cpu_backend());
  LlamaModel(ModelConfig config, Weights weights);
  // Reads config and weights from a GGUF file (throws naming what is wrong).
  static LlamaModel load(const std::string& path);

  const ModelConfig& config() const { return config_; }       // the whole model's
  const ModelConfig& local_config() const { return local_; }  // this rank's heads and ffn
  const ShardLayout& shard() const { return shard_; }
  const Weights& weights() const { return weights_; }
  comm::Communicator* tp() const { return tp_; }
  kernels::Backend& backend() const { return *backend_; }
  // True when this rank's forward writes logits (rank 0, or every rank with a vocab-parallel
  // LM head).
  bool computes_logits() const;

  // Runs tokens[0..n) at positions cache.next_position()..+n, appends their K/V (this rank's
  // KV heads) to the cache and commits them. Writes logits [n_logits][vocab] of the last
  // n_logits tokens (1 <= n_logits <= n) into `logits`, resized as needed; a rank that does not
  // computes_logits() leaves `logits` empty. Every rank of the group must call it together.
  void forward(const int32_t* tokens, size_t n, KvCache& cache, std::vector<float>& logits,
               size_t n_logits = 1) const;

  // One decode step of B sequences in one pass, so the weights are read once for all of them:
  // token b goes to *caches[b] at its next position. Writes logits [B][vocab] (same rule as
  // forward for ranks that do not compute logits).
  void forward_batch(const int32_t* tokens, KvCache* const* caches, size_t B,
                     std::vector<float>& logits) const;

  // One ragged step: every sequence of `batch` takes its batch.tokens(s) rows of `tokens`
  // (packed in sequence order) in ONE forward, prompt chunks and decodes alike. Writes logits
  // [number of sequences that wants_logits()][vocab], in sequence order (same rule as forward
  // for ranks that do not compute logits).
  void forward_ragged(const int32_t* tokens, KvBatch& batch, std::vector<float>& logits) const;

 private:
  // The body of every forward: n = the batch's total rows. With one sequence, logits for its
  // last n_logits rows; with several, for the last row of each that wants_logits().
  void run(const int32_t* tokens, size_t n, KvBatch& batch, std::vector<float>& logits,
           size_t n_logits) const;

  ModelConfig config_;
  ModelConfig local_;
  ShardLayout shard_;
  Weights weights_;
  comm::Communicator* tp_ = nullptr;
  kernels::Backend* backend_;
  // The activations of a forward, kept across calls (a forward runs on one thread at a time).
  mutable kernels::Workspace workspace_;
};

}  // namespace adakv::model

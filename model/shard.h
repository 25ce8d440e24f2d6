// Which slice of the model one tensor-parallel rank owns (Megatron-style):
//   ColumnParallel q, k, v, gate, up: the rank's output rows (its heads, its ffn columns: an even
//   split, or whole quantization blocks of ffn_down where an even split would cut one);
//   RowParallel o, down: the matching input columns; their partial outputs are summed by one
//   all_reduce each. Query heads split evenly; KV heads split evenly when tp <= n_kv_heads,
//   and are replicated when tp > n_kv_heads (each KV head then lives on tp / n_kv_heads
//   consecutive ranks, the ones whose query heads read it).
// The LM head is either replicated (rank 0 alone computes logits; the others skip it) or
// vocab-parallel (each rank computes vocab / tp rows, one all_gather joins them).
#pragma once

#include <cstddef>
#include <string>

#include "model/config.h"

namespace adakv::model {

enum class LmHeadMode { kReplicated, kVocabParallel };

struct ShardLayout {
  size_t tp_rank = 0, tp_size = 1;
  size_t q_head_begin = 0, n_q_heads = 0;    // local query heads [begin, begin + n)
  size_t kv_head_begin = 0, n_kv_heads = 0;  // local KV heads
  size_t ffn_begin = 0, ffn_dim = 0;         // local SwiGLU hidden columns (may differ by rank)
  size_t vocab_begin = 0, vocab_rows = 0;    // local LM-head rows (the whole vocab if replicated)
  size_t kv_replicas = 1;                    // ranks holding each KV head (1 unless replicated)
  LmHeadMode lm_head = LmHeadMode::kReplicated;

  // Throws std::invalid_argument naming the size that tp does not divide.
  static ShardLayout make(const ModelConfig& c, size_t tp_rank, size_t tp_size,
                          LmHeadMode lm_head = LmHeadMode::kReplicated);
  static ShardLayout single(const ModelConfig& c) { return make(c, 0, 1); }

  // The config of the local shard: n_heads, n_kv_heads and ffn_dim are the rank's own.
  ModelConfig local(const ModelConfig& c) const;
  // True for the first rank of each replicated KV head (it alone contributes that head's
  // Ada-KV gains and its bytes to totals).
  bool owns_kv_heads() const { return tp_rank % kv_replicas == 0; }
};

// LmHeadMode from ADAKV_LM_HEAD (replicated | vocab-parallel). Unset: vocab-parallel, where each
// rank reads and multiplies only its vocab / tp rows of the head (the largest matrix of a small
// model) and one all_gather joins the logits, instead of rank 0 reading all of it.
LmHeadMode lm_head_mode_from_env();
const char* to_string(LmHeadMode m);

}  // namespace adakv::model

// How one cache's KV heads join a compression decision over every rank's heads (tensor
// parallelism): the gain-matrix exchange and the merge of replicated heads' scores, over the
// communicator of the ranks that share the allocation (the host group's gain exchange).
#pragma once

#include <cstddef>
#include <vector>

#include "comm/communicator.h"
#include "runtime/compression/config.h"

namespace adakv::compression {

// The gain matrix has one row per KV head of the model; a cache writes the rows of its own
// heads (when it contributes), the exchange sums the matrices of all ranks, and every rank runs
// the same allocation on the same matrix, so all get the same budget vector.
struct HeadGroup {
  size_t model_kv_heads = 0;  // KV heads of the whole model; 0: this cache's own count
  size_t first_kv_head = 0;   // model index of this cache's head 0
  bool contributes = true;    // false on the 2nd, 3rd... replica of a replicated KV head
  // Ranks holding a copy of each of this cache's KV heads, each with its share of the GQA
  // group's query heads (1: no replication).
  size_t kv_replicas = 1;
  // The ranks sharing the allocation (a communicator of its own, not the layers'); null on one
  // rank.
  comm::Communicator* exchange = nullptr;
  // Pipeline stages: this cache holds layers [layer_begin, layer_end) of the model (layer_end 0:
  // every layer). Scope global allocates over every layer of every stage: its gain matrix is
  // summed over `global_exchange` (every rank of every stage; null: `exchange`), once all stages
  // have scored their layers, i.e. after the step's forward (PagedKvCache::finish_step).
  size_t layer_begin = 0, layer_end = 0;
  comm::Communicator* global_exchange = nullptr;

  bool holds(size_t layer) const {
    return layer >= layer_begin && (layer_end == 0 || layer < layer_end);
  }
  // True when this cache holds only some of the model's layers (a pipeline stage).
  bool staged(size_t n_layers) const {
    return layer_begin > 0 || (layer_end != 0 && layer_end < n_layers);
  }
};

// Sums a gain matrix ([model kv heads * layers][...]) over the group's ranks; identity on one.
// `across_stages`: over every pipeline stage's ranks (scope global), else the stage's.
void exchange_gains(const HeadGroup& group, std::vector<float>& matrix, bool across_stages = false);

// Combines the window scores ([own_heads][prefix]) of the ranks that hold replicas of the
// same KV heads, each having scored it with its own share of the query heads: afterwards every
// replica holds the whole group's score (mean or max over its query heads). No-op without
// replicas.
void merge_replica_scores(const HeadGroup& group, std::vector<float>& scores, size_t own_heads,
                          GqaAggregation gqa);

}  // namespace adakv::compression

// How one cache's KV heads join a compression decision over every rank's heads (tensor
// parallelism): the gain-matrix exchange and the merge of replicated heads' scores.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "runtime/compression/config.h"

namespace adakv::compression {

// Sums a gain matrix over the ranks that share the allocation (identity on one rank).
using GainExchange = std::function<void(std::vector<float>& matrix)>;
// Combines the window scores ([own kv heads][prefix]) of the ranks that hold replicas of the
// same KV heads, each having scored it with its own share of the GQA group's query heads:
// afterwards every replica holds the whole group's score (mean or max over its query heads).
using ReplicaScoreMerge = std::function<void(std::vector<float>& scores, GqaAggregation gqa)>;

// The gain matrix has one row per KV head of the model; a cache writes the rows of its own
// heads (when it contributes), `exchange` sums the matrices of all ranks, and every rank runs
// the same allocation on the same matrix, so all get the same budget vector.
struct HeadGroup {
  size_t model_kv_heads = 0;         // KV heads of the whole model; 0: this cache's own count
  size_t first_kv_head = 0;          // model index of this cache's head 0
  bool contributes = true;           // false on the 2nd, 3rd... replica of a replicated KV head
  GainExchange exchange;             // null on one rank
  ReplicaScoreMerge merge_replicas;  // null unless KV heads are replicated
};

}  // namespace adakv::compression

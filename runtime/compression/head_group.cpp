#include "runtime/compression/head_group.h"

#include <algorithm>

namespace adakv::compression {

void exchange_gains(const HeadGroup& group, std::vector<float>& matrix, bool across_stages) {
  comm::Communicator* comm =
      across_stages && group.global_exchange ? group.global_exchange : group.exchange;
  if (comm) comm->all_reduce(matrix.data(), matrix.size());
}

void merge_replica_scores(const HeadGroup& group, std::vector<float>& scores, size_t own_heads,
                          GqaAggregation gqa) {
  if (group.kv_replicas <= 1 || !group.exchange || scores.empty()) return;
  // Row h of a [model kv heads][prefix] matrix, zero elsewhere: the reduction over all ranks
  // combines the replicas of each head (scores are >= 0, so zero is neutral for max too).
  const bool mean = gqa == GqaAggregation::kMean;
  const size_t prefix = scores.size() / own_heads;
  std::vector<float> all(group.model_kv_heads * prefix, 0.0f);
  for (size_t i = 0; i < scores.size(); ++i) {
    all[group.first_kv_head * prefix + i] =
        mean ? scores[i] / static_cast<float>(group.kv_replicas) : scores[i];
  }
  group.exchange->all_reduce(all.data(), all.size(),
                             mean ? comm::ReduceOp::kSum : comm::ReduceOp::kMax);
  std::copy_n(all.begin() + group.first_kv_head * prefix, scores.size(), scores.begin());
}

}  // namespace adakv::compression

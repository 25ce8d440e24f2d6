// Distributed Ada-KV allocation: each rank scores only its own KV heads (the same fixed
// q/k/v tensors everywhere, each rank taking its slice), the gain matrix is all-reduced, and
// every rank must come out with the same budget vector, bit for bit, equal to the one a
// single rank holding every head computes. Runs under every rank count of the mpi suite.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "model/config.h"
#include "model/shard.h"
#include "mpi_test_env.h"
#include "runtime/kv/block_pool.h"
#include "runtime/kv/paged_kv_cache.h"

namespace adakv::test {
namespace {

using compression::CompressionConfig;

// 24 KV heads split over 1, 2, 3, 4 and 8 ranks; 2 query heads per KV head.
model::ModelConfig test_model() {
  model::ModelConfig c;
  c.architecture = "llama";
  c.n_layers = 3;
  c.n_heads = 48;
  c.n_kv_heads = 24;
  c.head_dim = 16;
  c.rope_dim = 16;
  c.d_model = c.n_heads * c.head_dim;
  c.ffn_dim = 96;
  c.vocab_size = 8;
  c.context_length = 4096;
  return c;
}

// Fixed activations of one layer, the same on every rank: [n][heads][head_dim].
struct LayerInput {
  std::vector<float> q, k, v;
};

LayerInput layer_input(const model::ModelConfig& c, size_t n, size_t layer) {
  std::mt19937 rng(1234 + unsigned(layer));
  std::normal_distribution<float> d(0.0f, 1.0f);
  LayerInput in;
  in.q.resize(n * c.q_width());
  in.k.resize(n * c.kv_width());
  in.v.resize(n * c.kv_width());
  for (auto& x : in.q) x = 2.0f * d(rng);
  for (auto& x : in.k) x = 2.0f * d(rng);
  for (auto& x : in.v) x = d(rng);
  return in;
}

// Prefills every layer for this shard's heads and returns the budget vector it computed.
std::vector<std::vector<size_t>> budgets_of(const model::ModelConfig& c,
                                            const model::ShardLayout& shard,
                                            const CompressionConfig& policy,
                                            comm::Communicator* exchange, size_t n) {
  const auto local = shard.local(c);
  runtime::BlockPool pool({16, c.head_dim, kernels::KvDtype::kF32},
                          c.n_layers * local.n_kv_heads * ((n + 15) / 16), kernels::cpu_backend());
  runtime::HeadGroup group;
  group.model_kv_heads = c.n_kv_heads;
  group.first_kv_head = shard.kv_head_begin;
  group.exchange = exchange;
  runtime::PagedKvCache cache(pool, local, policy, group);
  const size_t Dh = c.head_dim;
  std::vector<float> out(n * local.q_width());
  for (size_t l = 0; l < c.n_layers; ++l) {
    const auto in = layer_input(c, n, l);
    cache.append_and_attend(l, in.q.data() + shard.q_head_begin * Dh, c.q_width(),
                            in.k.data() + shard.kv_head_begin * Dh,
                            in.v.data() + shard.kv_head_begin * Dh, c.kv_width(), n, out.data());
  }
  cache.commit(n);
  return cache.report().budgets;
}

std::vector<float> flatten(const std::vector<std::vector<size_t>>& b) {
  std::vector<float> f;
  for (const auto& row : b) f.insert(f.end(), row.begin(), row.end());
  return f;
}

void check_policy(const CompressionConfig& policy) {
  auto& comm = test_comm();
  const auto c = test_model();
  const size_t n = 333;  // odd, not a multiple of the block or tile size
  const auto shard = model::ShardLayout::make(c, comm.rank(), comm.size());
  const auto mine = budgets_of(c, shard, policy, &comm, n);
  const auto single = budgets_of(c, model::ShardLayout::single(c), policy, nullptr, n);
  ASSERT_EQ(mine.size(), c.n_layers);
  EXPECT_EQ(mine, single) << "rank " << comm.rank() << " of " << comm.size();

  // Bit-identical on every rank: gather every rank's vector and compare with rank 0's.
  const auto flat = flatten(mine);
  std::vector<float> all(flat.size() * comm.size());
  comm.all_gather(flat.data(), flat.size(), all.data());
  for (int r = 1; r < comm.size(); ++r) {
    EXPECT_TRUE(std::equal(flat.begin(), flat.end(), all.begin() + r * flat.size()))
        << "rank " << r << " computed another budget vector than rank 0";
  }
  // Adaptive: heads do not all get the same budget.
  EXPECT_NE(*std::min_element(mine[0].begin(), mine[0].end()),
            *std::max_element(mine[0].begin(), mine[0].end()));
}

CompressionConfig ada(compression::Scope scope, compression::Rule rule) {
  CompressionConfig p;
  p.policy = compression::Policy::kAdaKV;
  p.budget_ratio = 0.2;
  p.scope = scope;
  p.rule = rule;
  return p;
}

TEST(DistributedAllocator, TopKLayerScopeMatchesOneRank) {
  check_policy(ada(compression::Scope::kLayer, compression::Rule::kTopK));
}

TEST(DistributedAllocator, TopKGlobalScopeMatchesOneRank) {
  check_policy(ada(compression::Scope::kGlobal, compression::Rule::kTopK));
}

TEST(DistributedAllocator, WaterfillMatchesOneRank) {
  check_policy(ada(compression::Scope::kLayer, compression::Rule::kWaterfill));
  check_policy(ada(compression::Scope::kGlobal, compression::Rule::kWaterfill));
}

TEST(DistributedAllocator, AdaPyramidMatchesOneRank) {
  auto p = ada(compression::Scope::kLayer, compression::Rule::kTopK);
  p.policy = compression::Policy::kAdaPyramid;
  check_policy(p);
}

// The peak scores are each rank's own heads' too: the same budget vector on every rank layout.
TEST(DistributedAllocator, PeakBudgetScoresMatchOneRank) {
  for (auto scope : {compression::Scope::kLayer, compression::Scope::kGlobal}) {
    auto p = ada(scope, compression::Rule::kTopK);
    p.budget_scores = compression::BudgetScores::kPeak;
    check_policy(p);
  }
}

}  // namespace
}  // namespace adakv::test

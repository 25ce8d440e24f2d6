// ShardLayout: which heads, ffn columns and vocabulary rows each tensor-parallel rank owns.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "model/shard.h"

namespace adakv::model {
namespace {

ModelConfig config(size_t heads, size_t kv_heads, size_t ffn, size_t vocab) {
  ModelConfig c;
  c.n_layers = 2;
  c.n_heads = heads;
  c.n_kv_heads = kv_heads;
  c.head_dim = 8;
  c.d_model = heads * 8;
  c.ffn_dim = ffn;
  c.vocab_size = vocab;
  return c;
}

TEST(ShardLayout, SplitsHeadsFfnAndVocabEvenly) {
  const auto c = config(9, 3, 1536, 49152);  // the default model's shape
  for (size_t r = 0; r < 3; ++r) {
    const auto s = ShardLayout::make(c, r, 3, LmHeadMode::kVocabParallel);
    EXPECT_EQ(s.n_q_heads, 3u);
    EXPECT_EQ(s.q_head_begin, 3 * r);
    EXPECT_EQ(s.n_kv_heads, 1u);
    EXPECT_EQ(s.kv_head_begin, r);
    EXPECT_EQ(s.kv_replicas, 1u);
    EXPECT_TRUE(s.owns_kv_heads());
    EXPECT_EQ(s.ffn_dim, 512u);
    EXPECT_EQ(s.ffn_begin, 512 * r);
    EXPECT_EQ(s.vocab_rows, 16384u);
    EXPECT_EQ(s.vocab_begin, 16384 * r);
    const auto local = s.local(c);
    EXPECT_EQ(local.n_heads, 3u);
    EXPECT_EQ(local.n_kv_heads, 1u);
    EXPECT_EQ(local.ffn_dim, 512u);
    EXPECT_EQ(local.d_model, c.d_model);
    EXPECT_EQ(local.vocab_size, c.vocab_size);
  }
}

TEST(ShardLayout, ReplicatesKvHeadsWhenTpExceedsThem) {
  const auto c = config(16, 2, 64, 264);
  for (size_t r = 0; r < 8; ++r) {
    const auto s = ShardLayout::make(c, r, 8);
    EXPECT_EQ(s.n_q_heads, 2u);
    EXPECT_EQ(s.n_kv_heads, 1u);
    EXPECT_EQ(s.kv_replicas, 4u);
    EXPECT_EQ(s.kv_head_begin, r / 4);  // query heads 2r, 2r+1 read KV head r / 4
    EXPECT_EQ((s.q_head_begin) / (c.n_heads / c.n_kv_heads), s.kv_head_begin);
    EXPECT_EQ(s.owns_kv_heads(), r % 4 == 0);
  }
}

TEST(ShardLayout, OneRankHoldsEverything) {
  const auto c = config(9, 3, 1536, 49152);
  const auto s = ShardLayout::single(c);
  EXPECT_EQ(s.n_q_heads, 9u);
  EXPECT_EQ(s.n_kv_heads, 3u);
  EXPECT_EQ(s.ffn_dim, 1536u);
  EXPECT_EQ(s.vocab_rows, 49152u);
  EXPECT_EQ(s.lm_head, LmHeadMode::kReplicated);
}

TEST(ShardLayout, VocabNotDivisibleFallsBackToReplicated) {
  const auto s = ShardLayout::make(config(8, 8, 64, 1001), 1, 2, LmHeadMode::kVocabParallel);
  EXPECT_EQ(s.lm_head, LmHeadMode::kReplicated);
  EXPECT_EQ(s.vocab_rows, 1001u);
  EXPECT_EQ(s.vocab_begin, 0u);
}

void expect_error(const ModelConfig& c, size_t tp, const std::string& words) {
  try {
    ShardLayout::make(c, 0, tp);
    FAIL() << "tp " << tp << " was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

TEST(ShardLayout, RefusesSizesThatDoNotShardWithAClearError) {
  expect_error(config(9, 3, 1536, 49152), 2, "does not divide the model's attention heads (9)");
  expect_error(config(8, 8, 100, 64), 8, "does not divide the model's ffn width (100)");
  expect_error(config(12, 4, 96, 64), 6, "not a multiple of them");
  expect_error(config(8, 4, 64, 64), 0, "bad tensor-parallel rank");
}

}  // namespace
}  // namespace adakv::model

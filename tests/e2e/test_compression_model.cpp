// Ada-KV on the real model: memory really freed, budget 100% changes nothing, and one
// recording prefill serves every policy exactly as separate prefills would.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <sstream>

#include "runtime/engine.h"
#include "runtime/kv/block_pool.h"
#include "runtime/policy_fork.h"
#include "runtime/worker.h"
#include "tests/e2e/model_fixture.h"

namespace {

using adakv::compression::CompressionConfig;
using adakv::compression::Policy;
using adakv::compression::Scope;

class CompressionModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { engine_ = new adakv::runtime::Worker(adakv::test::model_path()); }
  static void TearDownTestSuite() { delete engine_; }
  // The first n tokens of the GPL-3 text (Debian's base-files ships it).
  static std::vector<int32_t> prompt(size_t n) {
    std::ifstream in("/usr/share/common-licenses/GPL-3");
    std::stringstream ss;
    ss << in.rdbuf();
    auto ids = engine_->tokenizer().encode(ss.str());
    ids.resize(n);
    return ids;
  }
  static adakv::runtime::Worker* engine_;
};
adakv::runtime::Worker* CompressionModel::engine_ = nullptr;

CompressionConfig policy(Policy p, double ratio, Scope scope = Scope::kLayer) {
  CompressionConfig c;
  c.policy = p;
  c.budget_ratio = ratio;
  c.scope = scope;
  return c;
}

TEST_F(CompressionModel, TwentyPercentHoldsAtMostTwentyOnePercentAfterPrefill) {
  adakv::runtime::GenerateRequest req;
  req.prompt = prompt(2000);
  req.max_tokens = 1;
  for (Scope scope : {Scope::kLayer, Scope::kGlobal}) {
    req.compression = policy(Policy::kAdaKV, 0.2, scope);
    const auto r = adakv::runtime::generate(*engine_, req);
    const double ratio = double(r.kv_after_prefill_bytes) / r.kv_full_after_prefill_bytes;
    std::printf("scope %s: held %zu of %zu bytes after prefill (%.2f%%); pool free %zu of %zu\n",
                adakv::compression::to_string(scope), r.kv_after_prefill_bytes,
                r.kv_full_after_prefill_bytes, 100 * ratio, r.pool_free_after_prefill_bytes,
                r.pool_bytes);
    EXPECT_LE(ratio, 0.21);
    EXPECT_EQ(r.pool_free_after_prefill_bytes, r.pool_bytes - r.kv_after_prefill_bytes);
    size_t kept = 0, heads = 0;
    for (const auto& layer : r.compression.kept) {
      for (size_t k : layer) {
        kept += k;
        ++heads;
        EXPECT_GE(k, 32u);  // the window is always kept
      }
    }
    EXPECT_NEAR(double(kept) / heads, 400.0, 2.0);  // 20% of 2000 on average
  }
}

TEST_F(CompressionModel, FullBudgetIsBitIdenticalOver64Steps) {
  adakv::runtime::GenerateRequest req;
  req.prompt = prompt(600);
  req.max_tokens = 64;
  req.stop_at_eos = false;
  req.compression = policy(Policy::kFull, 1.0);
  const auto full = adakv::runtime::generate(*engine_, req);
  req.compression = policy(Policy::kAdaKV, 1.0);
  const auto ada = adakv::runtime::generate(*engine_, req);
  EXPECT_EQ(full.tokens, ada.tokens);
  EXPECT_EQ(full.kv_kept_bytes, ada.kv_kept_bytes);
}

// generate_policies (one recording prefill, a compressed copy per policy) against one generate
// per policy, which compacts during its own prefill, or, with look-ahead, copies from its own
// recording prefill.
void expect_shared_prefill_matches_separate(adakv::runtime::Worker& engine,
                                            const std::vector<int32_t>& prompt,
                                            const std::vector<CompressionConfig>& policies) {
  adakv::runtime::GenerateRequest req;
  req.prompt = prompt;
  req.max_tokens = 12;
  req.stop_at_eos = false;
  const auto shared = adakv::runtime::generate_policies(engine, req, policies);
  ASSERT_EQ(shared.size(), policies.size());
  for (size_t i = 0; i < policies.size(); ++i) {
    SCOPED_TRACE(adakv::compression::to_string(policies[i].policy));
    req.compression = policies[i];
    const auto alone = adakv::runtime::generate(engine, req);
    EXPECT_EQ(shared[i].tokens, alone.tokens);
    EXPECT_EQ(shared[i].compression.kept, alone.compression.kept);
    EXPECT_EQ(shared[i].kv_kept_bytes, alone.kv_kept_bytes);
    EXPECT_EQ(shared[i].compression.lookahead_tokens, alone.compression.lookahead_tokens);
  }
}

TEST_F(CompressionModel, OnePrefillServesEveryPolicyLikeSeparatePrefills) {
  expect_shared_prefill_matches_separate(
      *engine_, prompt(700),
      {policy(Policy::kFull, 1.0), policy(Policy::kAdaKV, 0.2), policy(Policy::kSnapKV, 0.2),
       policy(Policy::kStreaming, 0.2), policy(Policy::kPyramidKV, 0.2),
       policy(Policy::kAdaPyramid, 0.2), policy(Policy::kAdaKV, 0.1, Scope::kGlobal)});
}

// Look-ahead on the real model: 8 greedy tokens join the scoring, the same way in both paths,
// and they change what is kept (the scores differ from the window's alone).
TEST_F(CompressionModel, LookAheadTokensJoinTheScoringInBothPaths) {
  std::vector<CompressionConfig> policies = {
      policy(Policy::kFull, 1.0), policy(Policy::kAdaKV, 0.2), policy(Policy::kSnapKV, 0.2)};
  for (auto& p : policies) p.lookahead = 8;
  expect_shared_prefill_matches_separate(*engine_, prompt(700), policies);

  adakv::runtime::GenerateRequest req;
  req.prompt = prompt(700);
  req.max_tokens = 1;
  req.compression = policies[1];
  const auto ahead = adakv::runtime::generate(*engine_, req);
  EXPECT_EQ(ahead.compression.lookahead_tokens, 8u);  // GPL-3 prose: no EOS within 8 tokens
  EXPECT_GT(ahead.compression.lookahead_s, 0.0);
  req.compression.lookahead = 0;
  const auto plain = adakv::runtime::generate(*engine_, req);
  EXPECT_EQ(plain.compression.lookahead_tokens, 0u);
  EXPECT_NE(ahead.compression.kept, plain.compression.kept);
  EXPECT_LE(double(ahead.kv_after_prefill_bytes) / ahead.kv_full_after_prefill_bytes, 0.21);
  EXPECT_EQ(ahead.pool_free_after_prefill_bytes, ahead.pool_bytes - ahead.kv_after_prefill_bytes);
}

}  // namespace

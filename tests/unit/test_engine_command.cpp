// The control plane's engine commands survive encoding; damaged messages are refused.
#include <gtest/gtest.h>

#include <stdexcept>

#include "runtime/engine_command.h"

namespace adakv::runtime {
namespace {

EngineCommand sample() {
  EngineCommand c;
  c.op = EngineOp::kStep;
  SequenceFork f;
  f.id = 8;
  f.source = 7;
  f.compression.policy = compression::Policy::kSnapKV;
  f.compression.budget_tokens = 128;
  f.compression.scope = compression::Scope::kGlobal;
  c.plan.fork = {f};
  c.plan.gather_scores = {7};
  StepEntry e;
  e.id = 8;
  e.tokens = {1, 2, 3, 49151};
  e.logits = true;
  e.scored_text = true;
  c.plan.entries = {e};
  return c;
}

TEST(EngineCommand, RoundTrips) {
  const auto c = sample();
  const auto d = decode_command(encode_command(c));
  EXPECT_EQ(d.op, c.op);
  ASSERT_EQ(d.plan.fork.size(), 1u);
  EXPECT_EQ(d.plan.fork[0].id, 8u);
  EXPECT_EQ(d.plan.fork[0].source, 7u);
  EXPECT_EQ(d.plan.fork[0].compression.policy, compression::Policy::kSnapKV);
  EXPECT_EQ(d.plan.fork[0].compression.budget_tokens, 128u);
  EXPECT_EQ(d.plan.fork[0].compression.scope, compression::Scope::kGlobal);
  EXPECT_EQ(d.plan.gather_scores, c.plan.gather_scores);
  ASSERT_EQ(d.plan.entries.size(), 1u);
  EXPECT_EQ(d.plan.entries[0].tokens, c.plan.entries[0].tokens);
  EXPECT_TRUE(d.plan.entries[0].logits);
  EXPECT_TRUE(d.plan.entries[0].scored_text);
  EXPECT_EQ(decode_command(encode_command(EngineCommand{})).op, EngineOp::kShutdown);
}

TEST(EngineCommand, RefusesDamagedMessages) {
  const std::string bytes = encode_command(sample());
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_THROW(decode_command(bytes.substr(0, n)), std::runtime_error) << "prefix " << n;
  }
  EXPECT_THROW(decode_command(bytes + "x"), std::runtime_error);
  std::string bad = bytes;
  bad[0] ^= 1;
  EXPECT_THROW(decode_command(bad), std::runtime_error);
  bad = bytes;
  bad[4] = 99;  // the operation byte follows the 4-byte magic
  EXPECT_THROW(decode_command(bad), std::runtime_error);
}

}  // namespace
}  // namespace adakv::runtime

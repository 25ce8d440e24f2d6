// Step plans survive the control plane's encoding; damaged messages are refused.
#include <gtest/gtest.h>

#include <cstddef>
#include <stdexcept>

#include "runtime/engine_command.h"
#include "runtime/step_plan.h"

namespace adakv::runtime {
namespace {

StepPlan sample() {
  StepPlan p;
  p.report = {3};
  p.release = {3, 9};
  SequenceStart s;
  s.id = 11;
  s.prompt_tokens = 4000;
  s.lookahead = 16;
  s.compression.policy = compression::Policy::kSnapKV;
  s.compression.budget_tokens = 128;
  p.start = {s};
  p.end_lookahead = {5};
  p.rewind_lookahead = {11};
  p.prefix_evict = {0xfeedULL};
  p.prefix_attach = {{11, 0xabcULL, 0}, {11, 0xdefULL, 1}};
  p.prefix_insert = {{5, 0x123ULL, 2}};
  p.entries = {{11, {1, 2, 3}, false}, {5, {49151}, true}};
  p.entries[1].layer_begin = 7;
  p.entries[1].layer_end = 12;
  return p;
}

TEST(StepPlan, RoundTripsThroughTheEngineCommand) {
  EngineCommand c;
  c.op = EngineOp::kStep;
  c.plan = sample();
  const auto d = decode_command(encode_command(c));
  ASSERT_EQ(d.op, EngineOp::kStep);
  const StepPlan& p = d.plan;
  EXPECT_EQ(p.report, c.plan.report);
  EXPECT_EQ(p.release, c.plan.release);
  ASSERT_EQ(p.start.size(), 1u);
  EXPECT_EQ(p.start[0].id, 11u);
  EXPECT_EQ(p.start[0].prompt_tokens, 4000u);
  EXPECT_EQ(p.start[0].lookahead, 16u);
  EXPECT_EQ(p.start[0].compression.policy, compression::Policy::kSnapKV);
  EXPECT_EQ(p.start[0].compression.budget_tokens, 128u);
  EXPECT_EQ(p.end_lookahead, c.plan.end_lookahead);
  EXPECT_EQ(p.rewind_lookahead, c.plan.rewind_lookahead);
  EXPECT_EQ(p.prefix_evict, c.plan.prefix_evict);
  ASSERT_EQ(p.prefix_attach.size(), 2u);
  EXPECT_EQ(p.prefix_attach[1].id, 11u);
  EXPECT_EQ(p.prefix_attach[1].key, 0xdefULL);
  EXPECT_EQ(p.prefix_attach[1].index, 1u);
  ASSERT_EQ(p.prefix_insert.size(), 1u);
  EXPECT_EQ(p.prefix_insert[0].key, 0x123ULL);
  EXPECT_EQ(p.prefix_insert[0].index, 2u);
  ASSERT_EQ(p.entries.size(), 2u);
  EXPECT_EQ(p.entries[0].tokens, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_FALSE(p.entries[0].logits);
  EXPECT_EQ(p.entries[1].id, 5u);
  EXPECT_TRUE(p.entries[1].logits);
  EXPECT_EQ(p.entries[0].layer_begin, 0u);
  EXPECT_EQ(p.entries[0].layer_end, UINT32_MAX);
  EXPECT_EQ(p.entries[1].layer_begin, 7u);
  EXPECT_EQ(p.entries[1].layer_end, 12u);
  EXPECT_EQ(c.plan.tokens(), 4u);
}

TEST(StepPlan, ConfigureRoundTrips) {
  EngineCommand c;
  c.op = EngineOp::kConfigureSteps;
  c.serving.kv_pool_blocks = 12345;
  c.serving.kv_dtype = kernels::KvDtype::kBF16;
  c.serving.prefill_chunk = 256;
  c.serving.prefix_caching = false;
  const auto d = decode_command(encode_command(c));
  EXPECT_FALSE(d.serving.prefix_caching);
  EXPECT_EQ(d.serving.kv_pool_blocks, 12345u);
  EXPECT_EQ(d.serving.kv_dtype, kernels::KvDtype::kBF16);
  EXPECT_EQ(d.serving.prefill_chunk, 256u);
}

TEST(StepPlan, RefusesDamagedMessages) {
  const std::string bytes = encode_plan(sample());
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_THROW(decode_plan(bytes.substr(0, n)), std::runtime_error) << "prefix " << n;
  }
  EXPECT_THROW(decode_plan(bytes + "x"), std::runtime_error);
}

// A byte other than 0 or 1 where a bool travels is refused: loading it as a bool is undefined
// behaviour (found by the wire fuzz target).
TEST(StepPlan, RefusesBytesThatAreNoBool) {
  StepPlan entry_only;
  entry_only.entries = {{11, {1}, true}};
  std::string bytes = encode_plan(entry_only);
  const size_t logits_at = 10 * 8 + 8 + 8 + 4;  // nine empty lists, the entry count, id, tokens
  ASSERT_EQ(bytes[logits_at], 1);
  bytes[logits_at] = 2;
  EXPECT_THROW(decode_plan(bytes), std::runtime_error);

  StepPlan start_only;
  start_only.start = {SequenceStart{}};
  start_only.start[0].record_scores = true;
  bytes = encode_plan(start_only);
  const size_t record_at = 4 * 8 + offsetof(SequenceStart, record_scores);
  ASSERT_EQ(bytes[record_at], 1);
  bytes[record_at] = 2;
  EXPECT_THROW(decode_plan(bytes), std::runtime_error);
}

TEST(ServingConfig, NamesTheBadField) {
  ServingConfig c;
  c.kv_pool_blocks = 10;
  EXPECT_NO_THROW(c.validate());
  c.max_num_seqs = 0;
  try {
    c.validate();
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("max_num_seqs"), std::string::npos);
  }
}

// A repeat piece is 0 (as long as fits) or at least kMinRepeatPiece tokens; 2,048 by default.
TEST(ServingConfig, RefusesARepeatPieceTooShortToScore) {
  ServingConfig c;
  c.kv_pool_blocks = 10;
  EXPECT_EQ(c.context_repeat_piece, compression::kDefaultRepeatPiece);
  for (size_t piece : {size_t{0}, compression::kMinRepeatPiece}) {
    c.context_repeat_piece = piece;
    EXPECT_NO_THROW(c.validate()) << piece;
  }
  c.context_repeat_piece = compression::kMinRepeatPiece - 1;
  try {
    c.validate();
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("repeat piece"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace adakv::runtime

// The control plane's engine commands survive encoding; damaged messages are refused.
#include <gtest/gtest.h>

#include <stdexcept>

#include "runtime/engine_command.h"

namespace adakv::runtime {
namespace {

EngineCommand sample() {
  EngineCommand c;
  c.op = EngineOp::kGeneratePolicies;
  c.request.prompt = {1, 2, 3, 49151};
  c.request.max_tokens = 77;
  c.request.sampling.temperature = 0.5f;
  c.request.sampling.seed = 42;
  c.request.stop_at_eos = false;
  c.request.compression.budget_ratio = 0.3;
  c.request.compression.scope = compression::Scope::kGlobal;
  c.request.kv_dtype = kernels::KvDtype::kE4M3;
  c.request.block_tokens = 32;
  c.policies.resize(2);
  c.policies[1].policy = compression::Policy::kSnapKV;
  c.policies[1].budget_tokens = 128;
  c.continuation = {7, 8, 9};
  return c;
}

TEST(EngineCommand, RoundTrips) {
  const auto c = sample();
  const auto d = decode_command(encode_command(c));
  EXPECT_EQ(d.op, c.op);
  EXPECT_EQ(d.request.prompt, c.request.prompt);
  EXPECT_EQ(d.request.max_tokens, 77u);
  EXPECT_EQ(d.request.sampling.temperature, 0.5f);
  EXPECT_EQ(d.request.sampling.seed, 42u);
  EXPECT_FALSE(d.request.stop_at_eos);
  EXPECT_EQ(d.request.compression.budget_ratio, 0.3);
  EXPECT_EQ(d.request.compression.scope, compression::Scope::kGlobal);
  EXPECT_EQ(d.request.kv_dtype, kernels::KvDtype::kE4M3);
  EXPECT_EQ(d.request.block_tokens, 32u);
  ASSERT_EQ(d.policies.size(), 2u);
  EXPECT_EQ(d.policies[1].policy, compression::Policy::kSnapKV);
  EXPECT_EQ(d.policies[1].budget_tokens, 128u);
  EXPECT_EQ(d.continuation, c.continuation);
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

// Log probabilities through the serving loop on the default model: the prompt's (echo) against
// the float32 path's own full-cache forward of the same prompt (LlamaModel::forward with every
// row's logits, log-softmax in double), whether the prompt runs in one forward, in chunks, layer
// by layer, or beside other requests; and each sampled token's against the logits it came from.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "runtime/contiguous_kv_cache.h"
#include "runtime/engine.h"
#include "runtime/logprobs.h"
#include "tests/e2e/model_fixture.h"

namespace {

using adakv::compression::Policy;
using adakv::runtime::Engine;
using adakv::runtime::GenerateRequest;
using adakv::runtime::GenerateResult;
using adakv::runtime::ServingConfig;
using adakv::runtime::TokenLogprob;
using adakv::runtime::Worker;

class PromptLogprobs : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    worker_ = new Worker(adakv::test::model_path());
    std::string text;
    for (int i = 0; i < 60; ++i) {
      text += "Line " + std::to_string(i * 7 % 13) + ": the river runs past the old mill. ";
    }
    prompt_ = new std::vector<int32_t>(worker_->encode_prompt(text, false));
    prompt_->resize(300);
    // The reference: one forward of the whole prompt on a float32 contiguous cache.
    const auto& model = worker_->model();
    const size_t n = prompt_->size(), V = model.config().vocab_size;
    adakv::runtime::ContiguousKvCache cache(model.config(), n, model.backend());
    const std::vector<float> logits =
        model.logits_to_host(model.forward(prompt_->data(), n, cache, n));
    reference_ = new std::vector<TokenLogprob>;
    for (size_t p = 0; p + 1 < n; ++p) {
      reference_->push_back(
          adakv::runtime::token_logprob(logits.data() + p * V, V, (*prompt_)[p + 1], 5));
    }
  }
  static void TearDownTestSuite() {
    delete reference_;
    delete prompt_;
    delete worker_;
  }
  static GenerateRequest echo_request(Policy policy) {
    GenerateRequest r;
    r.prompt = *prompt_;
    r.max_tokens = 4;
    r.logprobs = 5;
    r.prompt_logprobs = true;
    r.compression.policy = policy;
    r.kv_dtype = adakv::kernels::KvDtype::kF32;
    return r;
  }
  static ServingConfig serving(size_t chunk) {
    ServingConfig c;
    c.kv_pool_blocks = 20000;
    c.kv_dtype = adakv::kernels::KvDtype::kF32;
    c.prefill_chunk = chunk;
    c.max_num_batched_tokens = 2048;
    return c;
  }
  // max |logprob - reference| over the prompt's tokens and their top 5.
  static double worst_diff(const GenerateResult& r) {
    EXPECT_EQ(r.prompt_logprobs.size(), reference_->size());
    double worst = 0;
    for (size_t p = 0; p < std::min(r.prompt_logprobs.size(), reference_->size()); ++p) {
      const TokenLogprob& got = r.prompt_logprobs[p];
      const TokenLogprob& want = (*reference_)[p];
      EXPECT_EQ(got.token, (*prompt_)[p + 1]);
      worst = std::max(worst, std::fabs(got.logprob - want.logprob));
      EXPECT_EQ(got.top.size(), 5u);
      for (size_t k = 0; k < std::min(got.top.size(), want.top.size()); ++k) {
        if (k > 0) {
          EXPECT_GE(got.top[k - 1].logprob, got.top[k].logprob);
        }
        worst = std::max(worst, std::fabs(got.top[k].logprob - want.top[k].logprob));
      }
    }
    return worst;
  }
  static Worker* worker_;
  static std::vector<int32_t>* prompt_;
  static std::vector<TokenLogprob>* reference_;
};
Worker* PromptLogprobs::worker_ = nullptr;
std::vector<int32_t>* PromptLogprobs::prompt_ = nullptr;
std::vector<TokenLogprob>* PromptLogprobs::reference_ = nullptr;

TEST_F(PromptLogprobs, EchoMatchesTheFullCacheForward) {
  struct Case {
    const char* what;
    Policy policy;
    size_t chunk;
  };
  // One forward; three chunks (the later ones attend over the float32 pool); layer by layer
  // (adakv, scope layer, a prompt longer than a chunk).
  for (const Case& c : {Case{"one forward, full", Policy::kFull, 512},
                        Case{"chunks of 128, full", Policy::kFull, 128},
                        Case{"layer by layer, adakv", Policy::kAdaKV, 128}}) {
    Engine loop(*worker_, serving(c.chunk));
    GenerateResult result;
    std::vector<TokenLogprob> streamed_prompt;
    adakv::runtime::Request r;
    r.generate = echo_request(c.policy);
    r.on_prompt_logprobs = [&](const std::vector<TokenLogprob>& lps) { streamed_prompt = lps; };
    r.on_done = [&](GenerateResult&& g) { result = std::move(g); };
    // A plain request beside it: the rows of both are told apart.
    adakv::runtime::Request other;
    other.generate.prompt = std::vector<int32_t>(prompt_->begin(), prompt_->begin() + 40);
    other.generate.max_tokens = 3;
    GenerateResult other_result;
    other.on_done = [&](GenerateResult&& g) { other_result = std::move(g); };
    loop.add(std::move(other));
    loop.add(std::move(r));
    loop.run_until_done();
    const double worst = worst_diff(result);
    std::printf("%s: max |prompt logprob - full-cache forward| = %.3g over %zu tokens\n", c.what,
                worst, result.prompt_logprobs.size());
    EXPECT_LE(worst, 1e-3) << c.what;
    EXPECT_EQ(streamed_prompt.size(), result.prompt_logprobs.size());
    EXPECT_EQ(other_result.tokens.size(), 3u);
    EXPECT_TRUE(other_result.prompt_logprobs.empty());
    // Greedy: each generated token is the top alternative of its own row.
    ASSERT_EQ(result.logprobs.size(), result.tokens.size());
    for (size_t i = 0; i < result.tokens.size(); ++i) {
      EXPECT_EQ(result.logprobs[i].token, result.tokens[i]);
      EXPECT_EQ(result.logprobs[i].top.at(0).token, result.tokens[i]);
      EXPECT_EQ(result.logprobs[i].top.at(0).logprob, result.logprobs[i].logprob);
    }
  }
}

// The first generated token's logprob is the prompt's last row: the reference's row n-1.
TEST_F(PromptLogprobs, FirstTokenLogprobIsTheLastPromptRow) {
  const auto& model = worker_->model();
  const size_t n = prompt_->size(), V = model.config().vocab_size;
  adakv::runtime::ContiguousKvCache cache(model.config(), n, model.backend());
  const std::vector<float> last = model.logits_to_host(model.forward(prompt_->data(), n, cache, 1));
  GenerateRequest r = echo_request(Policy::kFull);
  r.prompt_logprobs = false;
  const GenerateResult g = adakv::runtime::generate(*worker_, r);
  ASSERT_FALSE(g.logprobs.empty());
  const TokenLogprob want = adakv::runtime::token_logprob(last.data(), V, g.tokens[0], 5);
  EXPECT_NEAR(g.logprobs[0].logprob, want.logprob, 1e-3);
  EXPECT_TRUE(g.prompt_logprobs.empty());
}

}  // namespace

// The sampler's penalties, biases, min-p, min_tokens and log probabilities against a plain
// reference written from the definitions (OpenAI's penalties over generated tokens, vLLM's
// repetition penalty over prompt and generated tokens, log-softmax in double).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "runtime/logprobs.h"
#include "runtime/sampler.h"

using adakv::runtime::Sampler;
using adakv::runtime::SamplingParams;
using adakv::runtime::TokenLogprob;

namespace {

// The processed logits by the definitions, one token at a time.
std::vector<double> reference_row(const std::vector<float>& raw, const SamplingParams& p,
                                  const std::vector<int32_t>& prompt,
                                  const std::vector<int32_t>& generated,
                                  const std::vector<int32_t>& stop_ids) {
  std::vector<double> row(raw.begin(), raw.end());
  if (generated.size() < p.min_tokens) {
    for (int32_t t : stop_ids) row[t] = -INFINITY;
    for (int32_t t : p.stop_token_ids) row[t] = -INFINITY;
  }
  for (const auto& [t, b] : p.logit_bias) row[t] += b;
  std::set<int32_t> seen(prompt.begin(), prompt.end());
  seen.insert(generated.begin(), generated.end());
  for (int32_t t : seen)
    row[t] = row[t] > 0 ? row[t] / p.repetition_penalty : row[t] * p.repetition_penalty;
  std::map<int32_t, int> count;
  for (int32_t t : generated) ++count[t];
  for (const auto& [t, c] : count) row[t] -= p.frequency_penalty * c + p.presence_penalty;
  return row;
}

double reference_logprob(const std::vector<double>& row, int32_t token) {
  double m = -INFINITY;
  for (double x : row) m = std::max(m, x);
  double sum = 0;
  for (double x : row) sum += std::exp(x - m);
  return row[token] - (m + std::log(sum));
}

std::vector<float> random_logits(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = normal(rng);
  return v;
}

}  // namespace

// Greedy decoding with every processing option at once: each step's token is the argmax of the
// reference row, and its logprob (with the top 5) is the reference's log-softmax.
TEST(SamplerPenalties, GreedyFollowsTheReferenceRow) {
  SamplingParams p;
  p.presence_penalty = 0.7f;
  p.frequency_penalty = 1.3f;
  p.repetition_penalty = 1.6f;
  p.logit_bias = {{5, 4.0f}, {17, -100.0f}};
  p.min_tokens = 3;
  p.stop_token_ids = {9};
  const std::vector<int32_t> prompt = {1, 2, 3, 5, 8};
  const std::vector<int32_t> stops = {0};
  Sampler s(p, prompt, stops);
  std::vector<int32_t> generated;
  for (int step = 0; step < 12; ++step) {
    const auto raw = random_logits(40, 100 + step);
    const auto row = reference_row(raw, p, prompt, generated, stops);
    const int32_t want = int32_t(std::max_element(row.begin(), row.end()) - row.begin());
    const int32_t got = s.sample(raw.data(), raw.size());
    ASSERT_EQ(got, want) << "step " << step;
    const TokenLogprob lp = s.last_logprob(got, 5);
    EXPECT_NEAR(lp.logprob, reference_logprob(row, got), 1e-6);
    ASSERT_EQ(lp.top.size(), 5u);
    EXPECT_EQ(lp.top[0].token, got);
    for (size_t i = 1; i < lp.top.size(); ++i) EXPECT_GE(lp.top[i - 1].logprob, lp.top[i].logprob);
    for (const auto& t : lp.top) EXPECT_NEAR(t.logprob, reference_logprob(row, t.token), 1e-6);
    if (step < 3) {
      EXPECT_NE(got, 0);
      EXPECT_NE(got, 9);
    }
    EXPECT_NE(got, 17);
    generated.push_back(got);
  }
}

TEST(SamplerPenalties, FrequencyPenaltyBreaksARepeat) {
  // Token 4 leads by 1.5: greedy repeats it forever unless penalised.
  std::vector<float> raw(8, 0.0f);
  raw[4] = 1.5f;
  raw[6] = 1.0f;
  Sampler plain(SamplingParams{});
  SamplingParams p;
  p.frequency_penalty = 1.0f;
  Sampler penalised(p, {}, {});
  std::vector<int32_t> a, b;
  for (int i = 0; i < 4; ++i) {
    a.push_back(plain.sample(raw.data(), raw.size()));
    b.push_back(penalised.sample(raw.data(), raw.size()));
  }
  EXPECT_EQ(a, (std::vector<int32_t>{4, 4, 4, 4}));
  EXPECT_EQ(b[0], 4);
  EXPECT_EQ(b[1], 6);  // 4 is now at 0.5, 6 at 1.0
  // A negative penalty makes the model repeat even what it would not.
  SamplingParams q;
  q.presence_penalty = -2.0f;
  Sampler eager(q, {}, {});
  raw[6] = 3.0f;
  const int32_t first = eager.sample(raw.data(), raw.size());
  EXPECT_EQ(first, 6);
  raw[4] = 3.5f;  // 4 would win now, but 6's presence bonus (+2) keeps it
  EXPECT_EQ(eager.sample(raw.data(), raw.size()), 6);
}

TEST(SamplerPenalties, RepetitionPenaltyCountsThePrompt) {
  std::vector<float> raw = {2.0f, 1.5f, -1.0f, -1.2f};
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  Sampler s(p, {0, 2}, {});
  // 0: 2.0 / 2 = 1.0 < 1.5 -> token 1 wins.
  EXPECT_EQ(s.sample(raw.data(), raw.size()), 1);
  const TokenLogprob lp = s.last_logprob(2, 0);
  const std::vector<double> row = {1.0, 1.5, -2.0, double(-1.2f)};
  EXPECT_NEAR(lp.logprob, reference_logprob(row, 2), 1e-9);
}

TEST(SamplerPenalties, LogitBiasForcesAndRemoves) {
  const auto raw = random_logits(1000, 7);
  SamplingParams force;
  force.temperature = 1.0f;
  force.seed = 5;
  force.logit_bias = {{123, 100.0f}};
  Sampler s(force, {}, {});
  for (int i = 0; i < 200; ++i) EXPECT_EQ(s.sample(raw.data(), raw.size()), 123);

  const int32_t best = adakv::runtime::argmax(raw.data(), raw.size());
  SamplingParams ban;
  ban.logit_bias = {{best, -100.0f}};
  Sampler g(ban, {}, {});
  EXPECT_NE(g.sample(raw.data(), raw.size()), best);
  ban.temperature = 1.0f;
  Sampler r(ban, {}, {});
  for (int i = 0; i < 500; ++i) EXPECT_NE(r.sample(raw.data(), raw.size()), best);
}

TEST(SamplerPenalties, MinPKeepsTheLikelyOnes) {
  // Probabilities at T=1 relative to the top: 1, e^-1 = 0.37, e^-3 = 0.05, e^-5.
  const std::vector<float> raw = {5.0f, 4.0f, 2.0f, 0.0f};
  SamplingParams p;
  p.temperature = 1.0f;
  p.min_p = 0.1f;
  p.seed = 11;
  Sampler s(p, {}, {});
  std::map<int32_t, int> seen;
  for (int i = 0; i < 4000; ++i) ++seen[s.sample(raw.data(), raw.size())];
  EXPECT_EQ(seen.count(2), 0u);
  EXPECT_EQ(seen.count(3), 0u);
  // The two kept in the softmax's ratio (1 : e^-1 -> 0.731).
  EXPECT_NEAR(seen[0] / 4000.0, 1 / (1 + std::exp(-1.0)), 0.03);
}

TEST(SamplerPenalties, MinTokensMasksStopsThenLetsThemThrough) {
  std::vector<float> raw(6, 0.0f);
  raw[2] = 10.0f;  // the stop token is the likeliest
  raw[3] = 5.0f;
  SamplingParams p;
  p.min_tokens = 2;
  Sampler s(p, {}, {2});
  EXPECT_EQ(s.sample(raw.data(), raw.size()), 3);
  EXPECT_EQ(s.sample(raw.data(), raw.size()), 3);
  EXPECT_EQ(s.sample(raw.data(), raw.size()), 2);
  // The masked token's logprob is -inf while it is masked.
  Sampler t(p, {}, {2});
  t.sample(raw.data(), raw.size());
  EXPECT_TRUE(std::isinf(t.last_logprob(2, 0).logprob));
}

TEST(SamplerPenalties, RejectsOutOfRangeNamingTheField) {
  auto message = [](const SamplingParams& p) {
    try {
      p.validate(100);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  SamplingParams p;
  p.presence_penalty = 2.5f;
  EXPECT_NE(message(p).find("presence_penalty"), std::string::npos);
  p = {};
  p.frequency_penalty = -3.0f;
  EXPECT_NE(message(p).find("frequency_penalty"), std::string::npos);
  p = {};
  p.repetition_penalty = 0.0f;
  EXPECT_NE(message(p).find("repetition_penalty"), std::string::npos);
  p = {};
  p.min_p = 1.5f;
  EXPECT_NE(message(p).find("min_p"), std::string::npos);
  p = {};
  p.logit_bias = {{100, 1.0f}};
  EXPECT_NE(message(p).find("logit_bias"), std::string::npos);
  p = {};
  p.logit_bias = {{3, 101.0f}};
  EXPECT_NE(message(p).find("logit_bias"), std::string::npos);
  p = {};
  p.stop_token_ids = {100};
  EXPECT_NE(message(p).find("stop_token_ids"), std::string::npos);
}

TEST(Logprobs, LogSoftmaxInDoubleWithTies) {
  const std::vector<float> raw = {1.0f, 3.0f, 3.0f, -INFINITY, 0.5f};
  const TokenLogprob lp = adakv::runtime::token_logprob(raw.data(), raw.size(), 4, 3);
  std::vector<double> row(raw.begin(), raw.end());
  EXPECT_NEAR(lp.logprob, reference_logprob(row, 4), 1e-12);
  ASSERT_EQ(lp.top.size(), 3u);
  EXPECT_EQ(lp.top[0].token, 1);  // ties: the lower id first
  EXPECT_EQ(lp.top[1].token, 2);
  EXPECT_EQ(lp.top[2].token, 0);
  double mass = 0;
  for (size_t i = 0; i < raw.size(); ++i) {
    mass += std::exp(adakv::runtime::token_logprob(raw.data(), raw.size(), int32_t(i), 0).logprob);
  }
  EXPECT_NEAR(mass, 1.0, 1e-12);
  // Large logits stay finite (the max is shifted out).
  const std::vector<float> big = {1000.0f, 1000.0f};
  EXPECT_NEAR(adakv::runtime::token_logprob(big.data(), 2, 0, 0).logprob, -std::log(2.0), 1e-9);
}

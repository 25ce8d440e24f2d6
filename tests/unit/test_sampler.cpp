#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <vector>

#include "runtime/sampler.h"

using adakv::runtime::Sampler;
using adakv::runtime::SamplingParams;

TEST(Sampler, GreedyPicksArgmaxLowestIndexOnTies) {
  const std::vector<float> logits = {0.1f, 3.0f, -1.0f, 3.0f};
  Sampler s({0.0f, 1.0f, 0, 0});
  EXPECT_EQ(s.sample(logits.data(), logits.size()), 1);
}

// argmax against the plain scan (the first strictly larger value wins, NaNs never do) on a
// vocabulary-sized row: ties across blocks, the maximum in the last partial block, NaNs, zeros.
TEST(Sampler, ArgmaxIsThePlainScan) {
  const auto scan = [](const std::vector<float>& v) {
    size_t best = 0;
    for (size_t i = 1; i < v.size(); ++i) {
      if (v[i] > v[best]) best = i;
    }
    return static_cast<int32_t>(best);
  };
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (size_t n : {1, 63, 64, 65, 1000, 49152}) {
    std::vector<float> v(n);
    for (auto& x : v) x = normal(rng);
    EXPECT_EQ(adakv::runtime::argmax(v.data(), n), scan(v)) << n;
    v[n - 1] = 100.0f;
    EXPECT_EQ(adakv::runtime::argmax(v.data(), n), scan(v)) << n;
    if (n > 70) {
      v[n / 2] = 100.0f;  // a tie: the lower index
      v[3] = nan;
      EXPECT_EQ(adakv::runtime::argmax(v.data(), n), scan(v)) << n;
      EXPECT_EQ(adakv::runtime::argmax(v.data(), n), static_cast<int32_t>(n / 2)) << n;
    }
    v[0] = nan;
    EXPECT_EQ(adakv::runtime::argmax(v.data(), n), 0) << n;
  }
  std::vector<float> zeros = {-0.0f, 0.0f, -1.0f, 0.0f};
  EXPECT_EQ(adakv::runtime::argmax(zeros.data(), zeros.size()), scan(zeros));
}

TEST(Sampler, TopKOneIsGreedy) {
  const std::vector<float> logits = {0.5f, 0.2f, 2.0f, 1.9f};
  Sampler s({1.5f, 1.0f, 1, 42});
  for (int i = 0; i < 50; ++i) EXPECT_EQ(s.sample(logits.data(), logits.size()), 2);
}

TEST(Sampler, TopPExcludesTheTail) {
  // probabilities at T=1: ~[0.66, 0.24, 0.09, 0.01]; top_p 0.8 keeps the first two.
  const std::vector<float> logits = {3.0f, 2.0f, 1.0f, -1.0f};
  Sampler s({1.0f, 0.8f, 0, 7});
  std::map<int, int> seen;
  for (int i = 0; i < 2000; ++i) ++seen[s.sample(logits.data(), logits.size())];
  EXPECT_EQ(seen.count(2) + seen.count(3), 0u);
  EXPECT_GT(seen[1], 300);
  EXPECT_GT(seen[0], seen[1]);
}

TEST(Sampler, FrequenciesFollowTheSoftmax) {
  const std::vector<float> logits = {0.0f, std::log(3.0f)};  // p = 0.25, 0.75
  Sampler s({1.0f, 1.0f, 0, 123});
  int ones = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) ones += s.sample(logits.data(), logits.size());
  EXPECT_NEAR(ones / double(n), 0.75, 0.02);
}

TEST(Sampler, SameSeedSameDraws) {
  std::vector<float> logits(100);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = std::sin(float(i));
  Sampler a({0.9f, 0.95f, 40, 99}), b({0.9f, 0.95f, 40, 99});
  for (int i = 0; i < 100; ++i)
    EXPECT_EQ(a.sample(logits.data(), 100), b.sample(logits.data(), 100));
}

TEST(Sampler, RejectsBadParameters) {
  EXPECT_THROW(Sampler({-1.0f, 1.0f, 0, 0}), std::invalid_argument);
  EXPECT_THROW(Sampler({1.0f, 0.0f, 0, 0}), std::invalid_argument);
  EXPECT_THROW(Sampler({1.0f, 1.5f, 0, 0}), std::invalid_argument);
  EXPECT_THROW(Sampler({1.0f, 1.0f, -3, 0}), std::invalid_argument);
}

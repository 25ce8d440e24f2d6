// The scorer of one layer (runtime/compression/scorer.h) against a reference spelled out here:
// window attention mass (its kernel has its own test) -> pooling along the prefix, the first
// pool_sink positions unpooled and left out of their neighbours' windows, each window moved
// pool_shift tokens back -> GQA mean or max.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/ops.h"
#include "runtime/compression/scorer.h"
#include "tests/unit/random_data.h"

namespace c = adakv::compression;
namespace k = adakv::kernels;

namespace {

// Pooling of a prefix of `mass` as torch's max_pool1d / avg_pool1d (stride 1, padding
// kernel/2, the average dividing by the kernel), with positions < sink excluded and the window
// of position i being [i - kernel/2 - shift, i + kernel/2 - shift].
std::vector<float> reference_pool(const float* mass, size_t prefix, size_t kernel,
                                  c::Pooling pooling, size_t sink, size_t shift) {
  std::vector<float> out(prefix);
  const long half = long(kernel / 2);
  for (long i = 0; i < long(prefix); ++i) {
    if (size_t(i) < sink) {
      out[i] = mass[i];
      continue;
    }
    float best = 0, sum = 0;
    bool any = false;
    for (long j = i - half - long(shift); j <= i + half - long(shift); ++j) {
      const float v = (j < 0 || j >= long(prefix) || size_t(j) < sink) ? 0.0f : mass[j];
      if (j >= 0 && j < long(prefix)) {
        best = any ? std::max(best, v) : v;
        any = true;
      }
      sum += v;
    }
    out[i] = pooling == c::Pooling::kMax ? best : sum / float(kernel);
  }
  return out;
}

// Random queries and keys for a prompt of n_prompt tokens followed by `steps` decoded ones, and
// the kernel's attention mass (sum and peak per query head) of the window's W queries over the
// prompt and of the look-ahead's `steps` queries over every key: what score_observations reads.
struct LookAheadObservations {
  size_t n_prompt, W, steps, Hq, Hkv, Dh;
  size_t n_keys = n_prompt + steps, n_obs = W + steps, prefix = n_prompt - W;
  std::vector<float> q, kk;
  std::vector<float> window_sum, window_peak;  // [Hq][n_prompt]
  std::vector<float> ahead_sum, ahead_peak;    // [Hq][n_keys]

  LookAheadObservations(size_t n_prompt_, size_t W_, size_t steps_, size_t Hq_, size_t Hkv_,
                        size_t Dh_, uint32_t seed)
      : n_prompt(n_prompt_),
        W(W_),
        steps(steps_),
        Hq(Hq_),
        Hkv(Hkv_),
        Dh(Dh_),
        q(adakv::test::random_vector(n_keys * Hq * Dh, seed, 1.0f)),
        kk(adakv::test::random_vector(n_keys * Hkv * Dh, seed + 1, 1.0f)),
        window_sum(Hq * n_prompt),
        window_peak(Hq * n_prompt),
        ahead_sum(Hq * n_keys),
        ahead_peak(Hq * n_keys) {
    const float scale = 1.0f / std::sqrt(float(Dh));
    k::check(k::window_attention_mass(window_sum.data(), q_obs(), Hq * Dh, kk.data(), Hkv * Dh,
                                      n_prompt, W, Hq, Hkv, Dh, scale, window_peak.data()),
             "window_attention_mass");
    k::check(
        k::window_attention_mass(ahead_sum.data(), q_obs() + W * Hq * Dh, Hq * Dh, kk.data(),
                                 Hkv * Dh, n_keys, steps, Hq, Hkv, Dh, scale, ahead_peak.data()),
        "window_attention_mass");
  }
  const float* q_obs() const { return q.data() + prefix * Hq * Dh; }
  std::vector<float> score(const c::CompressionConfig& config,
                           std::vector<float>* peak = nullptr) const {
    return c::score_observations(q_obs(), Hq * Dh, kk.data(), Hkv * Dh, n_keys, n_obs, Hq, Hkv, Dh,
                                 config, peak, adakv::kernels::cpu_backend());
  }
};

}  // namespace

TEST(Pool1d, MatchesTorchSemanticsOnAHandExample) {
  const float in[] = {1, 5, 2, 0, 3};
  float out[5];
  c::pool1d(in, out, 5, 3, c::Pooling::kMax);
  EXPECT_EQ(std::vector<float>(out, out + 5), (std::vector<float>{5, 5, 5, 3, 3}));
  c::pool1d(in, out, 5, 3, c::Pooling::kAvg);
  const float want[] = {6.0f / 3, 8.0f / 3, 7.0f / 3, 5.0f / 3, 3.0f / 3};
  for (int i = 0; i < 5; ++i) EXPECT_FLOAT_EQ(out[i], want[i]) << i;
}

// Shifted by one, position i pools [i - 2, i]: a peak lifts the two positions after it.
TEST(Pool1d, AShiftedWindowLooksBack) {
  const float in[] = {0, 9, 0, 0, 0};
  float out[5];
  c::pool1d(in, out, 5, 3, c::Pooling::kMax, 1);
  EXPECT_EQ(std::vector<float>(out, out + 5), (std::vector<float>{0, 9, 9, 9, 0}));
  c::pool1d(in, out, 5, 3, c::Pooling::kAvg, 1);
  EXPECT_EQ(std::vector<float>(out, out + 5), (std::vector<float>{0, 3, 3, 3, 0}));
}

TEST(ScoreLayer, MatchesTheReferenceForEveryPoolingGqaSinkAndShift) {
  const size_t n = 61, W = 8, Hq = 6, Hkv = 2, Dh = 16, prefix = n - W, group = Hq / Hkv;
  const auto q = adakv::test::random_vector(n * Hq * Dh, 11, 1.0f);
  const auto kk = adakv::test::random_vector(n * Hkv * Dh, 12, 1.0f);
  std::vector<float> mass(Hq * n);
  k::check(k::window_attention_mass(mass.data(), q.data() + prefix * Hq * Dh, Hq * Dh, kk.data(),
                                    Hkv * Dh, n, W, Hq, Hkv, Dh, 1.0f / std::sqrt(float(Dh))),
           "window_attention_mass");
  for (c::Pooling pooling : {c::Pooling::kMax, c::Pooling::kAvg}) {
    for (c::GqaAggregation gqa : {c::GqaAggregation::kMean, c::GqaAggregation::kMax}) {
      for (size_t sink : {size_t{0}, size_t{1}, size_t{4}, prefix + 5})
        for (size_t shift : {size_t{0}, size_t{2}, size_t{3}}) {
          SCOPED_TRACE(testing::Message() << c::to_string(pooling) << " gqa " << c::to_string(gqa)
                                          << " sink " << sink << " shift " << shift);
          c::CompressionConfig config;
          config.window = W;
          config.pooling = pooling;
          config.pool_kernel = 7;
          config.pool_sink = sink;
          config.pool_shift = shift;
          config.gqa = gqa;
          const auto got = c::score_layer(q.data(), Hq * Dh, kk.data(), Hkv * Dh, n, Hq, Hkv, Dh,
                                          config, nullptr, adakv::kernels::cpu_backend());
          ASSERT_EQ(got.size(), Hkv * prefix);
          for (size_t g = 0; g < Hkv; ++g) {
            std::vector<float> want(prefix, gqa == c::GqaAggregation::kMax ? -1.0f : 0.0f);
            for (size_t r = 0; r < group; ++r) {
              const auto pooled = reference_pool(mass.data() + (g * group + r) * n, prefix, 7,
                                                 pooling, sink, shift);
              for (size_t j = 0; j < prefix; ++j) {
                want[j] = gqa == c::GqaAggregation::kMax ? std::max(want[j], pooled[j])
                                                         : want[j] + pooled[j] / float(group);
              }
            }
            for (size_t j = 0; j < prefix; ++j) {
              ASSERT_NEAR(got[g * prefix + j], want[j], 1e-5f * (1.0f + std::fabs(want[j])))
                  << "kv head " << g << " position " << j;
            }
          }
        }
    }
  }
}

// The reason for pool_sink: a dominant first token must not lift its neighbours.
TEST(ScoreLayer, ASinkDoesNotLiftItsNeighbours) {
  // Keys: position 0 matches every query strongly, the rest are orthogonal to the queries.
  const size_t n = 40, W = 4, Dh = 4;
  std::vector<float> q(n * Dh, 0.0f), kk(n * Dh, 0.0f);
  for (size_t i = 0; i < n; ++i) q[i * Dh] = 4.0f;
  kk[0] = 4.0f;
  for (size_t i = 1; i < n; ++i) kk[i * Dh + 1] = 1.0f;
  c::CompressionConfig config;
  config.window = W;
  config.pooling = c::Pooling::kAvg;
  config.pool_kernel = 9;
  const auto pooled = c::score_layer(q.data(), Dh, kk.data(), Dh, n, 1, 1, Dh, config, nullptr,
                                     adakv::kernels::cpu_backend());
  config.pool_sink = 1;
  const auto sunk = c::score_layer(q.data(), Dh, kk.data(), Dh, n, 1, 1, Dh, config, nullptr,
                                   adakv::kernels::cpu_backend());
  // Pooled with the rest, the sink's 1/9 share makes positions 1..4 outrank position 10.
  EXPECT_GT(pooled[3], 2 * pooled[10]);
  // Left out, position 0 keeps its whole mass and its neighbours score like everyone else.
  EXPECT_GT(sunk[0], 9 * pooled[0] * 0.99f);
  EXPECT_NEAR(sunk[5], sunk[10], 1e-6f);  // both windows hold 9 non-sink positions
  EXPECT_GT(sunk[0], 100 * sunk[3]);
}

// With look-ahead the observed queries are the window's (which see the prompt's keys) followed
// by the look-ahead's (which see the prompt and the tokens decoded after it); lookahead_weight
// scales the second group's mass and leaves the first alone.
TEST(ScoreObservations, LookAheadWeightScalesOnlyTheLookAheadQueries) {
  const LookAheadObservations obs(41, 8, 5, 4, 2, 8, 21);
  const size_t Hq = obs.Hq, Hkv = obs.Hkv, Dh = obs.Dh, W = obs.W, prefix = obs.prefix;
  const size_t n_prompt = obs.n_prompt, n_keys = obs.n_keys, group = Hq / Hkv;
  c::CompressionConfig config;
  config.window = W;
  config.pooling = c::Pooling::kAvg;
  config.pool_kernel = 1;  // no smoothing: the scores are the GQA means of the mass
  for (double weight : {1.0, 3.0, 0.25}) {
    SCOPED_TRACE(testing::Message() << "weight " << weight);
    config.lookahead_weight = weight;
    const auto got = obs.score(config);
    ASSERT_EQ(got.size(), Hkv * prefix);
    for (size_t g = 0; g < Hkv; ++g) {
      for (size_t j = 0; j < prefix; ++j) {
        float want = 0;
        for (size_t r = 0; r < group; ++r) {
          const size_t h = g * group + r;
          want +=
              (obs.window_sum[h * n_prompt + j] + float(weight) * obs.ahead_sum[h * n_keys + j]) /
              float(group);
        }
        ASSERT_NEAR(got[g * prefix + j], want, 1e-5f * (1.0f + want)) << g << " " << j;
      }
    }
  }
  // Without look-ahead queries the weight changes nothing.
  config.lookahead_weight = 1.0;
  const auto plain = c::score_layer(obs.q.data(), Hq * Dh, obs.kk.data(), Hkv * Dh, n_prompt, Hq,
                                    Hkv, Dh, config, nullptr, adakv::kernels::cpu_backend());
  config.lookahead_weight = 3.0;
  EXPECT_EQ(plain, c::score_layer(obs.q.data(), Hq * Dh, obs.kk.data(), Hkv * Dh, n_prompt, Hq, Hkv,
                                  Dh, config, nullptr, adakv::kernels::cpu_backend()));
}

// budget_scores = peak: the same pooling and GQA aggregation, applied to each position's
// largest attention from one observed query (look-ahead ones scaled by the weight) instead of
// the sum; the summed scores do not change.
TEST(ScoreObservations, PeakScoresPoolTheLargestSingleQueryAttention) {
  const LookAheadObservations obs(57, 8, 5, 6, 2, 8, 31);
  const size_t Hq = obs.Hq, Hkv = obs.Hkv, W = obs.W, prefix = obs.prefix;
  const size_t n_prompt = obs.n_prompt, n_keys = obs.n_keys, group = Hq / Hkv;
  c::CompressionConfig config;
  config.window = W;
  config.pooling = c::Pooling::kAvg;
  config.pool_kernel = 5;
  config.pool_sink = 2;
  config.pool_shift = 1;
  config.gqa = c::GqaAggregation::kMax;
  for (double weight : {1.0, 3.0}) {
    SCOPED_TRACE(testing::Message() << "weight " << weight);
    config.lookahead_weight = weight;
    std::vector<float> peak;
    EXPECT_EQ(obs.score(config, &peak), obs.score(config));
    ASSERT_EQ(peak.size(), Hkv * prefix);
    for (size_t g = 0; g < Hkv; ++g) {
      std::vector<float> want(prefix, 0.0f);
      for (size_t r = 0; r < group; ++r) {
        const size_t h = g * group + r;
        std::vector<float> raw(prefix);
        for (size_t j = 0; j < prefix; ++j) {
          raw[j] = std::max(obs.window_peak[h * n_prompt + j],
                            float(weight) * obs.ahead_peak[h * n_keys + j]);
        }
        const auto pooled = reference_pool(raw.data(), prefix, config.pool_kernel, config.pooling,
                                           config.pool_sink, config.pool_shift);
        for (size_t j = 0; j < prefix; ++j) want[j] = std::max(want[j], pooled[j]);
      }
      for (size_t j = 0; j < prefix; ++j) {
        ASSERT_NEAR(peak[g * prefix + j], want[j], 1e-5f * (1.0f + want[j])) << g << " " << j;
      }
    }
  }
}

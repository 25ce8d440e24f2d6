// Ada-KV's scoring steps after the window mass (kernels/ops.h: blend_scores, pool_scores, pool1d)
// bit for bit against the scorer's arithmetic they replace (runtime/compression/scorer.cpp's
// weighted look-ahead loop, pool1d and pool_and_aggregate, copied below with their enums as
// bools), on awkward shapes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <vector>

#include "kernels/backend.h"
#include "tests/backend/backend_fixture.h"
#include "tests/unit/random_data.h"

namespace {

namespace k = adakv::kernels;
using adakv::test::random_vector;
using adakv::test::same_bits;

// ---- The scorer's arithmetic, as it was ------------------------------------------------------

void scorer_pool1d(const float* in, float* out, size_t n, size_t kernel, bool max_pool,
                   size_t shift) {
  const ptrdiff_t half = static_cast<ptrdiff_t>(kernel / 2);
  const ptrdiff_t back = half + static_cast<ptrdiff_t>(shift);
  const ptrdiff_t ahead = half - static_cast<ptrdiff_t>(shift);
  for (ptrdiff_t i = 0; i < static_cast<ptrdiff_t>(n); ++i) {
    const ptrdiff_t lo = std::max<ptrdiff_t>(0, i - back);
    const ptrdiff_t hi = std::min<ptrdiff_t>(static_cast<ptrdiff_t>(n) - 1, i + ahead);
    if (max_pool) {
      float m = in[lo];
      for (ptrdiff_t j = lo + 1; j <= hi; ++j) m = std::max(m, in[j]);
      out[i] = m;
    } else {
      float s = 0;
      for (ptrdiff_t j = lo; j <= hi; ++j) s += in[j];
      out[i] = s / static_cast<float>(kernel);
    }
  }
}

std::vector<float> scorer_pool_and_aggregate(std::vector<float> mass, size_t n_keys, size_t prefix,
                                             size_t Hq, size_t Hkv, const k::ScorePooling& c) {
  const size_t group = Hq / Hkv;
  std::vector<float> pooled(Hq * prefix), scores(Hkv * prefix);
  const size_t sink = std::min(c.sink, prefix);
  for (size_t h = 0; h < Hq; ++h) {
    float* row = mass.data() + h * n_keys;
    float* out = pooled.data() + h * prefix;
    const std::vector<float> sink_mass(row, row + sink);
    std::fill(row, row + sink, 0.0f);
    scorer_pool1d(row, out, prefix, c.kernel, c.max_pool, c.shift);
    std::copy(sink_mass.begin(), sink_mass.end(), out);
  }
  for (size_t g = 0; g < Hkv; ++g) {
    float* out = scores.data() + g * prefix;
    for (size_t j = 0; j < prefix; ++j) {
      float agg = c.gqa_max ? pooled[g * group * prefix + j] : 0.0f;
      for (size_t r = 0; r < group; ++r) {
        const float v = pooled[(g * group + r) * prefix + j];
        agg = c.gqa_max ? std::max(agg, v) : agg + v;
      }
      out[j] = c.gqa_max ? agg : agg / static_cast<float>(group);
    }
  }
  return scores;
}

void scorer_blend(std::vector<float>& mass, std::vector<float>* peak,
                  const std::vector<float>& window_mass, const std::vector<float>* window_peak,
                  size_t Hq, size_t n_keys, size_t n_prompt, size_t prefix, float w) {
  for (size_t h = 0; h < Hq; ++h) {
    for (size_t j = 0; j < prefix; ++j) {
      const size_t i = h * n_keys + j, iw = h * n_prompt + j;
      mass[i] = window_mass[iw] + w * mass[i];
      if (peak) (*peak)[i] = std::max((*window_peak)[iw], w * (*peak)[i]);
    }
  }
}

// Attention-like mass: positive, a heavy first token, some exact ties.
std::vector<float> mass_like(size_t n, uint32_t seed) {
  auto v = random_vector(n, seed);
  for (size_t i = 0; i < n; ++i) v[i] = i % 11 == 3 ? 0.25f : v[i] * v[i];
  if (n > 0) v[0] = 20.0f;
  return v;
}

TEST(ScorePooling, Pool1dMatchesTheScorers) {
  uint32_t seed = 1;
  for (size_t n : {1, 2, 7, 769}) {
    const auto in = mass_like(n, seed++);
    for (size_t kernel : {1, 3, 7, 8}) {
      for (size_t shift = 0; shift <= kernel / 2; ++shift) {
        for (bool max_pool : {true, false}) {
          std::vector<float> got(n, -1.0f), want(n, -2.0f);
          k::pool1d(in.data(), got.data(), n, kernel, max_pool, shift);
          scorer_pool1d(in.data(), want.data(), n, kernel, max_pool, shift);
          ASSERT_TRUE(same_bits(got, want)) << "n " << n << " kernel " << kernel << " shift "
                                            << shift << (max_pool ? " max" : " avg");
        }
      }
    }
  }
}

TEST(ScorePooling, PoolScoresMatchesPoolAndAggregate) {
  uint32_t seed = 100;
  for (auto [Hq, Hkv] : {std::pair<size_t, size_t>{1, 1}, {3, 1}, {3, 3}, {6, 3}}) {
    for (size_t prefix : {1, 7, 769}) {
      for (size_t extra : {0, 5}) {  // keys past the prefix (the window's)
        const size_t n_keys = prefix + extra;
        const auto mass = mass_like(Hq * n_keys, seed++);
        for (size_t sink : {0, 1, 4, 1000}) {
          for (size_t kernel : {1, 7}) {
            for (size_t shift : {0, 2}) {
              if (shift > kernel / 2) continue;
              for (bool max_pool : {true, false}) {
                for (bool gqa_max : {false, true}) {
                  const k::ScorePooling c{sink, kernel, max_pool, shift, gqa_max};
                  std::vector<float> got(Hkv * prefix, -1.0f);
                  k::check(k::pool_scores(got.data(), mass.data(), n_keys, prefix, Hq, Hkv, c),
                           "pool_scores");
                  ASSERT_TRUE(
                      same_bits(got, scorer_pool_and_aggregate(mass, n_keys, prefix, Hq, Hkv, c)))
                      << "Hq " << Hq << " Hkv " << Hkv << " prefix " << prefix << " n_keys "
                      << n_keys << " sink " << sink << " kernel " << kernel << " shift " << shift
                      << (max_pool ? " max" : " avg") << (gqa_max ? " gqa max" : " gqa mean");
                }
              }
            }
          }
        }
      }
    }
  }
}

TEST(ScorePooling, PoolScoresLeavesMassAloneOrOverwritesItInPlace) {
  const size_t Hq = 6, Hkv = 3, n_keys = 40, prefix = 33;
  const k::ScorePooling c{2, 7, true, 1, false};
  const auto mass = mass_like(Hq * n_keys, 7);
  const auto want = scorer_pool_and_aggregate(mass, n_keys, prefix, Hq, Hkv, c);
  auto kept = mass;
  std::vector<float> scores(Hkv * prefix);
  k::check(k::pool_scores(scores.data(), kept.data(), n_keys, prefix, Hq, Hkv, c), "pool_scores");
  EXPECT_TRUE(same_bits(kept, mass)) << "the input was changed";
  auto in_place = mass;
  k::check(k::pool_scores(in_place.data(), in_place.data(), n_keys, prefix, Hq, Hkv, c),
           "pool_scores");
  in_place.resize(Hkv * prefix);
  EXPECT_TRUE(same_bits(in_place, want));
}

TEST(ScorePooling, BlendScoresMatchesTheLookAheadLoop) {
  uint32_t seed = 200;
  for (size_t Hq : {1, 3}) {
    for (size_t prefix : {1, 7, 769}) {
      // The scorer's shapes: n_obs observed queries of which `window` are the window's.
      const size_t window = 4, n_obs = window + 3, n_keys = prefix + n_obs;
      const size_t n_prompt = n_keys - (n_obs - window);
      for (bool with_peak : {false, true}) {
        for (float w : {0.5f, 3.0f, 0.1f}) {
          const auto mass = mass_like(Hq * n_keys, seed++);
          const auto peak = mass_like(Hq * n_keys, seed++);
          const auto window_mass = mass_like(Hq * n_prompt, seed++);
          const auto window_peak = mass_like(Hq * n_prompt, seed++);
          auto want_mass = mass, want_peak = peak;
          scorer_blend(want_mass, with_peak ? &want_peak : nullptr, window_mass,
                       with_peak ? &window_peak : nullptr, Hq, n_keys, n_prompt, prefix, w);
          auto got_mass = mass, got_peak = peak;
          k::check(k::blend_scores(got_mass.data(), with_peak ? got_peak.data() : nullptr,
                                   window_mass.data(), with_peak ? window_peak.data() : nullptr, Hq,
                                   n_keys, n_prompt, prefix, w),
                   "blend_scores");
          ASSERT_TRUE(same_bits(got_mass, want_mass)) << "Hq " << Hq << " prefix " << prefix;
          ASSERT_TRUE(same_bits(got_peak, want_peak)) << "Hq " << Hq << " prefix " << prefix;
        }
      }
    }
  }
}

TEST(ScorePooling, RejectsBadShapes) {
  std::vector<float> a(64, 1.0f), b(64, 1.0f);
  const k::ScorePooling c{0, 7, true, 0, false};
  EXPECT_EQ(k::pool_scores(a.data(), b.data(), 8, 8, 3, 2, c), k::Status::kInvalidArgument);
  EXPECT_EQ(k::pool_scores(a.data(), b.data(), 8, 9, 1, 1, c), k::Status::kInvalidArgument);
  EXPECT_EQ(k::pool_scores(a.data(), b.data(), 8, 8, 1, 1, k::ScorePooling{0, 0, true, 0, false}),
            k::Status::kInvalidArgument);
  EXPECT_EQ(k::pool_scores(a.data(), b.data(), 8, 8, 1, 1, k::ScorePooling{0, 3, true, 2, false}),
            k::Status::kInvalidArgument);
  EXPECT_EQ(k::blend_scores(a.data(), b.data(), a.data(), nullptr, 1, 8, 8, 4, 0.5f),
            k::Status::kInvalidArgument);
  EXPECT_EQ(k::blend_scores(a.data(), nullptr, a.data(), nullptr, 1, 8, 3, 4, 0.5f),
            k::Status::kInvalidArgument);
  EXPECT_EQ(k::blend_scores(a.data(), nullptr, b.data(), nullptr, 1, 8, 8, 4, 0.5f),
            k::Status::kOk);
}

}  // namespace

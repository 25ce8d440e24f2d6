#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <stdexcept>
#include <vector>

#include "runtime/compression/allocator.h"

using adakv::compression::allocate_topk;
using adakv::compression::allocate_waterfill;
using adakv::compression::GainMatrix;

namespace {

// Random non-negative scores on a coarse grid (k / 8), so equal values (ties) are common.
std::vector<float> random_scores(std::mt19937& rng, size_t n, int levels = 8) {
  std::uniform_int_distribution<int> d(0, levels);
  std::vector<float> s(n);
  for (float& x : s) x = static_cast<float>(d(rng)) / 8.0f;
  return s;
}

GainMatrix random_matrix(std::mt19937& rng, size_t rows, size_t prefix, size_t delta,
                         int levels = 8) {
  GainMatrix g(rows, prefix, delta);
  for (size_t r = 0; r < rows; ++r) g.fill_row(r, random_scores(rng, prefix, levels).data());
  return g;
}

size_t sum(const std::vector<size_t>& v) {
  return std::accumulate(v.begin(), v.end(), size_t{0});
}

// Summed gain of a budget vector whose entries end on tile boundaries (or at prefix).
double gain_of(const GainMatrix& g, const std::vector<size_t>& b) {
  double total = 0.0;
  for (size_t r = 0; r < g.rows; ++r) {
    const size_t whole = (b[r] + g.delta - 1) / g.delta;
    for (size_t t = 0; t < whole; ++t) total += g.row(r)[t];
  }
  return total;
}

// Per-row counts of the top `total` entries under (value desc, row asc, column asc), by a full
// stable sort: an independent reference for the selection rule.
std::vector<size_t> reference_topk_counts(const GainMatrix& g, size_t total) {
  std::vector<size_t> idx(g.rows * g.prefix);
  std::iota(idx.begin(), idx.end(), size_t{0});
  std::stable_sort(idx.begin(), idx.end(),
                   [&g](size_t a, size_t b) { return g.data[a] > g.data[b]; });
  std::vector<size_t> count(g.rows, 0);
  for (size_t i = 0; i < total; ++i) ++count[idx[i] / g.prefix];
  return count;
}

}  // namespace

TEST(AllocGainMatrix, FillRowSortsDescendingAndSumsTilesWithPartialLastTile) {
  GainMatrix g(2, 7, 3);
  EXPECT_EQ(g.tiles, 3u);
  ASSERT_EQ(g.data.size(), 6u);
  const std::vector<float> s = {1, 5, 2, 7, 3, 6, 4};  // sorted: 7 6 5 | 4 3 2 | 1
  g.fill_row(1, s.data());
  EXPECT_EQ(g.row(0)[0], 0.0f);
  EXPECT_EQ(g.row(1)[0], 18.0f);
  EXPECT_EQ(g.row(1)[1], 9.0f);
  EXPECT_EQ(g.row(1)[2], 1.0f);
}

TEST(AllocGainMatrix, NanSortsLastAndBadArgumentsThrow) {
  GainMatrix g(1, 3, 1);
  const std::vector<float> s = {std::numeric_limits<float>::quiet_NaN(), 1.0f, 2.0f};
  g.fill_row(0, s.data());
  EXPECT_EQ(g.row(0)[0], 2.0f);
  EXPECT_EQ(g.row(0)[1], 1.0f);
  EXPECT_TRUE(std::isnan(g.row(0)[2]));
  EXPECT_THROW(GainMatrix(1, 3, 0), std::invalid_argument);
  EXPECT_THROW(g.fill_row(1, s.data()), std::invalid_argument);
}

// Water-filling is the exact optimum when every award is a whole tile: compare with a
// brute-force search over every budget vector of whole tiles, for every reachable total.
TEST(AllocWaterfill, EqualsBruteForceOptimumOnRandomConcaveCurves) {
  int checked = 0;
  for (unsigned seed = 0; seed < 400; ++seed) {
    std::mt19937 rng(seed);
    const size_t delta = 1 + seed % 2;
    const size_t rows = 2 + seed % 3;
    const size_t prefix = delta * (1 + rng() % (8 / delta));
    const size_t b_min = delta * (rng() % 3);
    const GainMatrix g = random_matrix(rng, rows, prefix, delta, seed % 3 == 0 ? 2 : 8);
    const size_t start = std::min(b_min, prefix);

    // best[t] = the largest gain of any whole-tile vector in [start, prefix]^rows summing to t.
    std::vector<double> best(rows * prefix + 1, -1.0);
    std::vector<size_t> b(rows, start);
    while (true) {
      const size_t t = sum(b);
      best[t] = std::max(best[t], gain_of(g, b));
      size_t r = 0;
      while (r < rows && b[r] + delta > prefix) b[r++] = start;
      if (r == rows) break;
      b[r] += delta;
    }
    for (size_t total = rows * start; total <= rows * prefix; total += delta) {
      const std::vector<size_t> got = allocate_waterfill(g, total, b_min);
      ASSERT_EQ(sum(got), total);
      for (size_t r = 0; r < rows; ++r) {
        ASSERT_GE(got[r], start);
        ASSERT_EQ((got[r] - start) % delta, 0u) << "award split a tile";
      }
      ASSERT_GE(best[total], 0.0);
      EXPECT_NEAR(gain_of(g, got), best[total], 1e-9)
          << "seed " << seed << " rows " << rows << " prefix " << prefix << " delta " << delta
          << " b_min " << b_min << " total " << total;
      ++checked;
    }
  }
  EXPECT_GT(checked, 3000);
}

TEST(AllocWaterfill, SumsExactlyAndRespectsTheFloor) {
  for (unsigned seed = 0; seed < 200; ++seed) {
    std::mt19937 rng(1000 + seed);
    const size_t rows = 1 + rng() % 6, prefix = rng() % 40, delta = 1 + rng() % 7;
    const size_t b_min = rng() % 45;  // also not a multiple of delta, also above prefix
    const GainMatrix g = random_matrix(rng, rows, prefix, delta);
    const size_t start = std::min(b_min, prefix);
    for (size_t total = 0; total <= rows * prefix + 5; total += 1 + rng() % 3) {
      const std::vector<size_t> got = allocate_waterfill(g, total, b_min);
      ASSERT_EQ(got.size(), rows);
      ASSERT_EQ(sum(got), std::min(total, rows * prefix)) << "seed " << seed;
      for (size_t r = 0; r < rows; ++r) {
        ASSERT_LE(got[r], prefix);
        if (total >= rows * start) {
          ASSERT_GE(got[r], start) << "seed " << seed;
        }
      }
    }
  }
}

TEST(AllocWaterfill, TotalBelowTheFloorIsSplitEvenlyLowerRowsFirst) {
  GainMatrix g(3, 20, 4);
  const std::vector<float> big(20, 9.0f), small(20, 0.0f);
  g.fill_row(0, small.data());
  g.fill_row(2, big.data());
  EXPECT_EQ(allocate_waterfill(g, 8, 10), (std::vector<size_t>{3, 3, 2}));
  EXPECT_EQ(allocate_waterfill(g, 0, 10), (std::vector<size_t>{0, 0, 0}));
  // Exactly the floor: every row sits at b_min.
  EXPECT_EQ(allocate_waterfill(g, 30, 10), (std::vector<size_t>{10, 10, 10}));
}

TEST(AllocWaterfill, MisalignedStartCompletesItsTileFirst) {
  // delta 4, b_min 3: row 0 (large scores) first gets 1 token to reach 4, then a whole tile.
  GainMatrix g(2, 10, 4);
  std::vector<float> hi(12), lo(10, 0.01f);
  for (size_t i = 0; i < hi.size(); ++i) hi[i] = 12.0f - static_cast<float>(i);
  g.fill_row(0, hi.data());
  g.fill_row(1, lo.data());
  EXPECT_EQ(allocate_waterfill(g, 11, 3), (std::vector<size_t>{8, 3}));
  // Equal rows: each completes its first tile (1 token) before either starts a second one.
  GainMatrix e(2, 12, 4);
  e.fill_row(0, hi.data());
  e.fill_row(1, hi.data());
  EXPECT_EQ(allocate_waterfill(e, 8, 3), (std::vector<size_t>{4, 4}));
  EXPECT_EQ(allocate_waterfill(e, 12, 3), (std::vector<size_t>{8, 4}));
}

TEST(AllocWaterfill, PartialLastTileAndTotalsAboveCapacity) {
  GainMatrix g(2, 5, 2);  // tiles of 2, 2, 1
  const std::vector<float> s = {5, 4, 3, 2, 1};
  g.fill_row(0, s.data());
  g.fill_row(1, s.data());
  EXPECT_EQ(allocate_waterfill(g, 10, 0), (std::vector<size_t>{5, 5}));
  EXPECT_EQ(allocate_waterfill(g, 1000, 0), (std::vector<size_t>{5, 5}));
  EXPECT_EQ(allocate_waterfill(g, 9, 0), (std::vector<size_t>{5, 4}));
  EXPECT_TRUE(allocate_waterfill(GainMatrix(0, 5, 2), 10, 0).empty());
}

TEST(AllocWaterfill, TiesGoToTheLowerRow) {
  GainMatrix g(2, 4, 1);
  const std::vector<float> s = {4, 3, 2, 1};
  g.fill_row(0, s.data());
  g.fill_row(1, s.data());
  EXPECT_EQ(allocate_waterfill(g, 3, 0), (std::vector<size_t>{2, 1}));
  GainMatrix t(3, 4, 2);
  for (size_t r = 0; r < 3; ++r) t.fill_row(r, s.data());
  // Awards: row 0 tile 0, row 1 tile 0, row 2 tile 0, row 0 tile 1.
  EXPECT_EQ(allocate_waterfill(t, 8, 0), (std::vector<size_t>{4, 2, 2}));
  // Equal tile gains in different columns: row 1's first tile (7) ties row 0's second (7).
  GainMatrix u(2, 4, 2);
  const std::vector<float> a = {5, 5, 4, 3}, b = {4, 3, 1, 0};
  u.fill_row(0, a.data());
  u.fill_row(1, b.data());
  EXPECT_EQ(allocate_waterfill(u, 4, 0), (std::vector<size_t>{4, 0}));
}

TEST(AllocWaterfill, DeltaOneFloorZeroEqualsTopKCounts) {
  for (unsigned seed = 0; seed < 100; ++seed) {
    std::mt19937 rng(2000 + seed);
    const size_t rows = 1 + rng() % 6, prefix = 1 + rng() % 30;
    const GainMatrix g = random_matrix(rng, rows, prefix, 1, seed % 2 ? 2 : 8);
    for (size_t total = 0; total <= rows * prefix; ++total) {
      const std::vector<size_t> wf = allocate_waterfill(g, total, 0);
      ASSERT_EQ(wf, allocate_topk(g, total, total / rows, 0.0)) << "seed " << seed;
      ASSERT_EQ(wf, reference_topk_counts(g, total)) << "seed " << seed;
    }
  }
}

TEST(AllocTopK, OfficialRuleWithFloorAndHalfToEvenRounding) {
  GainMatrix g(2, 4, 1);
  const std::vector<float> a = {0.5f, 0.3f, 0.1f, 0.1f}, b = {0.4f, 0.05f, 0.03f, 0.02f};
  g.fill_row(0, a.data());
  g.fill_row(1, b.data());
  // base 2: top 4 entries are 0.5 0.4 0.3 0.1 -> counts {3, 1}.
  EXPECT_EQ(allocate_topk(g, 4, 2, 0.0), (std::vector<size_t>{3, 1}));
  // alpha 0.5: floor 1; round(3 * 0.5 + 1) = round(2.5) = 2, round(1 * 0.5 + 1) = round(1.5) = 2.
  EXPECT_EQ(allocate_topk(g, 4, 2, 0.5), (std::vector<size_t>{2, 2}));
  // alpha 1: everyone gets floor(base) = base.
  EXPECT_EQ(allocate_topk(g, 4, 2, 1.0), (std::vector<size_t>{2, 2}));
}

TEST(AllocTopK, TiesGoToTheLowerRow) {
  GainMatrix g(3, 3, 1);
  const std::vector<float> s = {1, 1, 1};
  for (size_t r = 0; r < 3; ++r) g.fill_row(r, s.data());
  EXPECT_EQ(allocate_topk(g, 4, 1, 0.0), (std::vector<size_t>{3, 1, 0}));
}

TEST(AllocTopK, RespectsFloorsAndCapAndStaysNearTheTotal) {
  for (unsigned seed = 0; seed < 200; ++seed) {
    std::mt19937 rng(3000 + seed);
    const size_t rows = 1 + rng() % 8, prefix = 1 + rng() % 50;
    const GainMatrix g = random_matrix(rng, rows, prefix, 1);
    const size_t base = rng() % (prefix + 1), total = rows * base;
    const double alpha = std::vector<double>{0.0, 0.2, 0.5, 0.1, 1.0}[seed % 5];
    const std::vector<size_t> got = allocate_topk(g, total, base, alpha);
    const size_t floor_tokens = static_cast<size_t>(std::floor(base * alpha));
    for (size_t r = 0; r < rows; ++r) {
      EXPECT_GE(got[r], floor_tokens);
      EXPECT_LE(got[r], prefix);
    }
    // Rounding moves each row by at most half a token; the floor loses < 1 token per row.
    const double s = static_cast<double>(sum(got));
    EXPECT_LE(s, total + rows / 2.0);
    EXPECT_GE(s, total - 1.5 * rows);
    if (alpha == 0.0) {
      EXPECT_EQ(sum(got), total);
    }
  }
}

TEST(AllocTopK, RejectsBadArguments) {
  const GainMatrix g(2, 4, 1);
  EXPECT_THROW(allocate_topk(GainMatrix(2, 4, 2), 2, 1, 0.2), std::invalid_argument);
  EXPECT_THROW(allocate_topk(g, 9, 4, 0.2), std::invalid_argument);
  EXPECT_THROW(allocate_topk(g, 2, 1, 1.5), std::invalid_argument);
  EXPECT_THROW(allocate_topk(g, 2, 1, -0.1), std::invalid_argument);
  // All 8 entries, counts {4, 4}; floor(4 * 0.2) = 0 and round(4 * 0.8) = 3: the official
  // rule may spend less than the total.
  EXPECT_EQ(allocate_topk(g, 8, 4, 0.2), (std::vector<size_t>{3, 3}));
}

// Ranks fill the rows of the heads they own into zero matrices, in any order; the sum (the
// all-reduce) must be bit-identical to one matrix filled in order, and so must the budgets.
TEST(AllocDeterminism, RankLayoutAndFillOrderDoNotChangeBudgets) {
  for (unsigned seed = 0; seed < 40; ++seed) {
    std::mt19937 rng(4000 + seed);
    const size_t layers = 2, heads = 6, rows = layers * heads, prefix = 37;
    std::vector<std::vector<float>> scores(rows);
    for (auto& s : scores) s = random_scores(rng, prefix, seed % 2 ? 3 : 8);
    for (const size_t delta : {size_t{1}, size_t{4}}) {
      GainMatrix ref(rows, prefix, delta);
      for (size_t r = 0; r < rows; ++r) ref.fill_row(r, scores[r].data());

      for (const size_t tp : {1, 2, 3, 6, 4}) {
        std::vector<size_t> owner(rows);
        for (size_t r = 0; r < rows; ++r) owner[r] = (r % heads) * tp / heads;  // contiguous heads
        if (tp == 4) {
          for (auto& o : owner) o = rng() % tp;  // arbitrary layout
        }
        std::vector<GainMatrix> local(tp, GainMatrix(rows, prefix, delta));
        std::vector<size_t> order(rows);
        std::iota(order.begin(), order.end(), size_t{0});
        std::shuffle(order.begin(), order.end(), rng);
        for (size_t r : order) local[owner[r]].fill_row(r, scores[r].data());

        std::vector<size_t> ranks(tp);
        std::iota(ranks.begin(), ranks.end(), size_t{0});
        std::shuffle(ranks.begin(), ranks.end(), rng);  // reduction order
        GainMatrix reduced(rows, prefix, delta);
        for (size_t p : ranks) {
          for (size_t i = 0; i < reduced.data.size(); ++i) reduced.data[i] += local[p].data[i];
        }
        ASSERT_EQ(
            0, std::memcmp(reduced.data.data(), ref.data.data(), ref.data.size() * sizeof(float)));
        const size_t total = rows * 12;
        EXPECT_EQ(allocate_waterfill(reduced, total, 4), allocate_waterfill(ref, total, 4));
        if (delta == 1) {
          EXPECT_EQ(allocate_topk(reduced, total, 12, 0.2), allocate_topk(ref, total, 12, 0.2));
        }
      }
    }
  }
}

TEST(AllocDeterminism, RepeatedCallsAgree) {
  std::mt19937 rng(5);
  const GainMatrix g = random_matrix(rng, 9, 300, 1, 3);
  const auto first = allocate_topk(g, 9 * 100, 100, 0.2);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(allocate_topk(g, 9 * 100, 100, 0.2), first);
}

using adakv::compression::pyramid_layer_budgets;
using adakv::compression::select_top_positions;

TEST(AllocPyramid, PaperDefaultsDecreaseLinearlyWithMeanB) {
  // B = 160, W = 32: base 128, min = floor(128 / 20) = 6, max = 256 - 6 = 250.
  const std::vector<size_t> b = pyramid_layer_budgets(30, 160, 32, 20.0);
  ASSERT_EQ(b.size(), 30u);
  EXPECT_EQ(b.front(), 32u + 250u);
  EXPECT_EQ(b.back(), 32u + 6u);
  EXPECT_EQ(sum(b), 30u * 160u);
  for (size_t l = 1; l < b.size(); ++l) EXPECT_GT(b[l - 1], b[l]);
}

TEST(AllocPyramid, RandomSweepIsMonotoneWithExactMeanAndEndpoints) {
  std::mt19937 rng(6);
  for (int i = 0; i < 2000; ++i) {
    const size_t layers = 1 + rng() % 40, W = std::vector<size_t>{0, 8, 32}[rng() % 3];
    const size_t B = W + rng() % 600;
    const double beta = std::vector<double>{0.5, 1.0, 2.0, 5.0, 20.0, 7.3}[rng() % 6];
    const std::vector<size_t> b = pyramid_layer_budgets(layers, B, W, beta);
    ASSERT_EQ(b.size(), layers);
    ASSERT_EQ(sum(b), layers * B) << "layers " << layers << " B " << B << " beta " << beta;
    const size_t base = B - W;
    const size_t mn = std::min(base, static_cast<size_t>(std::floor(base / beta)));
    if (layers > 1) {
      EXPECT_EQ(b.back(), W + mn);
      EXPECT_EQ(b.front(), W + 2 * base - mn);
    }
    for (size_t l = 1; l < layers; ++l) ASSERT_GE(b[l - 1], b[l]);
  }
}

TEST(AllocPyramid, CapsTheFirstLayerAtThePrompt) {
  // base 100, max would be 195 > prefix 150: max = 150, min = 50 (official rule).
  const std::vector<size_t> b = pyramid_layer_budgets(5, 132, 32, 20.0, 182);
  EXPECT_EQ(b, (std::vector<size_t>{182, 157, 132, 107, 82}));
  // The budget reaches the prompt: every layer keeps everything.
  EXPECT_EQ(pyramid_layer_budgets(3, 200, 32, 20.0, 150), (std::vector<size_t>{150, 150, 150}));
  // No cap needed: the prompt length changes nothing.
  EXPECT_EQ(pyramid_layer_budgets(4, 64, 32, 4.0, 5000), pyramid_layer_budgets(4, 64, 32, 4.0));
}

TEST(AllocPyramid, EdgeCases) {
  EXPECT_EQ(pyramid_layer_budgets(1, 100, 32, 20.0), (std::vector<size_t>{100}));
  EXPECT_TRUE(pyramid_layer_budgets(0, 100, 32, 20.0).empty());
  EXPECT_EQ(pyramid_layer_budgets(3, 32, 32, 20.0), (std::vector<size_t>{32, 32, 32}));
  EXPECT_THROW(pyramid_layer_budgets(3, 31, 32, 20.0), std::invalid_argument);
  EXPECT_THROW(pyramid_layer_budgets(3, 64, 32, 0.0), std::invalid_argument);
  EXPECT_THROW(pyramid_layer_budgets(3, 64, 32, std::nan("")), std::invalid_argument);
}

TEST(AllocSelectTop, ChronologicalOrder) {
  const std::vector<float> s = {0.1f, 0.9f, 0.3f, 0.8f, 0.2f};
  EXPECT_EQ(select_top_positions(s.data(), s.size(), 2), (std::vector<uint32_t>{1, 3}));
  EXPECT_EQ(select_top_positions(s.data(), s.size(), 3), (std::vector<uint32_t>{1, 2, 3}));
}

TEST(AllocSelectTop, TiesGoToTheLowerPosition) {
  const std::vector<float> flat = {1, 1, 1, 1};
  EXPECT_EQ(select_top_positions(flat.data(), 4, 2), (std::vector<uint32_t>{0, 1}));
  const std::vector<float> s = {0.5f, 1, 0.5f, 1, 0.5f};
  EXPECT_EQ(select_top_positions(s.data(), 5, 3), (std::vector<uint32_t>{0, 1, 3}));
  const std::vector<float> n = {std::numeric_limits<float>::quiet_NaN(), 0.0f, -1.0f};
  EXPECT_EQ(select_top_positions(n.data(), 3, 2), (std::vector<uint32_t>{1, 2}));
}

TEST(AllocSelectTop, KeepZeroAllAndTooMany) {
  const std::vector<float> s = {3, 1, 2};
  EXPECT_TRUE(select_top_positions(s.data(), 3, 0).empty());
  EXPECT_EQ(select_top_positions(s.data(), 3, 3), (std::vector<uint32_t>{0, 1, 2}));
  EXPECT_TRUE(select_top_positions(nullptr, 0, 0).empty());
  EXPECT_THROW(select_top_positions(s.data(), 3, 4), std::invalid_argument);
}

TEST(AllocSelectTop, MatchesAStableSortReference) {
  std::mt19937 rng(7);
  for (int i = 0; i < 300; ++i) {
    const size_t n = 1 + rng() % 200, keep = rng() % (n + 1);
    const std::vector<float> s = random_scores(rng, n, i % 2 ? 3 : 100);
    std::vector<uint32_t> ref(n);
    std::iota(ref.begin(), ref.end(), 0u);
    std::stable_sort(ref.begin(), ref.end(), [&s](uint32_t a, uint32_t b) { return s[a] > s[b]; });
    ref.resize(keep);
    std::sort(ref.begin(), ref.end());
    ASSERT_EQ(select_top_positions(s.data(), n, keep), ref);
  }
}

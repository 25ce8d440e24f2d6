// Output-aware scoring (runtime/compression/output_aware.h and score_observations' key weights):
// the value norms through a head's block of W_o against ||W_o^h v|| computed directly, the
// strided backend path against the host one, and the weighted scores against the window scores
// of a case where the weighting must reorder two tokens.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/ops.h"
#include "runtime/compression/config.h"
#include "runtime/compression/output_aware.h"
#include "runtime/compression/scorer.h"
#include "tests/unit/random_data.h"

namespace c = adakv::compression;

namespace {

// G_h = (W_o^h)^T W_o^h from W_o [D][Hq * Dh] (row-major).
std::vector<float> grams_of(const std::vector<float>& wo, size_t D, size_t Hq, size_t Dh) {
  std::vector<float> g(Hq * Dh * Dh, 0.0f);
  for (size_t h = 0; h < Hq; ++h) {
    for (size_t a = 0; a < Dh; ++a) {
      for (size_t b = 0; b < Dh; ++b) {
        double s = 0;
        for (size_t n = 0; n < D; ++n) {
          s += double(wo[n * Hq * Dh + h * Dh + a]) * double(wo[n * Hq * Dh + h * Dh + b]);
        }
        g[(h * Dh + a) * Dh + b] = float(s);
      }
    }
  }
  return g;
}

}  // namespace

TEST(OutputAware, NormsAreTheValueThroughTheHeadsOutputProjection) {
  const size_t D = 24, Hq = 4, Hkv = 2, Dh = 8, n = 11;
  const auto wo = adakv::test::random_vector(D * Hq * Dh, 1);
  const auto v = adakv::test::random_vector(n * Hkv * Dh, 2);
  const auto norms = c::value_output_norms_host(v.data(), n, Hq, Hkv, Dh, grams_of(wo, D, Hq, Dh));
  ASSERT_EQ(norms.size(), Hq * n);
  for (size_t h = 0; h < Hq; ++h) {
    const size_t g = h / (Hq / Hkv);
    for (size_t j = 0; j < n; ++j) {
      double sq = 0;
      for (size_t row = 0; row < D; ++row) {
        double y = 0;
        for (size_t d = 0; d < Dh; ++d) {
          y += double(wo[row * Hq * Dh + h * Dh + d]) * double(v[(j * Hkv + g) * Dh + d]);
        }
        sq += y * y;
      }
      EXPECT_NEAR(norms[h * n + j], std::sqrt(sq), 1e-4 * std::sqrt(sq) + 1e-5)
          << "head " << h << " token " << j;
    }
  }
}

TEST(OutputAware, StridedValuesOnTheBackendMatchTheHost) {
  const size_t D = 16, Hq = 6, Hkv = 3, Dh = 4, n = 9, stride = 40;  // values inside wider rows
  const auto grams = grams_of(adakv::test::random_vector(D * Hq * Dh, 3), D, Hq, Dh);
  const auto wide = adakv::test::random_vector(n * stride, 4);
  std::vector<float> packed(n * Hkv * Dh);
  for (size_t j = 0; j < n; ++j) {
    for (size_t i = 0; i < Hkv * Dh; ++i) packed[j * Hkv * Dh + i] = wide[j * stride + 7 + i];
  }
  auto& backend = adakv::kernels::cpu_backend();
  const auto on_backend =
      c::value_output_norms(backend, wide.data() + 7, stride, n, Hq, Hkv, Dh, grams);
  EXPECT_EQ(on_backend, c::value_output_norms_host(packed.data(), n, Hq, Hkv, Dh, grams));
}

TEST(OutputAware, WeightsReorderTokensTheWindowScoresAlike) {
  // Two heads of one KV group, Dh 2: the window query attends equally to keys 0 and 1 (equal
  // keys), key 1's value is zero, so only key 0 moves the output.
  const size_t Hq = 2, Hkv = 1, Dh = 2, n = 4;
  c::CompressionConfig config;
  config.window = 1;
  config.pool_kernel = 1;
  std::vector<float> q(n * Hq * Dh, 0.0f), k(n * Hkv * Dh, 0.0f);
  for (size_t j = 0; j < n; ++j) q[j * Hq * Dh] = q[j * Hq * Dh + 2] = 1.0f;
  k[0] = k[2] = 1.0f;  // keys 0 and 1 alike
  auto& backend = adakv::kernels::cpu_backend();
  const auto window = c::score_observations(q.data() + (n - 1) * Hq * Dh, Hq * Dh, k.data(),
                                            Hkv * Dh, n, 1, Hq, Hkv, Dh, config, nullptr, backend);
  ASSERT_EQ(window.size(), n - 1);
  EXPECT_FLOAT_EQ(window[0], window[1]);
  std::vector<float> weights(Hq * n, 1.0f);
  weights[1] = weights[n + 1] = 0.0f;  // key 1 of both heads
  const auto weighted =
      c::score_observations(q.data() + (n - 1) * Hq * Dh, Hq * Dh, k.data(), Hkv * Dh, n, 1, Hq,
                            Hkv, Dh, config, nullptr, backend, &weights);
  EXPECT_FLOAT_EQ(weighted[0], window[0]);
  EXPECT_EQ(weighted[1], 0.0f);
  EXPECT_FLOAT_EQ(weighted[2], window[2]);
}

TEST(OutputAware, ConfigNamesAndLookaheadConflict) {
  EXPECT_EQ(c::parse_scoring("output-aware"), c::Scoring::kOutputAware);
  EXPECT_EQ(c::parse_scoring("Window"), c::Scoring::kWindow);
  EXPECT_STREQ(c::to_string(c::Scoring::kOutputAware), "output-aware");
  EXPECT_EQ(c::parse_scoring("reconstruct"), c::Scoring::kReconstruct);
  EXPECT_THROW(c::parse_scoring("kvzip"), std::invalid_argument);
  c::CompressionConfig a, b;
  b.scoring = c::Scoring::kOutputAware;
  EXPECT_FALSE(a.same_scoring(b));
  b.lookahead = 8;
  EXPECT_THROW(b.validate(), std::invalid_argument);
  b.scoring = c::Scoring::kReconstruct;
  EXPECT_THROW(b.validate(), std::invalid_argument);
  b.lookahead = 0;
  EXPECT_NO_THROW(b.validate());
}

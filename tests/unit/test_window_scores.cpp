// window_attention_mass against a naive double reference that forms every causal softmax row
// of the observation window, on awkward shapes (W == n, W == 1, n == 1, odd sizes, GQA).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/ops.h"
#include "tests/unit/random_data.h"
#include "tests/unit/tolerances.h"

namespace k = adakv::kernels;

namespace {

using adakv::test::random_vector;

struct Shape {
  size_t n, W, Hq, Hkv, Dh;
};

// The summed attention of the window's queries, and in `peak` its largest single value.
std::vector<double> reference(const std::vector<float>& q, size_t q_stride,
                              const std::vector<float>& kk, size_t k_stride, const Shape& s,
                              float scale, std::vector<double>* peak = nullptr) {
  std::vector<double> out(s.Hq * s.n, 0.0);
  if (peak) peak->assign(s.Hq * s.n, 0.0);
  const size_t group = s.Hq / s.Hkv;
  for (size_t h = 0; h < s.Hq; ++h) {
    for (size_t i = s.n - s.W; i < s.n; ++i) {
      std::vector<double> p(i + 1);
      double m = -INFINITY, sum = 0;
      for (size_t j = 0; j <= i; ++j) {
        double dot = 0;
        for (size_t d = 0; d < s.Dh; ++d) {
          dot += double(q[i * q_stride + h * s.Dh + d]) * kk[j * k_stride + (h / group) * s.Dh + d];
        }
        p[j] = dot * scale;
        m = std::max(m, p[j]);
      }
      for (auto& x : p) sum += (x = std::exp(x - m));
      for (size_t j = 0; j <= i; ++j) {
        out[h * s.n + j] += p[j] / sum;
        if (peak) (*peak)[h * s.n + j] = std::max((*peak)[h * s.n + j], p[j] / sum);
      }
    }
  }
  return out;
}

}  // namespace

TEST(WindowAttentionMass, MatchesNaiveReference) {
  const Shape shapes[] = {{1, 1, 1, 1, 1},   {7, 7, 2, 2, 5},     {7, 1, 3, 1, 8},
                          {33, 5, 9, 3, 64}, {100, 32, 9, 3, 64}, {129, 32, 4, 4, 7},
                          {40, 40, 6, 2, 3}};
  uint32_t seed = 1;
  for (const Shape& s : shapes) {
    SCOPED_TRACE(testing::Message() << "n " << s.n << " W " << s.W << " Hq " << s.Hq << " Hkv "
                                    << s.Hkv << " Dh " << s.Dh);
    const size_t q_stride = s.Hq * s.Dh + 3, k_stride = s.Hkv * s.Dh + 1;  // padded rows
    const auto q = random_vector(s.n * q_stride, seed++, 1.0f);
    const auto kk = random_vector(s.n * k_stride, seed++, 1.0f);
    const float scale = 2.0f / std::sqrt(float(s.Dh));  // sharper than 1/sqrt(Dh)
    std::vector<float> got(s.Hq * s.n, -1.0f);
    k::check(k::window_attention_mass(got.data(), q.data() + (s.n - s.W) * q_stride, q_stride,
                                      kk.data(), k_stride, s.n, s.W, s.Hq, s.Hkv, s.Dh, scale),
             "window_attention_mass");
    const auto want = reference(q, q_stride, kk, k_stride, s, scale);
    for (size_t h = 0; h < s.Hq; ++h) {
      double row_total = 0;
      for (size_t j = 0; j < s.n; ++j) {
        // Each entry is a sum of at most W probabilities: relative to W.
        ASSERT_NEAR(got[h * s.n + j], want[h * s.n + j], adakv::test::kF32Rel * s.W)
            << "head " << h << " key " << j;
        ASSERT_GE(got[h * s.n + j], 0.0f);
        row_total += got[h * s.n + j];
      }
      // Every window query's softmax sums to 1, so the mass of a head sums to W.
      EXPECT_NEAR(row_total, double(s.W), adakv::test::kF32Rel * s.W) << "head " << h;
    }
  }
}

// The peak comes out of the same pass and leaves the sum bit for bit as it was.
TEST(WindowAttentionMass, PeakIsTheLargestProbabilityOfAnyWindowQuery) {
  const Shape shapes[] = {{1, 1, 1, 1, 1}, {7, 1, 3, 1, 8}, {33, 5, 9, 3, 64}, {129, 32, 4, 4, 7}};
  uint32_t seed = 40;
  for (const Shape& s : shapes) {
    SCOPED_TRACE(testing::Message() << "n " << s.n << " W " << s.W << " Hq " << s.Hq);
    const size_t q_stride = s.Hq * s.Dh, k_stride = s.Hkv * s.Dh;
    const auto q = random_vector(s.n * q_stride, seed++, 1.0f);
    const auto kk = random_vector(s.n * k_stride, seed++, 1.0f);
    const float scale = 2.0f / std::sqrt(float(s.Dh));
    const float* window_q = q.data() + (s.n - s.W) * q_stride;
    std::vector<float> sum(s.Hq * s.n), sum_again(s.Hq * s.n), peak(s.Hq * s.n, -1.0f);
    k::check(k::window_attention_mass(sum.data(), window_q, q_stride, kk.data(), k_stride, s.n, s.W,
                                      s.Hq, s.Hkv, s.Dh, scale),
             "window_attention_mass");
    k::check(k::window_attention_mass(sum_again.data(), window_q, q_stride, kk.data(), k_stride,
                                      s.n, s.W, s.Hq, s.Hkv, s.Dh, scale, peak.data()),
             "window_attention_mass");
    EXPECT_EQ(sum, sum_again);
    std::vector<double> want;
    reference(q, q_stride, kk, k_stride, s, scale, &want);
    for (size_t i = 0; i < peak.size(); ++i) {
      ASSERT_NEAR(peak[i], want[i], adakv::test::kF32Rel) << "entry " << i;
      ASSERT_LE(peak[i], sum[i] * (1.0f + adakv::test::kF32Rel));  // one term of the sum
    }
  }
}

TEST(WindowAttentionMass, RejectsBadShapes) {
  std::vector<float> x(64, 0.0f), out(64);
  EXPECT_EQ(k::window_attention_mass(out.data(), x.data(), 2, x.data(), 2, 4, 0, 1, 1, 2, 1.0f),
            k::Status::kInvalidArgument);  // W == 0
  EXPECT_EQ(k::window_attention_mass(out.data(), x.data(), 2, x.data(), 2, 4, 5, 1, 1, 2, 1.0f),
            k::Status::kInvalidArgument);  // W > n
  EXPECT_EQ(k::window_attention_mass(out.data(), x.data(), 6, x.data(), 4, 4, 2, 3, 2, 2, 1.0f),
            k::Status::kInvalidArgument);  // Hq not a multiple of Hkv
  EXPECT_EQ(k::window_attention_mass(out.data(), x.data(), 2, x.data(), 2, 4, 4, 1, 1, 2, 1.0f),
            k::Status::kOk);
}

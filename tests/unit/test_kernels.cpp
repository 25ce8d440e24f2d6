// Every CPU op against a naive reference on awkward shapes (1, odd sizes, 769).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/vec_exp.h"
#include "kernels/cpu_threads.h"
#include "kernels/ops.h"
#include "tests/unit/random_data.h"
#include "tests/unit/tolerances.h"

namespace k = adakv::kernels;

namespace {

using adakv::test::random_vector;

void expect_close(const std::vector<float>& got, const std::vector<float>& want, float rel) {
  ASSERT_EQ(got.size(), want.size());
  float max_ref = 0;
  for (float w : want) max_ref = std::max(max_ref, std::fabs(w));
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], rel * std::max(max_ref, 1e-6f)) << "at index " << i;
  }
}

}  // namespace

TEST(Kernels, RmsnormMatchesReference) {
  for (size_t dim : {1, 7, 64, 769}) {
    const size_t rows = 5;
    auto x = random_vector(rows * dim, 1);
    auto w = random_vector(dim, 2);
    std::vector<float> got(rows * dim), want(rows * dim);
    k::check(k::rmsnorm(got.data(), x.data(), w.data(), rows, dim, 1e-5f), "rmsnorm");
    for (size_t r = 0; r < rows; ++r) {
      double ss = 0;
      for (size_t i = 0; i < dim; ++i) ss += double(x[r * dim + i]) * x[r * dim + i];
      const double inv = 1.0 / std::sqrt(ss / dim + 1e-5);
      for (size_t i = 0; i < dim; ++i) want[r * dim + i] = float(x[r * dim + i] * inv * w[i]);
    }
    expect_close(got, want, adakv::test::kF32Rel);
  }
}

TEST(Kernels, MatmulMatchesReference) {
  for (auto [M, N, K] : {std::tuple{1, 1, 1}, {1, 769, 33}, {7, 5, 3}, {17, 31, 769}}) {
    auto x = random_vector(M * K, 3);
    auto w = random_vector(N * K, 4);
    auto y0 = random_vector(M * N, 5);
    for (bool accumulate : {false, true}) {
      std::vector<float> got = y0, want(M * N);
      k::check(k::matmul(got.data(), x.data(), w.data(), M, N, K, accumulate), "matmul");
      for (int m = 0; m < M; ++m) {
        for (int n = 0; n < N; ++n) {
          double s = accumulate ? y0[m * N + n] : 0.0;
          for (int kk = 0; kk < K; ++kk) s += double(x[m * K + kk]) * w[n * K + kk];
          want[m * N + n] = float(s);
        }
      }
      expect_close(got, want, adakv::test::kF32GemmRel);
    }
  }
}

TEST(Kernels, RopeRotatesAdjacentPairs) {
  const size_t T = 3, H = 2, Dh = 8, stride = 20;  // stride > H*Dh: rows are padded
  auto x = random_vector(T * stride, 6);
  auto got = x;
  const int32_t pos[T] = {0, 5, 8191};
  k::check(k::rope_adjacent(got.data(), pos, T, H, Dh, stride, k::rope_frequencies(10000.0f, Dh)),
           "rope");
  for (size_t t = 0; t < T; ++t) {
    for (size_t h = 0; h < H; ++h) {
      for (size_t i = 0; i < Dh / 2; ++i) {
        const double angle = pos[t] * std::pow(10000.0, -2.0 * i / Dh);
        const float a = x[t * stride + h * Dh + 2 * i], b = x[t * stride + h * Dh + 2 * i + 1];
        EXPECT_NEAR(got[t * stride + h * Dh + 2 * i], a * std::cos(angle) - b * std::sin(angle),
                    2e-3);
        EXPECT_NEAR(got[t * stride + h * Dh + 2 * i + 1], a * std::sin(angle) + b * std::cos(angle),
                    2e-3);
      }
    }
    for (size_t j = H * Dh; j < stride; ++j) EXPECT_EQ(got[t * stride + j], x[t * stride + j]);
  }
}

TEST(Kernels, SwigluMatchesReference) {
  const size_t T = 3, F = 769;
  auto gu = random_vector(T * 2 * F, 7, 3.0f);
  std::vector<float> got(T * F), want(T * F);
  k::check(k::swiglu(got.data(), gu.data(), T, F), "swiglu");
  for (size_t t = 0; t < T; ++t) {
    for (size_t i = 0; i < F; ++i) {
      const double g = gu[t * 2 * F + i], u = gu[t * 2 * F + F + i];
      want[t * F + i] = float(g / (1 + std::exp(-g)) * u);
    }
  }
  expect_close(got, want, adakv::test::kF32Rel);
}

TEST(Kernels, EmbedRejectsOutOfRangeIds) {
  std::vector<float> table(4 * 3, 1.0f), out(3);
  const int32_t bad = 4, good = 3;
  EXPECT_EQ(k::embed(out.data(), table.data(), &bad, 1, 4, 3), k::Status::kInvalidArgument);
  EXPECT_EQ(k::embed(out.data(), table.data(), &good, 1, 4, 3), k::Status::kOk);
}

// Dense reference: scores for every visible key, softmax, weighted sum of values.
std::vector<float> attention_reference(const std::vector<float>& q, const std::vector<float>& kc,
                                       const std::vector<float>& vc, size_t T, size_t n_kv,
                                       size_t Hq, size_t Hkv, size_t Dh, float scale) {
  std::vector<float> out(T * Hq * Dh);
  const size_t group = Hq / Hkv, offset = n_kv - T;
  for (size_t t = 0; t < T; ++t) {
    for (size_t h = 0; h < Hq; ++h) {
      const size_t g = h / group, visible = offset + t + 1;
      std::vector<double> s(visible);
      double mx = -1e300;
      for (size_t j = 0; j < visible; ++j) {
        double d = 0;
        for (size_t i = 0; i < Dh; ++i)
          d += double(q[(t * Hq + h) * Dh + i]) * kc[(j * Hkv + g) * Dh + i];
        s[j] = d * scale;
        mx = std::max(mx, s[j]);
      }
      double sum = 0;
      for (auto& e : s) sum += (e = std::exp(e - mx));
      for (size_t i = 0; i < Dh; ++i) {
        double acc = 0;
        for (size_t j = 0; j < visible; ++j) acc += s[j] * vc[(j * Hkv + g) * Dh + i];
        out[(t * Hq + h) * Dh + i] = float(acc / sum);
      }
    }
  }
  return out;
}

TEST(Kernels, CausalAttentionMatchesDenseReference) {
  // (T, n_kv, Hq, Hkv, Dh): prefill from empty, decode of one token, and chunks crossing block
  // boundaries, on both paths (tiled: T >= 16 and Dh in 16/32/64/128; rowwise: the rest).
  const std::tuple<size_t, size_t, size_t, size_t, size_t> cases[] = {
      {1, 1, 1, 1, 1},    {1, 300, 4, 2, 8},    {17, 17, 9, 3, 64}, {129, 257, 6, 3, 16},
      {5, 769, 2, 1, 32}, {40, 100, 4, 2, 128}, {64, 64, 2, 2, 32}, {33, 1000, 3, 1, 64}};
  for (auto [T, n_kv, Hq, Hkv, Dh] : cases) {
    auto q = random_vector(T * Hq * Dh, 8, 2.0f);
    auto kc = random_vector(n_kv * Hkv * Dh, 9, 2.0f);
    auto vc = random_vector(n_kv * Hkv * Dh, 10);
    const float scale = 1.0f / std::sqrt(float(Dh));
    std::vector<float> got(T * Hq * Dh);
    k::check(k::attention_causal(got.data(), q.data(), kc.data(), vc.data(), T, n_kv, Hq, Hkv, Dh,
                                 Hq * Dh, Hkv * Dh, Hq * Dh, scale),
             "attention");
    expect_close(got, attention_reference(q, kc, vc, T, n_kv, Hq, Hkv, Dh, scale),
                 adakv::test::kF32Rel);
  }
}

TEST(Kernels, AttentionRejectsBadShapes) {
  float x = 0;
  EXPECT_EQ(k::attention_causal(&x, &x, &x, &x, 2, 1, 1, 1, 1, 1, 1, 1, 1.0f),
            k::Status::kInvalidArgument);  // more queries than cache entries
  EXPECT_EQ(k::attention_causal(&x, &x, &x, &x, 1, 1, 3, 2, 1, 1, 1, 1, 1.0f),
            k::Status::kInvalidArgument);  // heads not a multiple of KV heads
}

TEST(Kernels, VectorExpIsAccurate) {
  std::vector<float> x;
  for (float v = -100.0f; v <= 88.0f; v += 0.0137f) x.push_back(v);
  auto y = x;
  adakv::kernels::exp_inplace(y.data(), y.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double want = std::exp(double(x[i]));
    if (x[i] < -87.0f) {
      EXPECT_LE(y[i], 1e-37f);
    } else {
      ASSERT_NEAR(y[i] / want, 1.0, 3e-7) << "x = " << x[i];
    }
  }
}

// The CLI's default (--threads not given) passes 0: it must keep the count OpenMP already has,
// which is OMP_NUM_THREADS when the launcher sets it (threads_per_rank), not every core.
TEST(Kernels, DefaultThreadCountKeepsOpenMpsSetting) {
  const int before = k::num_threads();
  k::set_num_threads(1);
  k::set_num_threads(0);
  EXPECT_EQ(k::num_threads(), 1);
  k::set_num_threads(-1);
  EXPECT_EQ(k::num_threads(), 1);
  k::set_num_threads(3);
  EXPECT_EQ(k::num_threads(), 3);
  k::set_num_threads(before);
}

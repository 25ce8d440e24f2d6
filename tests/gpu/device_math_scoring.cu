// The scoring kernels' math (kernels/cuda/score_math.cuh) run on the host against the CPU
// backend: pool_scores and blend_scores computed element by element with the kernels' functions
// must be the CPU's bit for bit; window_attention_mass emulated pass by pass as the kernels
// split it (per-chunk softmax partials, their merge, the row-ordered sums) must match the CPU
// within kCudaScoreTolerance. Only the kernels' fixed-order block reductions (sums of a chunk's
// exponentials) are emulated here as plain sums in key order.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <utility>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cuda/score_math.cuh"
#include "tests/gpu/cuda_fixture.h"
#include "tests/unit/random_data.h"

namespace {

namespace k = adakv::kernels;
namespace cu = adakv::kernels::cuda;
using adakv::test::kCudaScoreTolerance;
using adakv::test::matches_cpu;
using adakv::test::random_vector;
using adakv::test::same_bits;

k::Backend& cpu() {
  return k::cpu_backend();
}

// Attention-like mass: positive, a heavy first token, some exact ties.
std::vector<float> mass_like(size_t n, uint32_t seed) {
  auto v = random_vector(n, seed);
  for (size_t i = 0; i < n; ++i) v[i] = i % 11 == 3 ? 0.25f : v[i] * v[i];
  if (n > 0) v[0] = 20.0f;
  return v;
}

// ---- pool_scores and blend_scores -------------------------------------------------------------

TEST(DeviceMathScoring, PooledMassWithoutSinksIsPool1d) {
  uint32_t seed = 1;
  for (size_t n : {1, 2, 7, 769}) {
    const auto in = mass_like(n, seed++);
    for (size_t kernel : {1, 3, 5, 7, 8}) {
      for (size_t shift = 0; shift <= kernel / 2; ++shift) {
        for (bool max_pool : {true, false}) {
          const k::ScorePooling pooling{0, kernel, max_pool, shift, false};
          std::vector<float> got(n), want(n);
          for (size_t i = 0; i < n; ++i) got[i] = cu::pooled_mass(in.data(), i, n, pooling);
          k::pool1d(in.data(), want.data(), n, kernel, max_pool, shift);
          ASSERT_TRUE(same_bits(got, want)) << "n " << n << " kernel " << kernel << " shift "
                                            << shift << (max_pool ? " max" : " avg");
        }
      }
    }
  }
}

TEST(DeviceMathScoring, PoolSpanIsTheClippedKernel) {
  for (size_t n : {1, 2, 9}) {
    for (size_t kernel : {1, 2, 5, 8}) {
      for (size_t shift = 0; shift <= kernel / 2; ++shift) {
        for (size_t i = 0; i < n; ++i) {
          const cu::PoolSpan span = cu::pool_span(i, n, kernel, shift);
          const ptrdiff_t lo = ptrdiff_t(i) - ptrdiff_t(kernel / 2) - ptrdiff_t(shift);
          const ptrdiff_t hi = ptrdiff_t(i) + ptrdiff_t(kernel / 2) - ptrdiff_t(shift);
          EXPECT_EQ(span.lo, std::max<ptrdiff_t>(lo, 0)) << n << " " << kernel << " " << i;
          EXPECT_EQ(span.hi, std::min<ptrdiff_t>(hi, ptrdiff_t(n) - 1)) << n << " " << kernel;
          EXPECT_LE(span.lo, ptrdiff_t(i));
          EXPECT_GE(span.hi, ptrdiff_t(i));
        }
      }
    }
  }
}

// pool_scores_kernel's body (pool_score at every (KV head, key)) against the CPU op.
TEST(DeviceMathScoring, PoolScoreMatchesCpuBitForBit) {
  uint32_t seed = 100;
  for (auto [Hq, Hkv] : {std::pair<size_t, size_t>{1, 1}, {3, 1}, {3, 3}, {9, 3}, {8, 1}}) {
    for (size_t prefix : {1, 2, 7, 769, 2000}) {
      for (size_t extra : {0, 5}) {
        const size_t n_keys = prefix + extra;
        const auto mass = mass_like(Hq * n_keys, seed++);
        for (size_t sink : {0, 1, 4, 1000}) {
          for (size_t kernel : {1, 5, 7, 8}) {
            for (size_t shift : {0, 1, 3}) {
              if (shift > kernel / 2) continue;
              for (bool max_pool : {true, false}) {
                for (bool gqa_max : {false, true}) {
                  const k::ScorePooling c{sink, kernel, max_pool, shift, gqa_max};
                  std::vector<float> want(Hkv * prefix, -1.0f), got(Hkv * prefix, -2.0f);
                  cpu().pool_scores(want.data(), mass.data(), n_keys, prefix, Hq, Hkv, c);
                  for (size_t g = 0; g < Hkv; ++g) {
                    for (size_t j = 0; j < prefix; ++j) {
                      got[g * prefix + j] =
                          cu::pool_score(mass.data(), n_keys, prefix, Hq / Hkv, g, j, c);
                    }
                  }
                  ASSERT_TRUE(same_bits(got, want))
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

// blend_scores_kernel's body against the CPU op; the data tells one fma from a multiply and an
// add, so the CPU build's contraction is checked too.
TEST(DeviceMathScoring, BlendMatchesCpuBitForBit) {
  uint32_t seed = 200;
  size_t fused_differs = 0;
  for (size_t Hq : {1, 3, 9}) {
    for (size_t prefix : {1, 7, 769}) {
      const size_t n_keys = prefix + 7, n_window = prefix + 3;
      for (bool with_peak : {false, true}) {
        for (float w : {0.5f, 3.0f, 0.1f, 0.0f, 0.7f}) {
          const auto mass = mass_like(Hq * n_keys, seed++);
          const auto peak = mass_like(Hq * n_keys, seed++);
          const auto window_mass = random_vector(Hq * n_window, seed++);
          const auto window_peak = mass_like(Hq * n_window, seed++);
          auto want_mass = mass, want_peak = peak;
          cpu().blend_scores(want_mass.data(), with_peak ? want_peak.data() : nullptr,
                             window_mass.data(), with_peak ? window_peak.data() : nullptr, Hq,
                             n_keys, n_window, prefix, w);
          auto got_mass = mass, got_peak = peak;
          for (size_t h = 0; h < Hq; ++h) {
            for (size_t j = 0; j < prefix; ++j) {
              const size_t i = h * n_keys + j, iw = h * n_window + j;
              got_mass[i] = cu::blend_mass(window_mass[iw], w, mass[i]);
              if (with_peak) got_peak[i] = cu::blend_peak(window_peak[iw], w, peak[i]);
              const volatile float product = w * mass[i];
              if (window_mass[iw] + product != got_mass[i]) ++fused_differs;
            }
          }
          ASSERT_TRUE(same_bits(got_mass, want_mass)) << "Hq " << Hq << " prefix " << prefix;
          ASSERT_TRUE(same_bits(got_peak, want_peak)) << "Hq " << Hq << " prefix " << prefix;
        }
      }
    }
  }
  EXPECT_GT(fused_differs, 0u) << "the data cannot tell one fma from a multiply and an add";
}

// ---- window_attention_mass --------------------------------------------------------------------

TEST(DeviceMathScoring, MergedPartialsAreTheRowSoftmax) {
  uint32_t seed = 300;
  for (size_t n : {1, 5, 128, 129, 1000}) {
    for (float spread : {1.0f, 10.0f, 40.0f}) {
      const auto logits = random_vector(n, seed++, spread);
      std::vector<cu::SoftmaxPartial> partial;
      for (size_t j0 = 0; j0 < n; j0 += cu::kWindowKeys) {
        const size_t j1 = std::min<size_t>(n, j0 + cu::kWindowKeys);
        float m = logits[j0], sum = 0.0f;
        for (size_t j = j0; j < j1; ++j) m = std::max(m, logits[j]);
        for (size_t j = j0; j < j1; ++j) sum += std::exp(logits[j] - m);
        partial.push_back({m, sum});
      }
      const cu::SoftmaxStats stats = cu::merge_partials(partial.data(), partial.size());
      double m = -INFINITY, sum = 0;
      for (float x : logits) m = std::max(m, double(x));
      for (float x : logits) sum += std::exp(double(x) - m);
      EXPECT_EQ(stats.max, float(m)) << n;
      EXPECT_NEAR(stats.inv_sum, 1.0 / sum, 1e-6 / sum) << n << " spread " << spread;
      double total = 0;
      for (float x : logits) total += cu::window_probability(cu::window_exp(x, stats), stats);
      EXPECT_NEAR(total, 1.0, 1e-5) << n << " spread " << spread;
    }
  }
}

struct WindowShape {
  size_t n, W, Hq, Hkv, Dh;
};

// The three window kernels on the host, pass by pass, with their functions; out [Hq][n] and
// peak [Hq][n].
void emulate_window_mass(std::vector<float>& out, std::vector<float>& peak, const float* q,
                         size_t q_stride, const float* kk, size_t k_stride, const WindowShape& s,
                         float scale) {
  const size_t first = s.n - s.W, group = s.Hq / s.Hkv;
  const size_t n_chunks = (s.n + cu::kWindowKeys - 1) / cu::kWindowKeys;
  out.assign(s.Hq * s.n, -1.0f);
  peak.assign(s.Hq * s.n, -1.0f);
  std::vector<float> logits(s.W * s.n);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (size_t h = 0; h < s.Hq; ++h) {
    const size_t g = h / group;
    for (size_t i = 0; i < s.W; ++i) {
      for (size_t j = 0; j < s.n; ++j) {
        float acc = 0.0f;
        for (size_t d = 0; d < s.Dh; ++d) {
          acc = cu::dot_step(acc, cu::scaled_query(q[i * q_stride + h * s.Dh + d], scale),
                             kk[j * k_stride + g * s.Dh + d]);
        }
        logits[i * s.n + j] = acc;
      }
    }
    // Pass 1: a partial for every row that sees a key of the chunk; NaN where none is written,
    // so a merge that reads past them shows.
    std::vector<cu::SoftmaxPartial> partial(s.W * n_chunks, {nan, nan});
    for (size_t c = 0; c < n_chunks; ++c) {
      const size_t j0 = c * cu::kWindowKeys, j1 = std::min<size_t>(s.n, j0 + cu::kWindowKeys);
      for (size_t i = cu::first_row_seeing(j0, first); i < s.W; ++i) {
        float m = -INFINITY, sum = 0.0f;
        for (size_t j = j0; j < j1; ++j) {
          if (cu::key_visible(j, first, i)) m = std::fmax(m, logits[i * s.n + j]);
        }
        for (size_t j = j0; j < j1; ++j) {
          if (cu::key_visible(j, first, i)) sum += std::exp(logits[i * s.n + j] - m);
        }
        partial[i * n_chunks + c] = {m, sum};
      }
    }
    // Pass 2.
    std::vector<cu::SoftmaxStats> stats(s.W);
    for (size_t i = 0; i < s.W; ++i) {
      stats[i] = cu::merge_partials(&partial[i * n_chunks], cu::last_chunk_seen(first, i) + 1);
    }
    // Pass 3: each key's rows in order, from the chunk's first row on.
    for (size_t c = 0; c < n_chunks; ++c) {
      const size_t j0 = c * cu::kWindowKeys, j1 = std::min<size_t>(s.n, j0 + cu::kWindowKeys);
      for (size_t j = j0; j < j1; ++j) {
        float sum = 0.0f, largest = 0.0f;
        for (size_t i = cu::first_row_seeing(j0, first); i < s.W; ++i) {
          if (!cu::key_visible(j, first, i)) continue;
          const float e = cu::window_exp(logits[i * s.n + j], stats[i]);
          sum = cu::add_probability(sum, e, stats[i]);
          largest = cu::max_like_std(largest, cu::window_probability(e, stats[i]));
        }
        out[h * s.n + j] = sum;
        peak[h * s.n + j] = largest;
      }
    }
  }
}

TEST(DeviceMathScoring, WindowMassEmulationMatchesCpu) {
  const WindowShape shapes[] = {{1, 1, 1, 1, 64},     {7, 7, 3, 3, 7},       {33, 1, 9, 3, 64},
                                {129, 32, 1, 1, 128}, {130, 130, 3, 1, 64},  {300, 40, 9, 3, 64},
                                {700, 33, 3, 1, 128}, {1000, 257, 2, 1, 16}, {513, 9, 2, 2, 200}};
  uint32_t seed = 400;
  double worst = 0;  // the largest error seen, in units of the tolerance
  for (const WindowShape& s : shapes) {
    for (float sharpness : {2.0f, 6.0f}) {
      SCOPED_TRACE(testing::Message() << "n " << s.n << " W " << s.W << " Hq " << s.Hq << " Hkv "
                                      << s.Hkv << " Dh " << s.Dh << " sharpness " << sharpness);
      const size_t q_stride = s.Hq * s.Dh + 3, k_stride = s.Hkv * s.Dh + 1;  // padded rows
      const auto q = random_vector(s.W * q_stride, seed++);
      const auto kk = random_vector(s.n * k_stride, seed++);
      const float scale = sharpness / std::sqrt(float(s.Dh));
      std::vector<float> want(s.Hq * s.n), want_peak(s.Hq * s.n), got, got_peak;
      cpu().window_attention_mass(want.data(), q.data(), q_stride, kk.data(), k_stride, s.n, s.W,
                                  s.Hq, s.Hkv, s.Dh, scale, want_peak.data());
      emulate_window_mass(got, got_peak, q.data(), q_stride, kk.data(), k_stride, s, scale);
      EXPECT_TRUE(matches_cpu(got, want, kCudaScoreTolerance));
      EXPECT_TRUE(matches_cpu(got_peak, want_peak, kCudaScoreTolerance));
      for (const auto* pair : {&got, &got_peak}) {
        const auto& ref = pair == &got ? want : want_peak;
        double max_ref = 1e-30;
        for (float x : ref) max_ref = std::max(max_ref, std::fabs(double(x)));
        for (size_t i = 0; i < ref.size(); ++i) {
          worst = std::max(
              worst, std::fabs(double((*pair)[i]) - ref[i]) / (kCudaScoreTolerance * max_ref));
        }
      }
    }
  }
  std::printf("window mass emulation: largest error %.3f of the tolerance\n", worst);
}

}  // namespace

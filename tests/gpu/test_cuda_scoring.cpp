// The CUDA backend's scoring group (window_attention_mass, blend_scores, pool_scores) against
// the CPU backend on awkward shapes: one window row and many (W = n included), 1 to 5000 keys
// (one chunk of the window kernels, several, a partial last one), 1, 3 and 9/3 heads, head
// dimensions of 7, 64, 128 and 200, padded rows, sinks, kernels of 1, 5 and 7 with shifts,
// average and max pooling, mean and max over GQA groups, in-place pooling. blend_scores and
// pool_scores are bit for bit the CPU's; window_attention_mass is within kCudaScoreTolerance
// and the same bits on every run. Every argument the CPU rejects is rejected here too.
#include <gtest/gtest.h>

#include <cmath>
#include <ostream>
#include <utility>
#include <vector>

#include "tests/gpu/cuda_fixture.h"
#include "tests/unit/random_data.h"

namespace {

namespace k = adakv::kernels;
using adakv::test::CudaBackendTest;
using adakv::test::DeviceArray;
using adakv::test::kCudaScoreTolerance;
using adakv::test::matches_cpu;
using adakv::test::random_vector;
using adakv::test::rejects;
using adakv::test::same_bits;

class CudaWindowAttentionMass : public CudaBackendTest {};
class CudaBlendScores : public CudaBackendTest {};
class CudaPoolScores : public CudaBackendTest {};

// Attention-like mass: positive, a heavy first token, some exact ties.
std::vector<float> mass_like(size_t n, uint32_t seed) {
  auto v = random_vector(n, seed);
  for (size_t i = 0; i < n; ++i) v[i] = i % 11 == 3 ? 0.25f : v[i] * v[i];
  if (n > 0) v[0] = 20.0f;
  return v;
}

// ---- window_attention_mass --------------------------------------------------------------------

struct WindowShape {
  size_t n, W, Hq, Hkv, Dh;
};

std::ostream& operator<<(std::ostream& os, const WindowShape& s) {
  return os << "n " << s.n << " W " << s.W << " Hq " << s.Hq << " Hkv " << s.Hkv << " Dh " << s.Dh;
}

TEST_F(CudaWindowAttentionMass, MatchesCpu) {
  const WindowShape shapes[] = {{1, 1, 1, 1, 64},      {5, 5, 3, 3, 128},      {33, 1, 9, 3, 64},
                                {100, 33, 3, 3, 7},    {128, 32, 1, 1, 128},   {129, 32, 1, 1, 128},
                                {257, 257, 3, 1, 64},  {300, 40, 9, 3, 64},    {513, 9, 2, 2, 200},
                                {1000, 32, 3, 1, 128}, {2048, 2048, 3, 1, 64}, {5000, 1, 3, 3, 64},
                                {5000, 32, 9, 3, 128}};
  uint32_t seed = 1;
  for (const WindowShape& s : shapes) {
    for (float sharpness : {2.0f, 6.0f}) {
      SCOPED_TRACE(testing::Message() << s << " sharpness " << sharpness);
      const size_t q_stride = s.Hq * s.Dh + 3, k_stride = s.Hkv * s.Dh + 1;  // padded rows
      // The window's W query rows only, as the op takes them.
      const auto q = random_vector(s.W * q_stride, seed++);
      const auto kk = random_vector(s.n * k_stride, seed++);
      const float scale = sharpness / std::sqrt(float(s.Dh));
      std::vector<float> want(s.Hq * s.n), want_peak(s.Hq * s.n);
      cpu().window_attention_mass(want.data(), q.data(), q_stride, kk.data(), k_stride, s.n, s.W,
                                  s.Hq, s.Hkv, s.Dh, scale, want_peak.data());

      DeviceArray<float> dq = to_cuda(q), dk = to_cuda(kk);
      DeviceArray<float> out = to_cuda(std::vector<float>(s.Hq * s.n, -1.0f));
      DeviceArray<float> peak = to_cuda(std::vector<float>(s.Hq * s.n, -1.0f));
      cuda().window_attention_mass(out.data(), dq.data(), q_stride, dk.data(), k_stride, s.n, s.W,
                                   s.Hq, s.Hkv, s.Dh, scale, nullptr);
      const auto sums = out.download();
      EXPECT_TRUE(matches_cpu(sums, want, kCudaScoreTolerance));
      EXPECT_TRUE(same_bits(peak.download(), std::vector<float>(s.Hq * s.n, -1.0f)))
          << "written without a peak";

      cuda().window_attention_mass(out.data(), dq.data(), q_stride, dk.data(), k_stride, s.n, s.W,
                                   s.Hq, s.Hkv, s.Dh, scale, peak.data());
      EXPECT_TRUE(same_bits(out.download(), sums)) << "the peak changed the sums, or a rerun did";
      EXPECT_TRUE(matches_cpu(peak.download(), want_peak, kCudaScoreTolerance)) << "peak";
    }
  }
}

// One GQA group computed alone (its heads' columns of q and its KV head's of k, same strides)
// gives its heads' rows of the full call bit for bit: a head's result depends on its own
// inputs only.
TEST_F(CudaWindowAttentionMass, HeadsAreIndependent) {
  const WindowShape s{700, 40, 9, 3, 64};
  const size_t group = s.Hq / s.Hkv, q_stride = s.Hq * s.Dh, k_stride = s.Hkv * s.Dh;
  const auto q = random_vector(s.W * q_stride, 50);
  const auto kk = random_vector(s.n * k_stride, 51);
  const float scale = 2.0f / std::sqrt(float(s.Dh));
  DeviceArray<float> dq = to_cuda(q), dk = to_cuda(kk);
  DeviceArray<float> out(cuda(), s.Hq * s.n), peak(cuda(), s.Hq * s.n);
  cuda().window_attention_mass(out.data(), dq.data(), q_stride, dk.data(), k_stride, s.n, s.W, s.Hq,
                               s.Hkv, s.Dh, scale, peak.data());
  const auto all = out.download(), all_peak = peak.download();
  DeviceArray<float> one(cuda(), group * s.n), one_peak(cuda(), group * s.n);
  for (size_t g = 0; g < s.Hkv; ++g) {
    cuda().window_attention_mass(one.data(), dq.data() + g * group * s.Dh, q_stride,
                                 dk.data() + g * s.Dh, k_stride, s.n, s.W, group, 1, s.Dh, scale,
                                 one_peak.data());
    const auto rows = [&](const std::vector<float>& v) {
      return std::vector<float>(v.begin() + g * group * s.n, v.begin() + (g + 1) * group * s.n);
    };
    EXPECT_TRUE(same_bits(one.download(), rows(all))) << "group " << g;
    EXPECT_TRUE(same_bits(one_peak.download(), rows(all_peak))) << "group " << g;
  }
}

// Strides the CPU does not read (q's with one window row, k's with one key) are not checked.
TEST_F(CudaWindowAttentionMass, AcceptsWhatTheCpuAccepts) {
  const size_t Hq = 3, Dh = 64;
  const auto q = random_vector(Hq * Dh, 60), kk = random_vector(Dh, 61);
  std::vector<float> want(Hq), want_peak(Hq);
  cpu().window_attention_mass(want.data(), q.data(), 0, kk.data(), 0, 1, 1, Hq, 1, Dh, 0.125f,
                              want_peak.data());
  DeviceArray<float> dq = to_cuda(q), dk = to_cuda(kk);
  DeviceArray<float> out(cuda(), Hq), peak(cuda(), Hq);
  cuda().window_attention_mass(out.data(), dq.data(), 0, dk.data(), 0, 1, 1, Hq, 1, Dh, 0.125f,
                               peak.data());
  EXPECT_TRUE(matches_cpu(out.download(), want, kCudaScoreTolerance));
  EXPECT_TRUE(matches_cpu(peak.download(), want_peak, kCudaScoreTolerance));
  // No query heads: nothing to do.
  cuda().window_attention_mass(out.data(), dq.data(), 0, dk.data(), 0, 1, 1, 0, 1, Dh, 0.125f,
                               nullptr);
}

TEST_F(CudaWindowAttentionMass, RejectsWhatTheCpuRejects) {
  // n, W, Hq, Hkv, Dh, q_stride, k_stride and which of out, q, k are null.
  struct Case {
    size_t n, W, Hq, Hkv, Dh, q_stride, k_stride;
    bool null_out = false, null_q = false, null_k = false;
  };
  const Case cases[] = {
      {4, 0, 1, 1, 2, 2, 2},                      // W == 0
      {4, 5, 1, 1, 2, 2, 2},                      // W > n
      {4, 2, 1, 0, 2, 2, 2},                      // Hkv == 0
      {4, 2, 3, 2, 2, 6, 4},                      // Hq % Hkv != 0
      {4, 2, 1, 1, 0, 2, 2},                      // Dh == 0
      {4, 2, 3, 1, 2, 5, 2},                      // q rows overlap
      {4, 2, 3, 3, 2, 6, 5},                      // k rows overlap
      {4, 2, 1, 1, 2, 2, 2, true, false, false},  // no out
      {4, 2, 1, 1, 2, 2, 2, false, true, false},  // no q
      {4, 2, 1, 1, 2, 2, 2, false, false, true},  // no k
  };
  std::vector<float> host(64, 0.5f);
  DeviceArray<float> dev = to_cuda(host);
  for (const Case& c : cases) {
    const auto call = [&](k::Backend& b, float* p) {
      b.window_attention_mass(c.null_out ? nullptr : p, c.null_q ? nullptr : p, c.q_stride,
                              c.null_k ? nullptr : p, c.k_stride, c.n, c.W, c.Hq, c.Hkv, c.Dh, 1.0f,
                              nullptr);
    };
    SCOPED_TRACE(testing::Message()
                 << "n " << c.n << " W " << c.W << " Hq " << c.Hq << " Hkv " << c.Hkv << " Dh "
                 << c.Dh << " strides " << c.q_stride << ", " << c.k_stride);
    EXPECT_TRUE(rejects([&] { call(cpu(), host.data()); }, "window_attention_mass"));
    EXPECT_TRUE(rejects([&] { call(cuda(), dev.data()); }, "window_attention_mass"));
  }
}

// ---- blend_scores -----------------------------------------------------------------------------

TEST_F(CudaBlendScores, MatchesCpuBitForBit) {
  uint32_t seed = 200;
  for (size_t Hq : {1, 3, 9}) {
    for (size_t prefix : {1, 7, 769, 5000}) {
      // Rows longer than the prefix on both sides (entries past it stay), and exactly it.
      for (auto [n_keys, n_window] :
           {std::pair<size_t, size_t>{prefix + 7, prefix + 3}, {prefix, prefix}}) {
        for (bool with_peak : {false, true}) {
          for (float w : {0.5f, 3.0f, 0.1f, 0.0f}) {
            const auto mass = mass_like(Hq * n_keys, seed++);
            const auto peak = mass_like(Hq * n_keys, seed++);
            const auto window_mass = random_vector(Hq * n_window, seed++);
            const auto window_peak = mass_like(Hq * n_window, seed++);
            auto want_mass = mass, want_peak = peak;
            cpu().blend_scores(want_mass.data(), with_peak ? want_peak.data() : nullptr,
                               window_mass.data(), with_peak ? window_peak.data() : nullptr, Hq,
                               n_keys, n_window, prefix, w);
            DeviceArray<float> dmass = to_cuda(mass), dpeak = to_cuda(peak);
            DeviceArray<float> dwmass = to_cuda(window_mass), dwpeak = to_cuda(window_peak);
            cuda().blend_scores(dmass.data(), with_peak ? dpeak.data() : nullptr, dwmass.data(),
                                with_peak ? dwpeak.data() : nullptr, Hq, n_keys, n_window, prefix,
                                w);
            ASSERT_TRUE(same_bits(dmass.download(), want_mass))
                << "Hq " << Hq << " prefix " << prefix << " n_keys " << n_keys << " weight " << w;
            ASSERT_TRUE(same_bits(dpeak.download(), want_peak))
                << "Hq " << Hq << " prefix " << prefix << " n_keys " << n_keys << " weight " << w;
          }
        }
      }
    }
  }
}

TEST_F(CudaBlendScores, RejectsWhatTheCpuRejects) {
  std::vector<float> a(64, 1.0f), b(64, 1.0f);
  DeviceArray<float> da = to_cuda(a), db = to_cuda(b);
  // mass, peak, window_mass, window_peak (null or not), Hq, n_keys, n_window, prefix.
  struct Case {
    bool mass, peak, window_mass, window_peak;
    size_t Hq, n_keys, n_window, prefix;
  };
  const Case rejected[] = {
      {true, false, true, false, 1, 8, 8, 9},   // prefix > n_keys and n_window
      {true, false, true, false, 1, 3, 8, 4},   // prefix > n_keys
      {true, false, true, false, 1, 8, 3, 4},   // prefix > n_window
      {true, true, true, false, 1, 8, 8, 4},    // a peak without a window peak
      {true, false, true, true, 1, 8, 8, 4},    // a window peak without a peak
      {false, false, true, false, 1, 8, 8, 4},  // no mass
      {true, false, false, false, 1, 8, 8, 4},  // no window mass
  };
  const auto call = [](k::Backend& backend, float* x, float* y, const Case& c) {
    backend.blend_scores(c.mass ? x : nullptr, c.peak ? y : nullptr, c.window_mass ? y : nullptr,
                         c.window_peak ? x : nullptr, c.Hq, c.n_keys, c.n_window, c.prefix, 0.5f);
  };
  for (const Case& c : rejected) {
    SCOPED_TRACE(testing::Message() << "Hq " << c.Hq << " n_keys " << c.n_keys << " n_window "
                                    << c.n_window << " prefix " << c.prefix);
    EXPECT_TRUE(rejects([&] { call(cpu(), a.data(), b.data(), c); }, "blend_scores"));
    EXPECT_TRUE(rejects([&] { call(cuda(), da.data(), db.data(), c); }, "blend_scores"));
  }
  // Nothing to blend: no pointers needed.
  cuda().blend_scores(nullptr, nullptr, nullptr, nullptr, 0, 8, 8, 4, 0.5f);
  cuda().blend_scores(nullptr, nullptr, nullptr, nullptr, 3, 8, 8, 0, 0.5f);
  EXPECT_TRUE(same_bits(da.download(), a));
}

// ---- pool_scores ------------------------------------------------------------------------------

TEST_F(CudaPoolScores, MatchesCpuBitForBit) {
  uint32_t seed = 100;
  for (auto [Hq, Hkv] : {std::pair<size_t, size_t>{1, 1}, {3, 1}, {3, 3}, {9, 3}}) {
    for (size_t prefix : {1, 7, 769, 5000}) {
      for (size_t extra : {0, 5}) {  // keys past the prefix (the window's)
        const size_t n_keys = prefix + extra;
        const auto mass = mass_like(Hq * n_keys, seed++);
        DeviceArray<float> dmass = to_cuda(mass);
        DeviceArray<float> scores(cuda(), Hkv * prefix);
        for (size_t sink : {0, 4, 1000}) {
          for (size_t kernel : {1, 5, 7}) {
            for (size_t shift : {0, 1, 3}) {
              if (shift > kernel / 2) continue;
              for (bool max_pool : {true, false}) {
                for (bool gqa_max : {false, true}) {
                  const k::ScorePooling c{sink, kernel, max_pool, shift, gqa_max};
                  std::vector<float> want(Hkv * prefix);
                  cpu().pool_scores(want.data(), mass.data(), n_keys, prefix, Hq, Hkv, c);
                  cuda().pool_scores(scores.data(), dmass.data(), n_keys, prefix, Hq, Hkv, c);
                  ASSERT_TRUE(same_bits(scores.download(), want))
                      << "Hq " << Hq << " Hkv " << Hkv << " prefix " << prefix << " n_keys "
                      << n_keys << " sink " << sink << " kernel " << kernel << " shift " << shift
                      << (max_pool ? " max" : " avg") << (gqa_max ? " gqa max" : " gqa mean");
                }
              }
            }
          }
        }
        EXPECT_TRUE(same_bits(dmass.download(), mass)) << "the input was changed";
      }
    }
  }
}

// scores may alias mass: written over its start (the in-place call) or over a later row.
TEST_F(CudaPoolScores, OverlappingScoresMatchCpuBitForBit) {
  const size_t Hq = 9, Hkv = 3, n_keys = 800, prefix = 769;
  for (size_t offset : {size_t{0}, size_t{1}, n_keys}) {
    for (bool max_pool : {true, false}) {
      const k::ScorePooling c{4, 7, max_pool, 1, !max_pool};
      const auto mass = mass_like(Hq * n_keys, 7);
      auto want = mass;
      cpu().pool_scores(want.data() + offset, want.data(), n_keys, prefix, Hq, Hkv, c);
      DeviceArray<float> dmass = to_cuda(mass);
      cuda().pool_scores(dmass.data() + offset, dmass.data(), n_keys, prefix, Hq, Hkv, c);
      EXPECT_TRUE(same_bits(dmass.download(), want))
          << "scores at mass + " << offset << (max_pool ? " max" : " avg");
    }
  }
}

TEST_F(CudaPoolScores, RejectsWhatTheCpuRejects) {
  std::vector<float> a(64, 1.0f), b(64, 1.0f);
  DeviceArray<float> da = to_cuda(a), db = to_cuda(b);
  struct Case {
    bool scores, mass;
    size_t n_keys, prefix, Hq, Hkv;
    k::ScorePooling pooling;
  };
  const k::ScorePooling ok{0, 7, true, 0, false};
  const Case rejected[] = {
      {true, true, 8, 8, 3, 2, ok},                                     // Hq % Hkv != 0
      {true, true, 8, 8, 1, 0, ok},                                     // Hkv == 0
      {true, true, 8, 9, 1, 1, ok},                                     // prefix > n_keys
      {true, true, 8, 8, 1, 1, k::ScorePooling{0, 0, true, 0, false}},  // kernel == 0
      {true, true, 8, 8, 1, 1, k::ScorePooling{0, 3, true, 2, false}},  // shift > kernel / 2
      {false, true, 8, 8, 1, 1, ok},                                    // no scores
      {true, false, 8, 8, 1, 1, ok},                                    // no mass
  };
  const auto call = [](k::Backend& backend, float* x, float* y, const Case& c) {
    backend.pool_scores(c.scores ? x : nullptr, c.mass ? y : nullptr, c.n_keys, c.prefix, c.Hq,
                        c.Hkv, c.pooling);
  };
  for (const Case& c : rejected) {
    SCOPED_TRACE(testing::Message()
                 << "n_keys " << c.n_keys << " prefix " << c.prefix << " Hq " << c.Hq << " Hkv "
                 << c.Hkv << " kernel " << c.pooling.kernel << " shift " << c.pooling.shift);
    EXPECT_TRUE(rejects([&] { call(cpu(), a.data(), b.data(), c); }, "pool_scores"));
    EXPECT_TRUE(rejects([&] { call(cuda(), da.data(), db.data(), c); }, "pool_scores"));
  }
  // Nothing to pool: no pointers needed.
  cuda().pool_scores(nullptr, nullptr, 8, 0, 3, 1, ok);
  cuda().pool_scores(nullptr, nullptr, 8, 8, 0, 1, ok);
  EXPECT_TRUE(same_bits(da.download(), a));
}

}  // namespace

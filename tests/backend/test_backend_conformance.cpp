// Every Backend method against a host reference, on every backend of the build (backend_fixture.h):
// memory and transfers, the row gather, the forward's ops. Data enters backend memory through
// upload() and leaves through download() only. Exact ops are compared bit for bit; float ops
// against double references within the tolerances of tests/unit/tolerances.h and
// kernels/quant_tolerance.h. The KV ops: test_backend_kv.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <stdexcept>
#include <tuple>
#include <vector>

#include "kernels/quant_tolerance.h"
#include "tests/backend/backend_fixture.h"
#include "tests/unit/random_data.h"
#include "tests/unit/tolerances.h"

namespace {

namespace k = adakv::kernels;
using adakv::test::BackendTest;
using adakv::test::close_to;
using adakv::test::DeviceArray;
using adakv::test::random_vector;
using adakv::test::rejects;
using adakv::test::same_bits;

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

class BackendConformance : public BackendTest {};

// ---- Memory and transfers ---------------------------------------------------------------------

TEST_P(BackendConformance, UploadAndDownloadRoundTrip) {
  uint32_t seed = 1;
  for (size_t n : {1, 7, 769, 1 << 20}) {
    const auto host = random_bytes(n, seed++);
    DeviceArray<uint8_t> dev = to_device(host);
    EXPECT_EQ(dev.download(), host) << n << " bytes";
    // Part of it, at an odd offset each way.
    const auto part = random_bytes(n / 2, seed++);
    backend().upload(dev.data() + n / 3, part.data(), part.size());
    std::vector<uint8_t> got(part.size());
    backend().download(got.data(), dev.data() + n / 3, got.size());
    EXPECT_EQ(got, part) << n << " bytes";
  }
  k::Buffer empty = backend().allocate(0);
  EXPECT_EQ(empty.bytes(), 0u);
  backend().upload(empty.data(), nullptr, 0);
  backend().synchronize();
}

TEST_P(BackendConformance, AllocationsAreDisjointAndWholeSizeUsable) {
  std::vector<k::Buffer> buffers;
  uint32_t seed = 10;
  for (size_t n : {1, 7, 769, 64 << 10, 3 << 20, 5}) buffers.push_back(backend().allocate(n));
  for (size_t i = 0; i < buffers.size(); ++i) {
    ASSERT_NE(buffers[i].data(), nullptr);
    const auto a = reinterpret_cast<uintptr_t>(buffers[i].data());
    for (size_t j = 0; j < i; ++j) {
      const auto b = reinterpret_cast<uintptr_t>(buffers[j].data());
      EXPECT_TRUE(a + buffers[i].bytes() <= b || b + buffers[j].bytes() <= a)
          << "buffers " << j << " and " << i << " overlap";
    }
  }
  // Every byte of every buffer holds its own value.
  std::vector<std::vector<uint8_t>> want;
  for (auto& b : buffers) {
    want.push_back(random_bytes(b.bytes(), seed++));
    backend().upload(b.data(), want.back().data(), b.bytes());
  }
  for (size_t i = 0; i < buffers.size(); ++i) {
    std::vector<uint8_t> got(buffers[i].bytes());
    backend().download(got.data(), buffers[i].data(), got.size());
    EXPECT_EQ(got, want[i]) << "buffer " << i;
  }
}

TEST_P(BackendConformance, ConstantHoldsTheHostBytes) {
  uint32_t seed = 20;
  for (size_t n : {1, 7, 769}) {
    const auto host = random_bytes(n, seed++);  // outlives the buffer (the CPU's is a view)
    k::Buffer c = backend().constant(host.data(), host.size());
    ASSERT_EQ(c.bytes(), n);
    std::vector<uint8_t> got(n);
    backend().download(got.data(), c.data(), n);
    EXPECT_EQ(got, host);
  }
}

TEST_P(BackendConformance, CopyAndFill) {
  for (size_t n : {1, 7, 769}) {
    const auto host = random_bytes(n, 30 + uint32_t(n));
    DeviceArray<uint8_t> src = to_device(host);
    DeviceArray<uint8_t> dst = filled<uint8_t>(n + 2, 0x11);
    backend().copy(dst.data() + 1, src.data(), n);
    std::vector<uint8_t> want(n + 2, 0x11);
    std::copy(host.begin(), host.end(), want.begin() + 1);
    EXPECT_EQ(dst.download(), want) << n;
    backend().fill(dst.data() + 1, 0xA5, n);
    std::fill(want.begin() + 1, want.end() - 1, uint8_t{0xA5});
    EXPECT_EQ(dst.download(), want) << n;
  }
}

TEST_P(BackendConformance, RunOnHostSeesTheBackendsMemory) {
  DeviceArray<int32_t> dev = to_device(std::vector<int32_t>{1, 2, 3});
  int32_t* p = dev.data();
  if (!adakv::test::host_addressable(GetParam())) {
    EXPECT_THROW(backend().run_on_host([] {}), std::logic_error);
    return;
  }
  int32_t seen = 0;
  backend().run_on_host([&] {
    seen = p[0] + p[1] + p[2];
    p[1] = 40;
  });
  EXPECT_EQ(seen, 6);
  EXPECT_EQ(dev.download(), (std::vector<int32_t>{1, 40, 3}));
  // Ops may be issued from the task.
  backend().run_on_host([&] { backend().fill(p, 0, 4); });
  EXPECT_EQ(dev.download(), (std::vector<int32_t>{0, 40, 3}));
}

TEST_P(BackendConformance, GatherRows) {
  std::mt19937 rng(40);
  for (size_t n : {1, 7, 769}) {
    const size_t row_bytes = 7, src_stride = 9, dst_stride = 13, src_rows = 50;
    std::vector<int32_t> rows(n);
    for (auto& r : rows) r = static_cast<int32_t>(rng() % src_rows);  // repeats included
    const auto src_host = random_bytes(src_rows * src_stride, uint32_t(n));
    DeviceArray<uint8_t> src = to_device(src_host);
    DeviceArray<uint8_t> dst = filled<uint8_t>(n * dst_stride, 0xEE);
    DeviceArray<int32_t> dev_rows = to_device(rows);
    backend().gather_rows(dst.data(), dst_stride, src.data(), src_stride, row_bytes,
                          dev_rows.data(), n);
    std::vector<uint8_t> want(n * dst_stride, 0xEE);
    for (size_t i = 0; i < n; ++i) {
      std::memcpy(&want[i * dst_stride], &src_host[rows[i] * src_stride], row_bytes);
    }
    EXPECT_EQ(dst.download(), want) << n << " rows";
  }
  DeviceArray<int32_t> bad = to_device(std::vector<int32_t>{0, -1});
  DeviceArray<uint8_t> src = filled<uint8_t>(16, 0), dst = filled<uint8_t>(16, 0);
  EXPECT_TRUE(
      rejects([&] { backend().gather_rows(dst.data(), 4, src.data(), 4, 4, bad.data(), 2); },
              "gather_rows"));
}

// ---- The forward's ops ------------------------------------------------------------------------

TEST_P(BackendConformance, Rmsnorm) {
  uint32_t seed = 50;
  for (size_t rows : {1, 7}) {
    for (size_t dim : {1, 7, 769}) {
      const auto x = random_vector(rows * dim, seed++);
      const auto w = random_vector(dim, seed++);
      DeviceArray<float> dx = to_device(x), dw = to_device(w), out = filled(rows * dim, -1.0f);
      backend().rmsnorm(out.data(), dx.data(), dw.data(), rows, dim, 1e-5f);
      std::vector<double> want(rows * dim);
      for (size_t r = 0; r < rows; ++r) {
        double ss = 0;
        for (size_t i = 0; i < dim; ++i) ss += double(x[r * dim + i]) * x[r * dim + i];
        const double inv = 1.0 / std::sqrt(ss / dim + 1e-5);
        for (size_t i = 0; i < dim; ++i) want[r * dim + i] = x[r * dim + i] * inv * w[i];
      }
      EXPECT_TRUE(close_to(out.download(), want, adakv::test::kF32Rel)) << rows << " x " << dim;
      // In place.
      backend().rmsnorm(dx.data(), dx.data(), dw.data(), rows, dim, 1e-5f);
      EXPECT_TRUE(same_bits(dx.download(), out.download())) << rows << " x " << dim;
    }
  }
  DeviceArray<float> x = filled(4, 1.0f);
  EXPECT_TRUE(
      rejects([&] { backend().rmsnorm(x.data(), x.data(), x.data(), 1, 0, 1e-5f); }, "rmsnorm"));
}

// fp16 bits of sign * 2^(e - 15) * (1 + m / 1024): a finite scale without a converter.
uint16_t fp16_bits(bool negative, int e, int m) {
  return static_cast<uint16_t>((negative ? 0x8000 : 0) | (e << 10) | m);
}

// Random weights of format f: random bytes with every fp16 scale field a plausible finite value.
std::vector<uint8_t> random_weights(k::WeightFormat f, size_t N, size_t K, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> w(N * k::row_bytes(f, K));
  for (auto& b : w) b = static_cast<uint8_t>(rng());
  auto put = [&](uint8_t* p, int lo, int hi) {
    const uint16_t h = fp16_bits(rng() & 1, lo + int(rng() % (hi - lo + 1)), int(rng() % 1024));
    std::memcpy(p, &h, 2);
  };
  switch (f) {
    case k::WeightFormat::kF32:
      for (size_t i = 0; i < N * K; ++i) {
        const float v = std::ldexp(float(int(rng() % 2001) - 1000), -9);
        std::memcpy(&w[4 * i], &v, 4);
      }
      break;
    case k::WeightFormat::kF16:
      for (size_t i = 0; i < N * K; ++i) put(&w[2 * i], 12, 16);  // |w| in [1/8, 4)
      break;
    case k::WeightFormat::kBF16:
      for (size_t i = 0; i < N * K; ++i) w[2 * i + 1] = static_cast<uint8_t>(0x3C + rng() % 8);
      break;
    default: {
      const size_t bb = k::block_bytes(f);
      for (size_t off = 0; off < w.size(); off += bb) {
        uint8_t* b = &w[off];
        if (f == k::WeightFormat::kQ6_K) {
          put(b + 208, 4, 6);
        } else {
          put(b, 8, 10);  // d, |d| in [2^-7, 2^-4)
          if (f == k::WeightFormat::kQ4_1 || f == k::WeightFormat::kQ4_K) put(b + 2, 8, 10);
        }
      }
    }
  }
  return w;
}

TEST_P(BackendConformance, MatmulQuant) {
  // The host's dequantization (the embedding lookup of every row) is the reference's W.
  const k::WeightFormat formats[] = {k::WeightFormat::kF32,  k::WeightFormat::kF16,
                                     k::WeightFormat::kBF16, k::WeightFormat::kQ8_0,
                                     k::WeightFormat::kQ4_0, k::WeightFormat::kQ4_1,
                                     k::WeightFormat::kQ4_K, k::WeightFormat::kQ6_K};
  uint32_t seed = 60;
  for (k::WeightFormat f : formats) {
    const size_t K = k::block_elements(f) == 1 ? 7 : k::block_elements(f) == 32 ? 96 : 256;
    const k::QuantTolerance tol = k::quant_tolerance(f);
    for (size_t N : {1, 7, 769}) {
      const auto w = random_weights(f, N, K, seed++);
      std::vector<int32_t> all(N);
      std::iota(all.begin(), all.end(), 0);
      std::vector<float> wf(N * K);
      k::check(k::dequantize_rows(wf.data(), w.data(), f, all.data(), N, N, K), "dequantize_rows");
      DeviceArray<uint8_t> dw = to_device(w);
      for (size_t M : {1, 7, 33}) {
        SCOPED_TRACE(testing::Message()
                     << k::weight_format_name(f) << " M " << M << " N " << N << " K " << K);
        const auto x = random_vector(M * K, seed++);
        DeviceArray<float> dx = to_device(x), dy = filled(M * (N + 1), -7.0f);
        k::MatmulOptions options;
        options.ldy = N + 1;
        backend().matmul_quant(dy.data(), dx.data(), dw.data(), f, M, N, K, options);
        const auto y = dy.download();
        for (size_t m = 0; m < M; ++m) {
          double amax_step[8] = {};  // per 32-element block of x's row: max |x| / 127
          for (size_t b = 0; b < (K + 31) / 32; ++b) {
            for (size_t i = b * 32; i < std::min(K, b * 32 + 32); ++i) {
              amax_step[b] = std::max(amax_step[b], std::fabs(double(x[m * K + i])) / 127.0);
            }
          }
          for (size_t n = 0; n < N; ++n) {
            double ref = 0, mag = 0, act = 0;
            for (size_t i = 0; i < K; ++i) {
              const double p = double(x[m * K + i]) * wf[n * K + i];
              ref += p;
              mag += std::fabs(p);
              act += std::fabs(double(wf[n * K + i])) * amax_step[i / 32];
            }
            const double bound = tol.act * act + tol.rel * mag + 1e-30;
            ASSERT_LE(std::fabs(y[m * (N + 1) + n] - ref), bound) << "y[" << m << "][" << n << "]";
          }
          ASSERT_EQ(y[m * (N + 1) + N], -7.0f) << "the gap between rows was written";
        }
      }
    }
  }
  DeviceArray<float> x = filled(32, 1.0f), y = filled(1, 0.0f);
  DeviceArray<uint8_t> w = filled<uint8_t>(34, 0);
  EXPECT_TRUE(rejects(
      [&] {
        backend().matmul_quant(y.data(), x.data(), w.data(), k::WeightFormat::kQ8_0, 1, 1, 31,
                               k::MatmulOptions{});
      },
      "matmul_quant"));
}

TEST_P(BackendConformance, EmbedRowsAndShards) {
  uint32_t seed = 70;
  for (k::WeightFormat f : {k::WeightFormat::kF32, k::WeightFormat::kQ8_0}) {
    const size_t vocab = 11, dim = f == k::WeightFormat::kF32 ? 7 : 64;
    const auto table = random_weights(f, vocab, dim, seed++);
    const size_t row = k::row_bytes(f, dim);
    const std::vector<int32_t> ids = {10, 0, 3, 3, 7, 1, 9};
    std::vector<float> want(ids.size() * dim);
    k::check(k::dequantize_rows(want.data(), table.data(), f, ids.data(), ids.size(), vocab, dim),
             "dequantize_rows");
    DeviceArray<uint8_t> dt = to_device(table);
    DeviceArray<int32_t> did = to_device(ids);
    DeviceArray<float> out = filled(ids.size() * dim, -1.0f);
    backend().embed_rows(out.data(), dt.data(), f, k::WeightLayout::kRows, did.data(), ids.size(),
                         vocab, dim);
    EXPECT_TRUE(same_bits(out.download(), want)) << k::weight_format_name(f);

    // Shards of 4, 4 and 3 rows: each row from its shard, zeros elsewhere.
    std::vector<float> sum(want.size(), 0.0f);
    for (size_t begin = 0; begin < vocab; begin += 4) {
      const size_t rows = std::min<size_t>(4, vocab - begin);
      const std::vector<uint8_t> shard(table.begin() + begin * row,
                                       table.begin() + (begin + rows) * row);
      DeviceArray<uint8_t> ds = to_device(shard);
      backend().embed_shard_rows(out.data(), ds.data(), f, k::WeightLayout::kRows, did.data(),
                                 ids.size(), begin, rows, vocab, dim);
      const auto got = out.download();
      for (size_t t = 0; t < ids.size(); ++t) {
        const bool mine = size_t(ids[t]) >= begin && size_t(ids[t]) < begin + rows;
        for (size_t i = 0; i < dim; ++i) {
          ASSERT_EQ(got[t * dim + i], mine ? want[t * dim + i] : 0.0f) << "token " << t;
          sum[t * dim + i] += got[t * dim + i];
        }
      }
    }
    EXPECT_TRUE(same_bits(sum, want));
  }
  DeviceArray<float> table = filled(4 * 2, 1.0f), out = filled(2, 0.0f);
  DeviceArray<int32_t> bad = to_device(std::vector<int32_t>{4});
  EXPECT_TRUE(rejects(
      [&] {
        backend().embed_rows(out.data(), table.data(), k::WeightFormat::kF32,
                             k::WeightLayout::kRows, bad.data(), 1, 4, 2);
      },
      "embed_rows"));
  EXPECT_TRUE(rejects(
      [&] {
        backend().embed_shard_rows(out.data(), table.data(), k::WeightFormat::kF32,
                                   k::WeightLayout::kRows, bad.data(), 1, 0, 4, 4, 2);
      },
      "embed_shard_rows"));
}

TEST_P(BackendConformance, RopeAdjacent) {
  for (size_t n_heads : {1, 3}) {
    for (size_t rot_dim : {4, 8}) {
      const size_t T = 7, Dh = 8, stride = n_heads * Dh + 5;
      const auto x = random_vector(T * stride, uint32_t(80 + n_heads + rot_dim));
      const std::vector<int32_t> pos = {0, 1, 5, 16, 17, 300, 8191};
      DeviceArray<float> dx = to_device(x);
      DeviceArray<int32_t> dp = to_device(pos);
      backend().rope_adjacent(dx.data(), dp.data(), T, n_heads, Dh, stride,
                              k::rope_frequencies(10000.0f, rot_dim));
      std::vector<double> want(x.begin(), x.end());
      for (size_t t = 0; t < T; ++t) {
        for (size_t h = 0; h < n_heads; ++h) {
          for (size_t i = 0; 2 * i < rot_dim; ++i) {
            const double angle = pos[t] * std::pow(10000.0, -2.0 * i / rot_dim);
            const size_t at = t * stride + h * Dh + 2 * i;
            want[at] = x[at] * std::cos(angle) - x[at + 1] * std::sin(angle);
            want[at + 1] = x[at] * std::sin(angle) + x[at + 1] * std::cos(angle);
          }
        }
      }
      // Angles up to 8191 radians in float32: an absolute tolerance of the argument's rounding.
      const auto got = dx.download();
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_NEAR(got[i], want[i], 2e-3)
            << "n_heads " << n_heads << " rot_dim " << rot_dim << " element " << i;
      }
    }
  }
}

TEST_P(BackendConformance, SwigluAndAdd) {
  for (size_t T : {1, 7}) {
    for (size_t F : {1, 7, 769}) {
      const auto gu = random_vector(T * 2 * F, uint32_t(T * 1000 + F), 3.0f);
      DeviceArray<float> dgu = to_device(gu), out = filled(T * F, -1.0f);
      backend().swiglu(out.data(), dgu.data(), T, F);
      std::vector<double> want(T * F);
      for (size_t t = 0; t < T; ++t) {
        for (size_t i = 0; i < F; ++i) {
          const double g = gu[t * 2 * F + i], u = gu[t * 2 * F + F + i];
          want[t * F + i] = g / (1 + std::exp(-g)) * u;
        }
      }
      EXPECT_TRUE(close_to(out.download(), want, adakv::test::kF32Rel)) << T << " x " << F;
    }
  }
  for (size_t n : {1, 7, 769}) {
    const auto a = random_vector(n, uint32_t(n)), b = random_vector(n, uint32_t(n + 1));
    std::vector<float> want(n);
    for (size_t i = 0; i < n; ++i) want[i] = a[i] + b[i];
    DeviceArray<float> da = to_device(a), db = to_device(b), out = filled(n, 0.0f);
    backend().add(out.data(), da.data(), db.data(), n);
    EXPECT_TRUE(same_bits(out.download(), want)) << n;
    backend().add(da.data(), da.data(), db.data(), n);  // in place
    EXPECT_TRUE(same_bits(da.download(), want)) << n;
  }
}

// The bias of a linear layer on its output rows: exact (one float addition per element), the
// columns between n and ldy untouched.
TEST_P(BackendConformance, AddBias) {
  uint32_t seed = 50;
  for (auto [rows, n, ldy] : {std::tuple<size_t, size_t, size_t>{1, 1, 1},
                              {7, 5, 5},
                              {3, 769, 1000},
                              {129, 1152, 1152},
                              {2, 896, 1152}}) {
    const auto y = random_vector(rows * ldy, seed++, 4.0f), bias = random_vector(n, seed++);
    std::vector<float> want = y;
    for (size_t r = 0; r < rows; ++r) {
      for (size_t i = 0; i < n; ++i) want[r * ldy + i] = y[r * ldy + i] + bias[i];
    }
    DeviceArray<float> dy = to_device(y), db = to_device(bias);
    backend().add_bias(dy.data(), db.data(), rows, n, ldy);
    EXPECT_TRUE(same_bits(dy.download(), want)) << rows << " x " << n << " (ldy " << ldy << ")";
  }
  DeviceArray<float> dy = filled(8, 1.0f), db = filled(4, 2.0f);
  backend().add_bias(dy.data(), db.data(), 0, 4, 4);  // no rows: nothing to do
  EXPECT_TRUE(same_bits(dy.download(), std::vector<float>(8, 1.0f)));
  EXPECT_TRUE(rejects([&] { backend().add_bias(dy.data(), db.data(), 2, 4, 3); }, "add_bias"));
}

TEST_P(BackendConformance, InterleaveShards) {
  for (auto [shards, rows, cols] :
       {std::tuple<size_t, size_t, size_t>{1, 1, 1}, {3, 7, 5}, {2, 1, 769}}) {
    const auto gathered = random_vector(shards * rows * cols, uint32_t(shards + rows + cols));
    std::vector<float> want(rows * shards * cols);
    for (size_t s = 0; s < shards; ++s)
      for (size_t t = 0; t < rows; ++t)
        for (size_t c = 0; c < cols; ++c)
          want[t * shards * cols + s * cols + c] = gathered[(s * rows + t) * cols + c];
    DeviceArray<float> dg = to_device(gathered), out = filled(want.size(), 0.0f);
    backend().interleave_shards(out.data(), dg.data(), shards, rows, cols);
    EXPECT_TRUE(same_bits(out.download(), want)) << shards << " x " << rows << " x " << cols;
  }
}

TEST_P(BackendConformance, AttentionCausal) {
  // (T, n_kv, Hq, Hkv, Dh): one decoded token, a chunk crossing 16-token boundaries, prefill from
  // empty, GQA and not, both kernel paths (T >= 16 with Dh 16/32/64, and the rest).
  const std::tuple<size_t, size_t, size_t, size_t, size_t> cases[] = {
      {1, 1, 1, 1, 1}, {1, 33, 3, 1, 8}, {7, 17, 3, 3, 7}, {17, 33, 6, 3, 64}, {33, 33, 3, 1, 16}};
  uint32_t seed = 90;
  for (auto [T, n_kv, Hq, Hkv, Dh] : cases) {
    const size_t q_stride = Hq * Dh + 3, kv_stride = Hkv * Dh + 1, out_stride = Hq * Dh + 2;
    const auto q = random_vector(T * q_stride, seed++, 2.0f);
    const auto kc = random_vector(n_kv * kv_stride, seed++, 2.0f);
    const auto vc = random_vector(n_kv * kv_stride, seed++);
    const float scale = 1.0f / std::sqrt(float(Dh));
    DeviceArray<float> dq = to_device(q), dk = to_device(kc), dv = to_device(vc);
    DeviceArray<float> out = filled(T * out_stride, 777.0f);
    backend().attention_causal(out.data(), dq.data(), dk.data(), dv.data(), T, n_kv, Hq, Hkv, Dh,
                               q_stride, kv_stride, out_stride, scale);
    const auto got = out.download();
    std::vector<float> got_heads;
    std::vector<double> want;
    const size_t group = Hq / Hkv;
    for (size_t t = 0; t < T; ++t) {
      for (size_t h = 0; h < Hq; ++h) {
        const size_t g = h / group, visible = n_kv - T + t + 1;
        std::vector<double> s(visible);
        double mx = -INFINITY, sum = 0;
        for (size_t j = 0; j < visible; ++j) {
          double d = 0;
          for (size_t i = 0; i < Dh; ++i)
            d += double(q[t * q_stride + h * Dh + i]) * kc[j * kv_stride + g * Dh + i];
          mx = std::max(mx, s[j] = d * scale);
        }
        for (auto& e : s) sum += (e = std::exp(e - mx));
        for (size_t i = 0; i < Dh; ++i) {
          double acc = 0;
          for (size_t j = 0; j < visible; ++j) acc += s[j] * vc[j * kv_stride + g * Dh + i];
          want.push_back(acc / sum);
          got_heads.push_back(got[t * out_stride + h * Dh + i]);
        }
      }
      for (size_t x = Hq * Dh; x < out_stride; ++x) ASSERT_EQ(got[t * out_stride + x], 777.0f);
    }
    EXPECT_TRUE(close_to(got_heads, want, adakv::test::kF32AttentionRel))
        << "T " << T << " n_kv " << n_kv << " Hq " << Hq << " Hkv " << Hkv << " Dh " << Dh;
  }
}

TEST_P(BackendConformance, WindowAttentionMass) {
  struct Shape {
    size_t n, W, Hq, Hkv, Dh;
  };
  const Shape shapes[] = {{1, 1, 1, 1, 1}, {7, 7, 3, 3, 5}, {17, 1, 3, 1, 8}, {33, 5, 6, 3, 16}};
  uint32_t seed = 100;
  for (const Shape& s : shapes) {
    const size_t q_stride = s.Hq * s.Dh + 3, k_stride = s.Hkv * s.Dh + 1;
    const auto q = random_vector(s.W * q_stride, seed++);
    const auto kk = random_vector(s.n * k_stride, seed++);
    const float scale = 2.0f / std::sqrt(float(s.Dh));
    std::vector<double> want(s.Hq * s.n, 0.0), want_peak(s.Hq * s.n, 0.0);
    const size_t group = s.Hq / s.Hkv;
    for (size_t h = 0; h < s.Hq; ++h) {
      for (size_t w = 0; w < s.W; ++w) {
        const size_t i = s.n - s.W + w;  // the query's position
        std::vector<double> p(i + 1);
        double m = -INFINITY, sum = 0;
        for (size_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (size_t d = 0; d < s.Dh; ++d)
            dot += double(q[w * q_stride + h * s.Dh + d]) * kk[j * k_stride + h / group * s.Dh + d];
          m = std::max(m, p[j] = dot * scale);
        }
        for (auto& x : p) sum += (x = std::exp(x - m));
        for (size_t j = 0; j <= i; ++j) {
          want[h * s.n + j] += p[j] / sum;
          want_peak[h * s.n + j] = std::max(want_peak[h * s.n + j], p[j] / sum);
        }
      }
    }
    DeviceArray<float> dq = to_device(q), dk = to_device(kk);
    DeviceArray<float> out = filled(s.Hq * s.n, -1.0f), peak = filled(s.Hq * s.n, -1.0f);
    backend().window_attention_mass(out.data(), dq.data(), q_stride, dk.data(), k_stride, s.n, s.W,
                                    s.Hq, s.Hkv, s.Dh, scale, nullptr);
    const auto sum_only = out.download();
    // Each entry is a sum of at most W probabilities: relative to W.
    EXPECT_TRUE(close_to(sum_only, want, adakv::test::kF32Rel * s.W)) << "n " << s.n;
    backend().window_attention_mass(out.data(), dq.data(), q_stride, dk.data(), k_stride, s.n, s.W,
                                    s.Hq, s.Hkv, s.Dh, scale, peak.data());
    EXPECT_TRUE(same_bits(out.download(), sum_only)) << "the peak changed the sums";
    EXPECT_TRUE(close_to(peak.download(), want_peak, adakv::test::kF32Rel)) << "n " << s.n;
  }
  DeviceArray<float> x = filled(64, 0.0f);
  EXPECT_TRUE(rejects(
      [&] {
        backend().window_attention_mass(x.data(), x.data(), 2, x.data(), 2, 4, 0, 1, 1, 2, 1.0f,
                                        nullptr);
      },
      "window_attention_mass"));
}

ADAKV_INSTANTIATE_BACKENDS(BackendConformance);

}  // namespace

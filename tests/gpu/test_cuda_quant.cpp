// See tests/gpu/CMakeLists.txt.
// The CUDA backend's quantized-weight group (matmul_quant, embed_rows, embed_shard_rows) against
// the CPU backend, every weight format:
//  - matmul_quant on awkward shapes (M = 1, 7, 33, 300; N = 1, 33, 130 and 4099, not multiples of
//    the tiles; K one block and several) is bit for bit one FMA chain in k order over the CPU's
//    dequantized weights (the kernel's definition, kernels/cuda/quant_tiles.cuh) and within
//    kCudaMatmulTolerance of the CPU's float paths (kFloatDots, kFloatGemm); kAuto, kFloatGemm
//    and kFloatDots give the same bits; ldy > N leaves the padding alone; accumulate adds;
//  - batch invariance: a row of an M-row call has the bits of the same row alone, of a small
//    batch, of any row grouping, and a column those of a call on a slice of W;
//  - the embeddings are the CPU's rows bit for bit (rows and interleaved layouts, shards);
//  - what the CPU rejects throws std::invalid_argument naming the op (ids checked on the
//    device, before anything is written); the paths without a kernel throw std::runtime_error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/quant.h"
#include "tests/gpu/cuda_fixture.h"
#include "tests/unit/random_data.h"

namespace {

namespace k = adakv::kernels;
using adakv::test::CudaBackendTest;
using adakv::test::DeviceArray;
using adakv::test::kCudaMatmulTolerance;
using adakv::test::matches_cpu;
using adakv::test::random_vector;
using adakv::test::rejects;
using adakv::test::same_bits;
using k::MatmulPath;
using k::WeightFormat;
using k::WeightLayout;

class CudaMatmulQuant : public CudaBackendTest {};
class CudaEmbedRows : public CudaBackendTest {};
class CudaEmbedShardRows : public CudaBackendTest {};

uint32_t to_bits(float x) {
  uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

// N rows of K elements of format f: random quants with finite fp16 scales of magnitude
// 2^-9..2^-4 (the float formats: normal values).
std::vector<uint8_t> random_weights(WeightFormat f, size_t N, size_t K, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> w(N * k::row_bytes(f, K));
  for (auto& b : w) b = static_cast<uint8_t>(rng());
  auto half = [&](int exp_lo, int exp_hi) {
    const uint32_t exp = exp_lo + rng() % (exp_hi - exp_lo + 1);
    return static_cast<uint16_t>((rng() & 1) << 15 | exp << 10 | (rng() & 0x3FF));
  };
  auto put = [](uint8_t* p, uint16_t h) { std::memcpy(p, &h, 2); };
  if (f == WeightFormat::kF32) {
    const auto v = random_vector(N * K, seed);
    std::memcpy(w.data(), v.data(), w.size());
    return w;
  }
  if (f == WeightFormat::kF16 || f == WeightFormat::kBF16) {
    const auto v = random_vector(N * K, seed);
    for (size_t i = 0; i < N * K; ++i) {
      put(w.data() + 2 * i,
          f == WeightFormat::kF16 ? half(10, 16) : static_cast<uint16_t>(to_bits(v[i]) >> 16));
    }
    return w;
  }
  const size_t bb = k::block_bytes(f);
  for (size_t off = 0; off < w.size(); off += bb) {
    uint8_t* b = w.data() + off;
    switch (f) {
      case WeightFormat::kQ8_0:
      case WeightFormat::kQ4_0:
      case WeightFormat::kQ5_0:
        put(b, half(6, 11));
        break;
      case WeightFormat::kQ4_1:
      case WeightFormat::kQ5_1:
      case WeightFormat::kQ4_K:
      case WeightFormat::kQ5_K:
        put(b, half(6, 11));
        put(b + 2, half(6, 11));
        break;
      case WeightFormat::kQ6_K:
        put(b + 208, half(3, 8));
        break;
      default:
        break;
    }
  }
  return w;
}

// Rows [0, N) of host weights decoded by the CPU backend.
std::vector<float> cpu_rows(WeightFormat f, const std::vector<uint8_t>& w, size_t N, size_t K) {
  std::vector<int32_t> ids(N);
  for (size_t n = 0; n < N; ++n) ids[n] = static_cast<int32_t>(n);
  std::vector<float> out(N * K);
  k::cpu_backend().embed_rows(out.data(), w.data(), f, WeightLayout::kRows, ids.data(), N, N, K);
  return out;
}

// The kernel's definition: per output acc = fma(x[m][k], W[n][k], acc), k = 0..K-1, from +0.
std::vector<float> fma_chain(const std::vector<float>& x, const std::vector<float>& wf, size_t M,
                             size_t N, size_t K) {
  std::vector<float> y(M * N);
  for (size_t m = 0; m < M; ++m) {
    for (size_t n = 0; n < N; ++n) {
      float acc = 0.0f;
      for (size_t i = 0; i < K; ++i) acc = std::fma(x[m * K + i], wf[n * K + i], acc);
      y[m * N + n] = acc;
    }
  }
  return y;
}

std::vector<size_t> ks_for(WeightFormat f) {
  switch (k::block_elements(f)) {
    case 1:
      return {1, 7, 576};
    case 32:
      return {32, 576};
    default:
      return {256, 1536};
  }
}

std::string label(WeightFormat f, size_t M, size_t N, size_t K) {
  return std::string(k::weight_format_name(f)) + " M=" + std::to_string(M) +
         " N=" + std::to_string(N) + " K=" + std::to_string(K);
}

k::MatmulOptions on_path(MatmulPath path) {
  k::MatmulOptions o;
  o.path = path;
  return o;
}

// ---- matmul_quant -------------------------------------------------------------------------

TEST_F(CudaMatmulQuant, MatchesCpuOnEveryFormat) {
  uint32_t seed = 1;
  for (WeightFormat f : k::kAllWeightFormats) {
    for (size_t K : ks_for(f)) {
      for (size_t N : {1, 33, 130}) {
        const auto w = random_weights(f, N, K, seed++);
        const auto wf = cpu_rows(f, w, N, K);
        DeviceArray<uint8_t> dw = to_cuda(w);
        for (size_t M : {1, 7, 33, 300}) {
          const std::string at = label(f, M, N, K);
          const auto x = random_vector(M * K, seed++);
          DeviceArray<float> dx = to_cuda(x);
          DeviceArray<float> y(cuda(), M * N);
          cuda().matmul_quant(y.data(), dx.data(), dw.data(), f, M, N, K,
                              on_path(MatmulPath::kFloatDots));
          const auto got = y.download();
          EXPECT_TRUE(same_bits(got, fma_chain(x, wf, M, N, K))) << at << ": not the FMA chain";
          for (MatmulPath path : {MatmulPath::kFloatDots, MatmulPath::kFloatGemm}) {
            std::vector<float> want(M * N);
            cpu().matmul_quant(want.data(), x.data(), w.data(), f, M, N, K, on_path(path));
            EXPECT_TRUE(matches_cpu(got, want, kCudaMatmulTolerance))
                << at << (path == MatmulPath::kFloatDots ? ", cpu float dots" : ", cpu float gemm");
          }
          // The float paths are one kernel.
          for (MatmulPath path : {MatmulPath::kAuto, MatmulPath::kFloatGemm}) {
            DeviceArray<float> y2(cuda(), M * N);
            cuda().matmul_quant(y2.data(), dx.data(), dw.data(), f, M, N, K, on_path(path));
            EXPECT_TRUE(same_bits(y2.download(), got)) << at << ", path " << int(path);
          }
        }
      }
    }
  }
}

// Decode-sized shapes: many weight rows (N not a multiple of any tile), long rows.
TEST_F(CudaMatmulQuant, MatchesCpuOnModelShapes) {
  uint32_t seed = 500;
  for (WeightFormat f : {WeightFormat::kQ4_K, WeightFormat::kQ8_0, WeightFormat::kBF16}) {
    const size_t N = 4099, K = 2048;
    const auto w = random_weights(f, N, K, seed++);
    const auto wf = cpu_rows(f, w, N, K);
    DeviceArray<uint8_t> dw = to_cuda(w);
    for (size_t M : {1, 9}) {
      const auto x = random_vector(M * K, seed++);
      DeviceArray<float> dx = to_cuda(x);
      DeviceArray<float> y(cuda(), M * N);
      cuda().matmul_quant(y.data(), dx.data(), dw.data(), f, M, N, K, on_path(MatmulPath::kAuto));
      const auto got = y.download();
      EXPECT_TRUE(same_bits(got, fma_chain(x, wf, M, N, K))) << label(f, M, N, K);
      std::vector<float> want(M * N);
      cpu().matmul_quant(want.data(), x.data(), w.data(), f, M, N, K,
                         on_path(MatmulPath::kFloatDots));
      EXPECT_TRUE(matches_cpu(got, want, kCudaMatmulTolerance)) << label(f, M, N, K);
    }
  }
}

TEST_F(CudaMatmulQuant, StridedAndAccumulated) {
  uint32_t seed = 700;
  for (WeightFormat f : {WeightFormat::kQ5_1, WeightFormat::kQ6_K, WeightFormat::kF16}) {
    const size_t K = ks_for(f).back(), N = 37;
    const auto w = random_weights(f, N, K, seed++);
    const auto wf = cpu_rows(f, w, N, K);
    DeviceArray<uint8_t> dw = to_cuda(w);
    for (size_t M : {1, 33}) {
      const size_t ldy = N + 5;
      const auto x = random_vector(M * K, seed++);
      const auto y0 = random_vector(M * ldy, seed++);
      DeviceArray<float> dx = to_cuda(x);
      const auto chain = fma_chain(x, wf, M, N, K);
      for (bool accumulate : {false, true}) {
        // The CPU's float dots (its kAuto rounds activations to 8 bits below 32 rows).
        k::MatmulOptions o = on_path(MatmulPath::kFloatDots);
        o.ldy = ldy;
        o.accumulate = accumulate;
        DeviceArray<float> y = to_cuda(y0);
        cuda().matmul_quant(y.data(), dx.data(), dw.data(), f, M, N, K, o);
        std::vector<float> want = y0;
        cpu().matmul_quant(want.data(), x.data(), w.data(), f, M, N, K, o);
        const auto got = y.download();
        EXPECT_TRUE(matches_cpu(got, want, kCudaMatmulTolerance))
            << label(f, M, N, K) << (accumulate ? " accumulate" : "");
        std::vector<float> exact = y0;
        for (size_t m = 0; m < M; ++m) {
          for (size_t n = 0; n < N; ++n) {
            float& e = exact[m * ldy + n];
            e = accumulate ? e + chain[m * N + n] : chain[m * N + n];
          }
        }
        // The padding columns keep y0's values.
        EXPECT_TRUE(same_bits(got, exact))
            << label(f, M, N, K) << (accumulate ? " accumulate" : "");
      }
    }
  }
}

// y[m][n] depends on x[m], W row n and K only.
TEST_F(CudaMatmulQuant, RowsDoNotDependOnTheBatch) {
  uint32_t seed = 900;
  for (WeightFormat f : {WeightFormat::kQ4_0, WeightFormat::kQ4_K, WeightFormat::kF32}) {
    const size_t K = ks_for(f).back(), N = 130, M = 300;
    const size_t rb = k::row_bytes(f, K);
    const auto w = random_weights(f, N, K, seed++);
    const auto x = random_vector(M * K, seed++);
    DeviceArray<uint8_t> dw = to_cuda(w);
    DeviceArray<float> dx = to_cuda(x);
    DeviceArray<float> y(cuda(), M * N);
    cuda().matmul_quant(y.data(), dx.data(), dw.data(), f, M, N, K, {});
    const auto all = y.download();
    // Each of these rows alone, and the 7 rows from it.
    for (size_t m : {0, 1, 8, 63, 64, 150, 299}) {
      DeviceArray<float> one(cuda(), N);
      cuda().matmul_quant(one.data(), dx.data() + m * K, dw.data(), f, 1, N, K, {});
      EXPECT_TRUE(same_bits(one.download(),
                            std::vector<float>(all.begin() + m * N, all.begin() + (m + 1) * N)))
          << k::weight_format_name(f) << " row " << m << " alone";
      const size_t rows = std::min<size_t>(7, M - m);
      DeviceArray<float> few(cuda(), rows * N);
      cuda().matmul_quant(few.data(), dx.data() + m * K, dw.data(), f, rows, N, K, {});
      EXPECT_TRUE(same_bits(few.download(),
                            std::vector<float>(all.begin() + m * N, all.begin() + (m + rows) * N)))
          << k::weight_format_name(f) << " rows from " << m;
    }
    // Row groups change nothing.
    const uint32_t groups[] = {100, 0, 199, 1};
    k::MatmulOptions grouped;
    grouped.row_groups = groups;
    grouped.n_row_groups = 4;
    DeviceArray<float> yg(cuda(), M * N);
    cuda().matmul_quant(yg.data(), dx.data(), dw.data(), f, M, N, K, grouped);
    EXPECT_TRUE(same_bits(yg.download(), all)) << k::weight_format_name(f) << " row groups";
    // A slice of W rows [17, 26): the same columns.
    const size_t n0 = 17, n = 9;
    DeviceArray<float> part(cuda(), M * n);
    cuda().matmul_quant(part.data(), dx.data(), dw.data() + n0 * rb, f, M, n, K, {});
    const auto got = part.download();
    std::vector<float> want(M * n);
    for (size_t m = 0; m < M; ++m) {
      for (size_t j = 0; j < n; ++j) want[m * n + j] = all[m * N + n0 + j];
    }
    EXPECT_TRUE(same_bits(got, want)) << k::weight_format_name(f) << " a slice of W";
  }
}

// The float formats never round activations on the CPU, whatever the path: every path runs.
TEST_F(CudaMatmulQuant, FloatFormatsTakeEveryPath) {
  uint32_t seed = 1100;
  for (WeightFormat f : {WeightFormat::kF32, WeightFormat::kF16, WeightFormat::kBF16}) {
    const size_t M = 7, N = 33, K = 96;
    const auto w = random_weights(f, N, K, seed++);
    const auto x = random_vector(M * K, seed++);
    DeviceArray<uint8_t> dw = to_cuda(w);
    DeviceArray<float> dx = to_cuda(x);
    DeviceArray<float> ref(cuda(), M * N);
    cuda().matmul_quant(ref.data(), dx.data(), dw.data(), f, M, N, K, {});
    const auto base = ref.download();
    for (MatmulPath path : {MatmulPath::kRowDots, MatmulPath::kInt16Dots}) {
      DeviceArray<float> y(cuda(), M * N);
      cuda().matmul_quant(y.data(), dx.data(), dw.data(), f, M, N, K, on_path(path));
      const auto got = y.download();
      EXPECT_TRUE(same_bits(got, base)) << k::weight_format_name(f) << " path " << int(path);
      std::vector<float> want(M * N);
      cpu().matmul_quant(want.data(), x.data(), w.data(), f, M, N, K, on_path(path));
      EXPECT_TRUE(matches_cpu(got, want, kCudaMatmulTolerance))
          << k::weight_format_name(f) << " path " << int(path);
    }
  }
}

TEST_F(CudaMatmulQuant, RejectsWhatTheCpuRejects) {
  DeviceArray<float> x = to_cuda(std::vector<float>(512, 1.0f));
  DeviceArray<float> y(cuda(), 64);
  DeviceArray<uint8_t> w = to_cuda(std::vector<uint8_t>(4096, 0));
  const k::MatmulOptions plain;
  auto call = [&](WeightFormat f, size_t M, size_t N, size_t K, const k::MatmulOptions& o,
                  float* yp, const float* xp, const void* wp) {
    return rejects([&] { cuda().matmul_quant(yp, xp, wp, f, M, N, K, o); }, "matmul_quant");
  };
  EXPECT_TRUE(call(static_cast<WeightFormat>(10), 1, 1, 256, plain, y.data(), x.data(), w.data()));
  EXPECT_TRUE(call(WeightFormat::kF32, 1, 1, 0, plain, y.data(), x.data(), w.data()));
  EXPECT_TRUE(call(WeightFormat::kQ4_0, 1, 1, 48, plain, y.data(), x.data(), w.data()));
  EXPECT_TRUE(call(WeightFormat::kQ4_K, 1, 1, 32, plain, y.data(), x.data(), w.data()));
  k::MatmulOptions narrow;
  narrow.ldy = 3;
  EXPECT_TRUE(call(WeightFormat::kQ8_0, 1, 4, 32, narrow, y.data(), x.data(), w.data()));
  EXPECT_TRUE(call(WeightFormat::kQ8_0, 1, 1, 32, plain, nullptr, x.data(), w.data()));
  EXPECT_TRUE(call(WeightFormat::kQ8_0, 1, 1, 32, plain, y.data(), nullptr, w.data()));
  EXPECT_TRUE(call(WeightFormat::kQ8_0, 1, 1, 32, plain, y.data(), x.data(), nullptr));
  const uint32_t groups[] = {2, 2};
  k::MatmulOptions bad_groups;
  bad_groups.row_groups = groups;
  bad_groups.n_row_groups = 2;
  EXPECT_TRUE(call(WeightFormat::kQ8_0, 5, 1, 32, bad_groups, y.data(), x.data(), w.data()));
  k::MatmulOptions interleaved;
  interleaved.layout = WeightLayout::kInterleaved;
  EXPECT_TRUE(call(WeightFormat::kF16, 1, 1, 32, interleaved, y.data(), x.data(), w.data()));
  interleaved.path = MatmulPath::kRowDots;
  EXPECT_TRUE(call(WeightFormat::kQ8_0, 1, 1, 32, interleaved, y.data(), x.data(), w.data()));

  // Empty products do nothing.
  cuda().matmul_quant(nullptr, nullptr, nullptr, WeightFormat::kQ8_0, 0, 5, 32, plain);
  cuda().matmul_quant(nullptr, nullptr, nullptr, WeightFormat::kQ8_0, 5, 0, 32, plain);
  cuda().synchronize();

  // What has no kernel says so.
  for (MatmulPath path : {MatmulPath::kRowDots, MatmulPath::kInt16Dots}) {
    EXPECT_THROW(cuda().matmul_quant(y.data(), x.data(), w.data(), WeightFormat::kQ4_0, 1, 1, 32,
                                     on_path(path)),
                 std::runtime_error);
  }
  k::MatmulOptions il;
  il.layout = WeightLayout::kInterleaved;
  EXPECT_THROW(cuda().matmul_quant(y.data(), x.data(), w.data(), WeightFormat::kQ8_0, 1, 1, 32, il),
               std::runtime_error);
}

// ---- embed_rows ---------------------------------------------------------------------------

std::vector<int32_t> random_ids(size_t T, size_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> ids(T);
  for (auto& id : ids) id = static_cast<int32_t>(rng() % vocab);
  ids.front() = 0;
  ids.back() = static_cast<int32_t>(vocab - 1);
  return ids;
}

TEST_F(CudaEmbedRows, MatchesCpuBitForBit) {
  uint32_t seed = 2000;
  const size_t vocab = 70;
  for (WeightFormat f : k::kAllWeightFormats) {
    for (size_t dim : ks_for(f)) {
      const auto table = random_weights(f, vocab, dim, seed++);
      DeviceArray<uint8_t> dt = to_cuda(table);
      for (size_t T : {1, 7, 300}) {
        const auto ids = T == 1 ? std::vector<int32_t>{69} : random_ids(T, vocab, seed++);
        DeviceArray<int32_t> di = to_cuda(ids);
        DeviceArray<float> out(cuda(), T * dim);
        cuda().embed_rows(out.data(), dt.data(), f, WeightLayout::kRows, di.data(), T, vocab, dim);
        std::vector<float> want(T * dim);
        cpu().embed_rows(want.data(), table.data(), f, WeightLayout::kRows, ids.data(), T, vocab,
                         dim);
        EXPECT_TRUE(same_bits(out.download(), want))
            << k::weight_format_name(f) << " dim " << dim << " T " << T;
      }
    }
  }
}

TEST_F(CudaEmbedRows, InterleavedMatchesCpuBitForBit) {
  uint32_t seed = 2100;
  const size_t vocab = 37, dim = 96, T = 50;
  for (WeightFormat f : {WeightFormat::kQ8_0, WeightFormat::kQ4_0, WeightFormat::kQ4_1}) {
    const auto w = random_weights(f, vocab, dim, seed++);
    std::vector<uint8_t> table(k::interleaved_bytes(f, vocab, dim));
    ASSERT_EQ(k::interleave_weights(table.data(), w.data(), f, vocab, dim), k::Status::kOk);
    const auto ids = random_ids(T, vocab, seed++);
    DeviceArray<uint8_t> dt = to_cuda(table);
    DeviceArray<int32_t> di = to_cuda(ids);
    DeviceArray<float> out(cuda(), T * dim);
    cuda().embed_rows(out.data(), dt.data(), f, WeightLayout::kInterleaved, di.data(), T, vocab,
                      dim);
    std::vector<float> want(T * dim);
    cpu().embed_rows(want.data(), table.data(), f, WeightLayout::kInterleaved, ids.data(), T, vocab,
                     dim);
    EXPECT_TRUE(same_bits(out.download(), want)) << k::weight_format_name(f);
  }
}

TEST_F(CudaEmbedRows, RejectsWhatTheCpuRejects) {
  const size_t vocab = 4, dim = 32;
  const auto table = random_weights(WeightFormat::kQ8_0, vocab, dim, 7);
  DeviceArray<uint8_t> dt = to_cuda(table);
  const std::vector<float> sentinel(3 * dim, -3.5f);
  DeviceArray<float> out = to_cuda(sentinel);
  // Ids outside [0, n_rows), found on the device: nothing is written.
  const std::vector<std::vector<int32_t>> bad = {{0, -1, 2}, {3, 2, 4}, {1 << 30}};
  for (const std::vector<int32_t>& ids : bad) {
    DeviceArray<int32_t> di = to_cuda(ids);
    EXPECT_TRUE(rejects(
        [&] {
          cuda().embed_rows(out.data(), dt.data(), WeightFormat::kQ8_0, WeightLayout::kRows,
                            di.data(), ids.size(), vocab, dim);
        },
        "embed_rows"));
    std::vector<float> want(ids.size() * dim);
    EXPECT_TRUE(rejects(
        [&] {
          cpu().embed_rows(want.data(), table.data(), WeightFormat::kQ8_0, WeightLayout::kRows,
                           ids.data(), ids.size(), vocab, dim);
        },
        "embed_rows"));
  }
  EXPECT_TRUE(same_bits(out.download(), sentinel));
  DeviceArray<int32_t> di = to_cuda(std::vector<int32_t>{0, 1});
  auto call = [&](WeightFormat f, WeightLayout layout, size_t d, float* o, const void* t,
                  const int32_t* i) {
    return rejects([&] { cuda().embed_rows(o, t, f, layout, i, 2, vocab, d); }, "embed_rows");
  };
  const auto rows = WeightLayout::kRows;
  EXPECT_TRUE(call(static_cast<WeightFormat>(10), rows, 256, out.data(), dt.data(), di.data()));
  EXPECT_TRUE(call(WeightFormat::kQ8_0, rows, 0, out.data(), dt.data(), di.data()));
  EXPECT_TRUE(call(WeightFormat::kQ8_0, rows, 48, out.data(), dt.data(), di.data()));
  EXPECT_TRUE(call(WeightFormat::kQ8_0, rows, 32, nullptr, dt.data(), di.data()));
  EXPECT_TRUE(call(WeightFormat::kQ8_0, rows, 32, out.data(), nullptr, di.data()));
  EXPECT_TRUE(call(WeightFormat::kQ8_0, rows, 32, out.data(), dt.data(), nullptr));
  EXPECT_TRUE(
      call(WeightFormat::kF16, WeightLayout::kInterleaved, 32, out.data(), dt.data(), di.data()));
  // No tokens: nothing to do.
  cuda().embed_rows(nullptr, nullptr, WeightFormat::kQ8_0, rows, nullptr, 0, vocab, dim);
  cuda().synchronize();
}

// ---- embed_shard_rows ---------------------------------------------------------------------

TEST_F(CudaEmbedShardRows, MatchesCpuBitForBit) {
  uint32_t seed = 3000;
  const size_t vocab = 70;
  const size_t bounds[] = {0, 25, 50, 70};
  for (WeightFormat f : k::kAllWeightFormats) {
    const size_t dim = ks_for(f).back();
    const size_t rb = k::row_bytes(f, dim);
    const auto table = random_weights(f, vocab, dim, seed++);
    const auto ids = random_ids(300, vocab, seed++);
    DeviceArray<int32_t> di = to_cuda(ids);
    for (size_t s = 0; s < 3; ++s) {
      const size_t begin = bounds[s], n_rows = bounds[s + 1] - bounds[s];
      const std::vector<uint8_t> shard(table.begin() + begin * rb,
                                       table.begin() + (begin + n_rows) * rb);
      DeviceArray<uint8_t> ds = to_cuda(shard);
      DeviceArray<float> out = to_cuda(std::vector<float>(ids.size() * dim, -1.0f));
      cuda().embed_shard_rows(out.data(), ds.data(), f, WeightLayout::kRows, di.data(), ids.size(),
                              begin, n_rows, vocab, dim);
      std::vector<float> want(ids.size() * dim);
      cpu().embed_shard_rows(want.data(), shard.data(), f, WeightLayout::kRows, ids.data(),
                             ids.size(), begin, n_rows, vocab, dim);
      EXPECT_TRUE(same_bits(out.download(), want)) << k::weight_format_name(f) << " shard " << s;
    }
  }
}

TEST_F(CudaEmbedShardRows, InterleavedMatchesCpuBitForBit) {
  const WeightFormat f = WeightFormat::kQ4_1;
  const size_t vocab = 60, begin = 20, n_rows = 20, dim = 64;
  const auto w = random_weights(f, n_rows, dim, 3100);
  std::vector<uint8_t> shard(k::interleaved_bytes(f, n_rows, dim));
  ASSERT_EQ(k::interleave_weights(shard.data(), w.data(), f, n_rows, dim), k::Status::kOk);
  const auto ids = random_ids(40, vocab, 3101);
  DeviceArray<uint8_t> ds = to_cuda(shard);
  DeviceArray<int32_t> di = to_cuda(ids);
  DeviceArray<float> out(cuda(), ids.size() * dim);
  cuda().embed_shard_rows(out.data(), ds.data(), f, WeightLayout::kInterleaved, di.data(),
                          ids.size(), begin, n_rows, vocab, dim);
  std::vector<float> want(ids.size() * dim);
  cpu().embed_shard_rows(want.data(), shard.data(), f, WeightLayout::kInterleaved, ids.data(),
                         ids.size(), begin, n_rows, vocab, dim);
  EXPECT_TRUE(same_bits(out.download(), want));
}

// The CPU's message, naming the first id outside the vocabulary; nothing written.
TEST_F(CudaEmbedShardRows, RejectsIdsOutsideTheVocabularyAsTheCpu) {
  const WeightFormat f = WeightFormat::kQ8_0;
  const size_t vocab = 8, begin = 4, n_rows = 4, dim = 32;
  const auto shard = random_weights(f, n_rows, dim, 3200);
  DeviceArray<uint8_t> ds = to_cuda(shard);
  const std::vector<std::vector<int32_t>> bad = {{3, 8, -1}, {5, -2, 9}, {7, 6, 5, 2147483647}};
  for (const std::vector<int32_t>& ids : bad) {
    DeviceArray<int32_t> di = to_cuda(ids);
    const std::vector<float> sentinel(ids.size() * dim, 2.5f);
    DeviceArray<float> out = to_cuda(sentinel);
    std::string cuda_message, cpu_message;
    try {
      cuda().embed_shard_rows(out.data(), ds.data(), f, WeightLayout::kRows, di.data(), ids.size(),
                              begin, n_rows, vocab, dim);
    } catch (const std::invalid_argument& e) {
      cuda_message = e.what();
    }
    std::vector<float> host(ids.size() * dim);
    try {
      cpu().embed_shard_rows(host.data(), shard.data(), f, WeightLayout::kRows, ids.data(),
                             ids.size(), begin, n_rows, vocab, dim);
    } catch (const std::invalid_argument& e) {
      cpu_message = e.what();
    }
    EXPECT_FALSE(cpu_message.empty());
    EXPECT_EQ(cuda_message, cpu_message);
    EXPECT_TRUE(same_bits(out.download(), sentinel));
  }
}

// A table the CPU cannot decode fails only when a token is in the shard, as on the CPU.
TEST_F(CudaEmbedShardRows, BadTablesFailOnlyForTokensTheShardHolds) {
  const size_t vocab = 8, begin = 4, n_rows = 4, dim = 48;  // 48: not a multiple of Q8_0's 32
  DeviceArray<uint8_t> ds = to_cuda(std::vector<uint8_t>(1024, 0));
  const std::vector<int32_t> outside = {0, 3, 1}, inside = {0, 5};
  DeviceArray<int32_t> d_out = to_cuda(outside), d_in = to_cuda(inside);
  DeviceArray<float> out = to_cuda(std::vector<float>(outside.size() * dim, 9.0f));
  cuda().embed_shard_rows(out.data(), ds.data(), WeightFormat::kQ8_0, WeightLayout::kRows,
                          d_out.data(), outside.size(), begin, n_rows, vocab, dim);
  EXPECT_TRUE(same_bits(out.download(), std::vector<float>(outside.size() * dim, 0.0f)));
  std::vector<float> host(outside.size() * dim, 9.0f);
  cpu().embed_shard_rows(host.data(), nullptr, WeightFormat::kQ8_0, WeightLayout::kRows,
                         outside.data(), outside.size(), begin, n_rows, vocab, dim);
  EXPECT_TRUE(same_bits(host, std::vector<float>(outside.size() * dim, 0.0f)));
  EXPECT_TRUE(rejects(
      [&] {
        cuda().embed_shard_rows(out.data(), ds.data(), WeightFormat::kQ8_0, WeightLayout::kRows,
                                d_in.data(), inside.size(), begin, n_rows, vocab, dim);
      },
      "embed_shard_rows"));
  EXPECT_TRUE(rejects(
      [&] {
        cpu().embed_shard_rows(host.data(), nullptr, WeightFormat::kQ8_0, WeightLayout::kRows,
                               inside.data(), inside.size(), begin, n_rows, vocab, dim);
      },
      "embed_shard_rows"));
  EXPECT_TRUE(rejects(
      [&] {
        cuda().embed_shard_rows(out.data(), ds.data(), WeightFormat::kF16,
                                WeightLayout::kInterleaved, d_in.data(), inside.size(), begin,
                                n_rows, vocab, 32);
      },
      "embed_shard_rows"));
  // No tokens: nothing to do.
  cuda().embed_shard_rows(nullptr, nullptr, WeightFormat::kQ8_0, WeightLayout::kRows, nullptr, 0,
                          begin, n_rows, vocab, dim);
  cuda().synchronize();
}

}  // namespace

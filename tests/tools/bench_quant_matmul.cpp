// Micro benchmark of matmul_quant: GEMV (M = 1) in GB/s of weights read, and batched products
// (M = 16, 128) in GFLOP/s, per format and dispatch level, at 1 and 2 threads. M = 1 and 16 are
// timed on three paths: the int8-activation row dots, the float32 row dots and the int16 row
// dots (the model's decode paths; decode_dots_path picks one per level), and for the formats
// that can be interleaved (WeightLayout::kInterleaved) float and int16 dots on the interleaved
// weights.
//   adakv_bench_quant_matmul [N K [FORMAT...]]   (default N = 16384, K = 1536: ~15-100 MB of
//   weights; every format unless some are named, e.g. Q4_1 Q8_0)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <random>
#include <vector>

#include "kernels/cpu_threads.h"
#include "kernels/quant.h"

namespace k = adakv::kernels;

namespace {

// A float array whose first element is 64-byte aligned.
class AlignedFloats {
 public:
  explicit AlignedFloats(size_t n) : n_(n), p_(new (std::align_val_t{64}) float[n]) {}
  ~AlignedFloats() { ::operator delete[](p_, std::align_val_t{64}); }
  AlignedFloats(const AlignedFloats&) = delete;
  AlignedFloats& operator=(const AlignedFloats&) = delete;
  float* data() { return p_; }
  size_t size() const { return n_; }
  float& operator[](size_t i) { return p_[i]; }
  float* begin() { return p_; }
  float* end() { return p_ + n_; }

 private:
  size_t n_;
  float* p_;
};

double seconds_per_call(float* y, const float* x, const uint8_t* w, k::WeightFormat f, size_t M,
                        size_t N, size_t K, k::MatmulPath path = k::MatmulPath::kAuto,
                        k::WeightLayout layout = k::WeightLayout::kRows) {
  k::MatmulOptions o{0, false, path};
  o.layout = layout;
  k::check(k::matmul_quant(y, x, w, f, M, N, K, o), "matmul_quant");  // warm-up
  int reps = 0;
  const auto t0 = std::chrono::steady_clock::now();
  double elapsed = 0;
  do {
    k::check(k::matmul_quant(y, x, w, f, M, N, K, o), "matmul_quant");
    ++reps;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  } while (elapsed < 0.3 || reps < 3);
  return elapsed / reps;
}

}  // namespace

int main(int argc, char** argv) {
  const size_t N = argc > 2 ? std::strtoul(argv[1], nullptr, 10) : 16384;
  const size_t K = argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 1536;
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  // Activation rows start on cache lines, as the model's workspace buffers do (a misaligned
  // 64-byte load costs two).
  AlignedFloats x(128 * K);
  std::vector<float> y(128 * N);
  for (auto& v : x) v = normal(rng);
  std::printf(
      "N=%zu K=%zu\n%-6s %-6s %-3s %10s %10s %10s %10s %10s %10s %12s %12s %12s %12s %12s "
      "%12s\n",
      N, K, "format", "level", "thr", "MB", "M=1 GB/s", "f32dots", "int16dots", "il-dots",
      "il-int16", "M=16 GFLOP/s", "f32dots", "int16dots", "il-dots", "il-int16", "M=128 GFLOP/s");
  {
    // The float32 reference path of the model today: kernels::matmul (OpenBLAS) on a float copy.
    std::vector<float> wf(N * K);
    for (size_t i = 0; i < wf.size(); ++i) wf[i] = x[i % x.size()] * 0.01f;
    for (int threads : {1, 2}) {
      k::set_num_threads(threads);
      double t[3];
      const size_t ms[3] = {1, 16, 128};
      for (int i = 0; i < 3; ++i) {
        k::check(k::matmul(y.data(), x.data(), wf.data(), ms[i], N, K), "matmul");
        int reps = 0;
        const auto t0 = std::chrono::steady_clock::now();
        double elapsed = 0;
        do {
          k::check(k::matmul(y.data(), x.data(), wf.data(), ms[i], N, K), "matmul");
          ++reps;
          elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        } while (elapsed < 0.3 || reps < 3);
        t[i] = elapsed / reps;
      }
      const double mb = 4.0 * N * K / 1e6;
      std::printf(
          "%-6s %-6s %-3d %10.1f %10.2f %10s %10s %10s %10s %12.1f %12s %12s %12s %12s %12.1f\n",
          "F32", "blas", threads, mb, mb / 1e3 / t[0], "-", "-", "-", "-",
          2.0 * 16 * N * K / t[1] / 1e9, "-", "-", "-", "-", 2.0 * 128 * N * K / t[2] / 1e9);
    }
  }
  for (k::WeightFormat f : k::kAllWeightFormats) {
    const size_t rb = k::row_bytes(f, K);
    bool named = argc <= 3;
    for (int a = 3; a < argc; ++a)
      named = named || std::strcmp(argv[a], k::weight_format_name(f)) == 0;
    if (rb == 0 || !named) continue;
    std::vector<uint8_t> w(N * rb);
    for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<uint8_t>(rng());
    // Sane fp16 scales (0x2000 ~ 0.0078) wherever a block keeps one; floats stay finite.
    if (f == k::WeightFormat::kF32) {
      for (size_t i = 0; i < N * K; ++i) std::memcpy(w.data() + 4 * i, &x[i % x.size()], 4);
    } else if (f == k::WeightFormat::kF16 || f == k::WeightFormat::kBF16) {
      for (size_t i = 0; i < N * K; ++i) w[2 * i + 1] &= 0x3B;
    } else {
      const size_t bb = k::block_bytes(f);
      const size_t at = f == k::WeightFormat::kQ6_K ? 208 : 0;
      for (size_t b = 0; b < w.size(); b += bb) {
        w[b + at] = 0x00;
        w[b + at + 1] = 0x20;
        if (f != k::WeightFormat::kQ6_K) w[b + 3] = 0x20;
      }
    }
    std::vector<uint8_t> wi(k::interleaved_bytes(f, N, K));
    if (!wi.empty()) k::check(k::interleave_weights(wi.data(), w.data(), f, N, K), "interleave");
    for (k::QuantLevel level :
         {k::QuantLevel::kScalar, k::QuantLevel::kAvx2, k::QuantLevel::kAvx512}) {
      if (!k::set_quant_level(level)) continue;
      for (int threads : {1, 2}) {
        k::set_num_threads(threads);
        const double mb = double(w.size()) / 1e6;
        const double t1 = seconds_per_call(y.data(), x.data(), w.data(), f, 1, N, K);
        const double t16 = seconds_per_call(y.data(), x.data(), w.data(), f, 16, N, K);
        const auto dots = k::MatmulPath::kFloatDots;
        const double d1 = seconds_per_call(y.data(), x.data(), w.data(), f, 1, N, K, dots);
        const double d16 = seconds_per_call(y.data(), x.data(), w.data(), f, 16, N, K, dots);
        const auto int16 = k::MatmulPath::kInt16Dots;
        const double i1 = seconds_per_call(y.data(), x.data(), w.data(), f, 1, N, K, int16);
        const double i16 = seconds_per_call(y.data(), x.data(), w.data(), f, 16, N, K, int16);
        double l1 = 0, l16 = 0, li1 = 0, li16 = 0;
        if (!wi.empty()) {
          const auto il = k::WeightLayout::kInterleaved;
          l1 = seconds_per_call(y.data(), x.data(), wi.data(), f, 1, N, K, dots, il);
          l16 = seconds_per_call(y.data(), x.data(), wi.data(), f, 16, N, K, dots, il);
          li1 = seconds_per_call(y.data(), x.data(), wi.data(), f, 1, N, K, int16, il);
          li16 = seconds_per_call(y.data(), x.data(), wi.data(), f, 16, N, K, int16, il);
        }
        const double t128 = level == k::QuantLevel::kScalar
                                ? 0
                                : seconds_per_call(y.data(), x.data(), w.data(), f, 128, N, K);
        const double flop16 = 2.0 * 16 * N * K / 1e9;
        std::printf(
            "%-6s %-6s %-3d %10.1f %10.2f %10.2f %10.2f %10.2f %10.2f %12.1f %12.1f %12.1f %12.1f "
            "%12.1f %12.1f\n",
            k::weight_format_name(f), k::quant_level_name(level), threads, mb, mb / 1e3 / t1,
            mb / 1e3 / d1, mb / 1e3 / i1, l1 > 0 ? mb / 1e3 / l1 : 0.0,
            li1 > 0 ? mb / 1e3 / li1 : 0.0, flop16 / t16, flop16 / d16, flop16 / i16,
            l16 > 0 ? flop16 / l16 : 0.0, li16 > 0 ? flop16 / li16 : 0.0,
            t128 > 0 ? 2.0 * 128 * N * K / t128 / 1e9 : 0.0);
      }
    }
  }
  return 0;
}

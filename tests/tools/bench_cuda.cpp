// GPU benchmark of the CUDA backend's hot ops, each next to the ceiling it is judged by:
//  - device-to-device copy (Backend::copy of 1 GiB): bytes read + written per second, the
//    memory ceiling;
//  - attention_paged decode (one new query per sequence) over a batch of sequences whose KV
//    heads hold 32k tokens each, in 16-token blocks scattered over the pool: K/V bytes read per
//    second and their ratio to the copy bandwidth (wanted: >= 0.70);
//  - matmul_quant at prefill sizes (M = 2048 rows) in Q4_1, Q8_0 and F32 next to cuBLAS on the
//    same shape (cublasSgemm in float32, and cublasGemmEx in bf16 with float32 accumulation) and
//    cublasSgemm at 8192^3 (the large-GEMM rate); ratios to Sgemm (wanted: >= 0.70);
//  - Ada-KV's scoring of one layer of a 32k-token prompt as the runtime does it
//    (runtime/compression/scorer.cpp, the default model's preset: 32 window + 16 look-ahead
//    queries with peak scores, pool_scores of mass and peak, their downloads): ms per layer
//    (wanted: < 2), and window_attention_mass + pool_scores alone.
// Shapes: the default model (Hq 9, Hkv 3, Dh 64) and a Llama-8B-like one (Hq 32, Hkv 8, Dh 128).
// Every figure is the median of timed calls after warm-up calls, timed with CUDA events on the
// backend's stream (host clock for the scoring, whose downloads wait for the stream). Inputs are
// random, never zeros. The last line, `summary key=value ...`, is for scripts
// (tests/gpu/run-on-device.sh); `n/a` where a part failed.
//
// Without a usable CUDA device it says why and exits 2; a part that throws (an op without a
// kernel yet) is reported and the others still run; the exit status is then 1.
//   adakv_bench_cuda
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/kv_layout.h"
#include "kernels/ops.h"
#include "kernels/quant.h"

namespace k = adakv::kernels;

namespace {

constexpr size_t kContext = 32768;  // tokens per KV head (decode) and prompt tokens (scoring)
constexpr size_t kBlockTokens = 16;
constexpr size_t kPrefillRows = 2048;

void cuda_ok(cudaError_t s, const char* what) {
  if (s != cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(s));
  }
}

void cublas_ok(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) {
    throw std::runtime_error(std::string(what) + ": cuBLAS status " + std::to_string(int(s)));
  }
}

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

// Median milliseconds of `call` on `stream`, each call timed alone between two events, after
// `warmup` untimed calls (module load, cuBLAS's heuristics and workspace stay out).
double median_ms(cudaStream_t stream, int warmup, int reps, const std::function<void()>& call) {
  cudaEvent_t start, stop;
  cuda_ok(cudaEventCreate(&start), "cudaEventCreate");
  cuda_ok(cudaEventCreate(&stop), "cudaEventCreate");
  std::vector<double> times;
  try {
    for (int i = 0; i < warmup; ++i) call();
    cuda_ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    for (int i = 0; i < reps; ++i) {
      cuda_ok(cudaEventRecord(start, stream), "cudaEventRecord");
      call();
      cuda_ok(cudaEventRecord(stop, stream), "cudaEventRecord");
      cuda_ok(cudaEventSynchronize(stop), "cudaEventSynchronize");
      float ms = 0;
      cuda_ok(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
      times.push_back(ms);
    }
    cuda_ok(cudaGetLastError(), "kernel launch");
  } catch (...) {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    throw;
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return median(times);
}

// Backend memory holding a host vector.
template <typename T>
k::Buffer upload(k::Backend& b, const std::vector<T>& host) {
  k::Buffer buf = b.allocate(std::max<size_t>(1, host.size()) * sizeof(T));
  if (!host.empty()) b.upload(buf.data(), host.data(), host.size() * sizeof(T));
  return buf;
}

std::vector<float> random_floats(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

struct Printed {
  double copy_gbs = NAN;
  double attention_ratio = NAN;  // the smallest, bf16 KV (the default), over the shapes
  double gemm_ratio = NAN;       // the smallest of ours / Sgemm on the same shape
  double gemm_vs_large = NAN;    // the smallest of ours at 4096 x 4096 / Sgemm at 8192^3
  double scores_ms = NAN;        // the largest ms per layer over the shapes
  bool failed = false;
};

void report_failure(Printed& p, const char* part, const std::exception& e) {
  std::printf("  %s FAILED: %s\n", part, e.what());
  p.failed = true;
}

// ---- Device-to-device copy -------------------------------------------------------------------

double copy_bandwidth(k::Backend& b, cudaStream_t stream) {
  const size_t bytes = size_t{1} << 30;
  k::Buffer src = b.allocate(bytes), dst = b.allocate(bytes);
  b.fill(src.data(), 0x5a, bytes);
  const double ms = median_ms(stream, 3, 20, [&] { b.copy(dst.data(), src.data(), bytes); });
  const double gbs = 2.0 * bytes / (ms * 1e-3) / 1e9;
  std::printf("copy 1 GiB device to device: %.3f ms, %.0f GB/s (bytes read + written)\n", ms, gbs);
  return gbs;
}

// ---- Decode attention ------------------------------------------------------------------------

struct AttentionShape {
  size_t Hq, Hkv, Dh, batch;
};

const char* dtype_name(k::KvDtype d) {
  return d == k::KvDtype::kF32 ? "f32" : d == k::KvDtype::kBF16 ? "bf16" : "e4m3";
}

// Milliseconds of one decode step of `shape.batch` sequences, every KV head kContext tokens long.
// The pool is filled from a host template of valid blocks (kv_block_write of random rows on the
// CPU), and each head's blocks are a random draw from the whole pool, as after many requests.
double decode_attention_ms(k::Backend& b, cudaStream_t stream, const AttentionShape& s,
                           k::KvDtype dtype, double* kv_bytes, std::mt19937& rng) {
  const k::KvBlockLayout layout{kBlockTokens, s.Dh, dtype};
  const size_t blocks_per_head = kContext / kBlockTokens;
  const size_t n_blocks = s.batch * s.Hkv * blocks_per_head;
  const size_t block_bytes = layout.block_bytes();
  k::Buffer pool = b.allocate(n_blocks * block_bytes);

  const size_t template_blocks = 1024;
  std::vector<uint8_t> host(template_blocks * block_bytes);
  for (size_t i = 0; i < template_blocks; ++i) {
    const std::vector<float> kv = random_floats(2 * kBlockTokens * s.Dh, rng, 2.0f);
    k::check(k::kv_block_write(host.data() + i * block_bytes, layout, 0, kv.data(),
                               kv.data() + kBlockTokens * s.Dh, kBlockTokens, s.Dh),
             "kv_block_write");
  }
  for (size_t at = 0; at < n_blocks; at += template_blocks) {
    const size_t n = std::min(template_blocks, n_blocks - at);
    b.upload(pool.as<uint8_t>() + at * block_bytes, host.data(), n * block_bytes);
  }

  std::vector<int32_t> order(n_blocks);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  const std::vector<uint32_t> lengths(s.batch * s.Hkv, uint32_t(kContext));
  k::Buffer ids = upload(b, order), lens = upload(b, lengths);
  k::Buffer q = upload(b, random_floats(s.batch * s.Hq * s.Dh, rng));
  k::Buffer out = b.allocate(s.batch * s.Hq * s.Dh * sizeof(float));
  std::vector<const int32_t*> tables(s.batch * s.Hkv);
  for (size_t h = 0; h < tables.size(); ++h) tables[h] = ids.as<int32_t>() + h * blocks_per_head;
  k::Buffer table_buf = upload(b, tables);
  std::vector<k::PagedSequence> seqs(s.batch);
  for (size_t i = 0; i < s.batch; ++i) {
    seqs[i] = {table_buf.as<const int32_t*>() + i * s.Hkv,
               lens.as<uint32_t>() + i * s.Hkv,
               1,
               q.as<float>() + i * s.Hq * s.Dh,
               s.Hq * s.Dh,
               out.as<float>() + i * s.Hq * s.Dh,
               s.Hq * s.Dh};
  }
  k::Buffer seq_buf = upload(b, seqs);

  const float scale = 1.0f / std::sqrt(float(s.Dh));
  const double ms = median_ms(stream, 3, 20, [&] {
    b.attention_paged(seq_buf.as<k::PagedSequence>(), s.batch, pool.as<uint8_t>(), layout, s.Hq,
                      s.Hkv, scale);
  });
  std::vector<float> check(s.Hq * s.Dh);
  b.download(check.data(), out.data(), check.size() * sizeof(float));
  for (float x : check) {
    if (!std::isfinite(x)) throw std::runtime_error("attention_paged wrote a non-finite output");
  }
  *kv_bytes = double(n_blocks) * block_bytes;
  return ms;
}

void attention_part(k::Backend& b, cudaStream_t stream, Printed& p, std::mt19937& rng) {
  std::printf("\nattention_paged decode, 1 query per sequence, %zu tokens per KV head, block %zu\n",
              kContext, kBlockTokens);
  std::printf("%-14s %-5s %6s %10s %10s %10s %12s\n", "Hq/Hkv/Dh", "dtype", "batch", "KV MB",
              "us/call", "KV GB/s", "of copy bw");
  const AttentionShape shapes[] = {{9, 3, 64, 32}, {32, 8, 128, 8}};
  for (const auto& s : shapes) {
    for (k::KvDtype dtype : {k::KvDtype::kBF16, k::KvDtype::kE4M3, k::KvDtype::kF32}) {
      char shape[32];
      std::snprintf(shape, sizeof shape, "%zu/%zu/%zu", s.Hq, s.Hkv, s.Dh);
      try {
        double bytes = 0;
        const double ms = decode_attention_ms(b, stream, s, dtype, &bytes, rng);
        const double gbs = bytes / (ms * 1e-3) / 1e9;
        const double ratio = gbs / p.copy_gbs;
        std::printf("%-14s %-5s %6zu %10.0f %10.1f %10.0f %12.2f\n", shape, dtype_name(dtype),
                    s.batch, bytes / 1e6, ms * 1e3, gbs, ratio);
        if (dtype == k::KvDtype::kBF16) {
          p.attention_ratio =
              std::isnan(p.attention_ratio) ? ratio : std::min(p.attention_ratio, ratio);
        }
      } catch (const std::exception& e) {
        std::printf("%-14s %-5s ", shape, dtype_name(dtype));
        report_failure(p, "attention_paged", e);
      }
    }
  }
}

// ---- Prefill GEMMs ---------------------------------------------------------------------------

uint16_t fp16_bits(int exponent, uint32_t mantissa, bool negative) {
  return uint16_t((negative ? 0x8000 : 0) | ((exponent + 15) << 10) | (mantissa & 0x3ff));
}

// N x K weights of format f with random quants and scales of a plausible size (d about 2^-8;
// Q4_1's m about -2^-5, so values straddle zero).
std::vector<uint8_t> random_weights(k::WeightFormat f, size_t N, size_t K, std::mt19937& rng) {
  if (f == k::WeightFormat::kF32) {
    const std::vector<float> w = random_floats(N * K, rng, 0.05f);
    std::vector<uint8_t> bytes(w.size() * sizeof(float));
    std::memcpy(bytes.data(), w.data(), bytes.size());
    return bytes;
  }
  if (f != k::WeightFormat::kQ8_0 && f != k::WeightFormat::kQ4_1) {
    throw std::invalid_argument("random_weights: Q8_0, Q4_1 and F32 only");
  }
  const size_t bytes = N * k::row_bytes(f, K), block = k::block_bytes(f);
  std::vector<uint8_t> w(bytes);
  for (auto& x : w) x = uint8_t(rng());
  for (size_t at = 0; at < bytes; at += block) {
    const uint16_t d = fp16_bits(-8, rng(), false);
    std::memcpy(&w[at], &d, 2);
    if (f == k::WeightFormat::kQ4_1) {
      const uint16_t m = fp16_bits(-5, rng(), true);
      std::memcpy(&w[at + 2], &m, 2);
    }
  }
  return w;
}

struct CublasRates {
  double sgemm_ms = NAN, bf16_ms = NAN;
};

// cuBLAS on y[M][N] = x[M][K] W[N][K]^T, row-major as matmul_quant has it: column-major
// y^T (N x M) = W (K x N, transposed) * x^T (K x M).
CublasRates cublas_ms(cublasHandle_t handle, cudaStream_t stream, size_t M, size_t N, size_t K,
                      std::mt19937& rng) {
  CublasRates r;
  const std::vector<float> w = random_floats(N * K, rng, 0.05f), x = random_floats(M * K, rng);
  float *dw = nullptr, *dx = nullptr, *dy = nullptr;
  __nv_bfloat16 *bw = nullptr, *bx = nullptr;
  const auto free_all = [&] {
    cudaFree(dw);
    cudaFree(dx);
    cudaFree(dy);
    cudaFree(bw);
    cudaFree(bx);
  };
  try {
    cuda_ok(cudaMalloc(&dw, N * K * sizeof(float)), "cudaMalloc");
    cuda_ok(cudaMalloc(&dx, M * K * sizeof(float)), "cudaMalloc");
    cuda_ok(cudaMalloc(&dy, M * N * sizeof(float)), "cudaMalloc");
    cuda_ok(cudaMalloc(&bw, N * K * sizeof(__nv_bfloat16)), "cudaMalloc");
    cuda_ok(cudaMalloc(&bx, M * K * sizeof(__nv_bfloat16)), "cudaMalloc");
    cuda_ok(cudaMemcpy(dw, w.data(), w.size() * sizeof(float), cudaMemcpyHostToDevice),
            "cudaMemcpy");
    cuda_ok(cudaMemcpy(dx, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice),
            "cudaMemcpy");
    std::vector<__nv_bfloat16> hw(w.size()), hx(x.size());
    for (size_t i = 0; i < w.size(); ++i) hw[i] = __float2bfloat16(w[i]);
    for (size_t i = 0; i < x.size(); ++i) hx[i] = __float2bfloat16(x[i]);
    cuda_ok(cudaMemcpy(bw, hw.data(), hw.size() * sizeof(hw[0]), cudaMemcpyHostToDevice),
            "cudaMemcpy");
    cuda_ok(cudaMemcpy(bx, hx.data(), hx.size() * sizeof(hx[0]), cudaMemcpyHostToDevice),
            "cudaMemcpy");
    const float one = 1.0f, zero = 0.0f;
    const int n = int(N), m = int(M), kk = int(K);
    r.sgemm_ms = median_ms(stream, 3, 10, [&] {
      cublas_ok(cublasSgemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, n, m, kk, &one, dw, kk, dx, kk, &zero,
                            dy, n),
                "cublasSgemm");
    });
    r.bf16_ms = median_ms(stream, 3, 10, [&] {
      cublas_ok(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, n, m, kk, &one, bw, CUDA_R_16BF, kk,
                             bx, CUDA_R_16BF, kk, &zero, dy, CUDA_R_32F, n, CUBLAS_COMPUTE_32F,
                             CUBLAS_GEMM_DEFAULT),
                "cublasGemmEx");
    });
  } catch (...) {
    free_all();
    throw;
  }
  free_all();
  return r;
}

double matmul_quant_ms(k::Backend& b, cudaStream_t stream, k::WeightFormat f, size_t M, size_t N,
                       size_t K, std::mt19937& rng) {
  std::vector<uint8_t> w = random_weights(f, N, K, rng);
  k::MatmulOptions options;
  options.layout = b.weight_layout(f);
  if (options.layout == k::WeightLayout::kInterleaved) {
    std::vector<uint8_t> interleaved(k::interleaved_bytes(f, N, K));
    k::check(k::interleave_weights(interleaved.data(), w.data(), f, N, K), "interleave_weights");
    w.swap(interleaved);
  }
  k::Buffer dw = b.constant(w.data(), w.size());
  k::Buffer dx = upload(b, random_floats(M * K, rng));
  k::Buffer dy = b.allocate(M * N * sizeof(float));
  const double ms = median_ms(stream, 3, 10, [&] {
    b.matmul_quant(dy.as<float>(), dx.as<float>(), dw.data(), f, M, N, K, options);
  });
  std::vector<float> row(N);
  b.download(row.data(), dy.data(), N * sizeof(float));
  for (float x : row) {
    if (!std::isfinite(x)) throw std::runtime_error("matmul_quant wrote a non-finite output");
  }
  return ms;
}

void gemm_part(k::Backend& b, cudaStream_t stream, Printed& p, std::mt19937& rng) {
  cublasHandle_t handle = nullptr;
  cublas_ok(cublasCreate(&handle), "cublasCreate");
  cublas_ok(cublasSetStream(handle, stream), "cublasSetStream");
  const auto tflops = [](size_t M, size_t N, size_t K, double ms) {
    return 2.0 * M * N * K / (ms * 1e-3) / 1e12;
  };
  double large_sgemm = NAN;
  try {
    const CublasRates large = cublas_ms(handle, stream, 8192, 8192, 8192, rng);
    large_sgemm = tflops(8192, 8192, 8192, large.sgemm_ms);
    std::printf(
        "\ncuBLAS at 8192^3: Sgemm %.1f TFLOP/s, bf16 GemmEx (float32 accumulation) %.1f "
        "TFLOP/s\n",
        large_sgemm, tflops(8192, 8192, 8192, large.bf16_ms));
  } catch (const std::exception& e) {
    report_failure(p, "cuBLAS 8192^3", e);
  }

  std::printf("\nmatmul_quant prefill, M = %zu rows; cuBLAS on the same shape (TFLOP/s)\n",
              kPrefillRows);
  std::printf("%-6s %-6s %-6s %8s %9s %9s %9s %10s %10s %12s\n", "N", "K", "format", "ms", "ours",
              "Sgemm", "bf16", "ours/Sgemm", "ours/bf16", "ours/Sg8192");
  const size_t shapes[][2] = {{1536, 576}, {576, 1536}, {4096, 4096}};
  for (const auto& shape : shapes) {
    const size_t M = kPrefillRows, N = shape[0], K = shape[1];
    CublasRates ref;
    try {
      ref = cublas_ms(handle, stream, M, N, K, rng);
    } catch (const std::exception& e) {
      report_failure(p, "cuBLAS", e);
    }
    const double sgemm = tflops(M, N, K, ref.sgemm_ms), bf16 = tflops(M, N, K, ref.bf16_ms);
    for (k::WeightFormat f :
         {k::WeightFormat::kQ4_1, k::WeightFormat::kQ8_0, k::WeightFormat::kF32}) {
      try {
        const double ms = matmul_quant_ms(b, stream, f, M, N, K, rng);
        const double ours = tflops(M, N, K, ms);
        std::printf("%-6zu %-6zu %-6s %8.3f %9.2f %9.2f %9.2f %10.2f %10.2f %12.2f\n", N, K,
                    k::weight_format_name(f), ms, ours, sgemm, bf16, ours / sgemm, ours / bf16,
                    ours / large_sgemm);
        if (!std::isnan(sgemm)) {
          p.gemm_ratio =
              std::isnan(p.gemm_ratio) ? ours / sgemm : std::min(p.gemm_ratio, ours / sgemm);
        }
        if (N == 4096 && !std::isnan(large_sgemm)) {
          p.gemm_vs_large = std::isnan(p.gemm_vs_large)
                                ? ours / large_sgemm
                                : std::min(p.gemm_vs_large, ours / large_sgemm);
        }
      } catch (const std::exception& e) {
        std::printf("%-6zu %-6zu %-6s ", N, K, k::weight_format_name(f));
        report_failure(p, "matmul_quant", e);
      }
    }
  }
  cublasDestroy(handle);
}

// ---- Ada-KV scoring --------------------------------------------------------------------------

void scoring_part(k::Backend& b, cudaStream_t stream, Printed& p, std::mt19937& rng) {
  // The default model's preset (configs/compression/smollm2-135m.yaml): window 32, look-ahead
  // 16 (both observed in one window_attention_mass), peak scores, avgpool 21, sink 4, shift 3,
  // GQA max.
  const size_t window = 32, lookahead = 16, n_obs = window + lookahead;
  k::ScorePooling pooling;
  pooling.sink = 4;
  pooling.kernel = 21;
  pooling.max_pool = false;
  pooling.shift = 3;
  pooling.gqa_max = true;

  std::printf(
      "\nAda-KV scoring of one layer, %zu-token prompt, %zu observed queries, peak scores\n",
      kContext, n_obs);
  std::printf("%-14s %12s %12s %12s %16s\n", "Hq/Hkv/Dh", "mass ms", "pool ms", "mass+pool",
              "layer ms (host)");
  const size_t shapes[][3] = {{9, 3, 64}, {32, 8, 128}};
  for (const auto& s : shapes) {
    const size_t Hq = s[0], Hkv = s[1], Dh = s[2], n = kContext, prefix = n - n_obs;
    char shape[32];
    std::snprintf(shape, sizeof shape, "%zu/%zu/%zu", Hq, Hkv, Dh);
    try {
      // q rows of the whole prompt, as the forward leaves them; the observed ones are the last.
      k::Buffer q = upload(b, random_floats(n_obs * Hq * Dh, rng, 2.0f));
      k::Buffer kk = upload(b, random_floats(n * Hkv * Dh, rng, 2.0f));
      const float scale = 1.0f / std::sqrt(float(Dh));
      k::Buffer mass = b.allocate(Hq * n * sizeof(float)),
                peak = b.allocate(Hq * n * sizeof(float));
      k::Buffer scores = b.allocate(Hkv * prefix * sizeof(float));
      const auto window_mass = [&] {
        b.window_attention_mass(mass.as<float>(), q.as<float>(), Hq * Dh, kk.as<float>(), Hkv * Dh,
                                n, n_obs, Hq, Hkv, Dh, scale, peak.as<float>());
      };
      const auto pool = [&] {
        b.pool_scores(scores.as<float>(), mass.as<float>(), n, prefix, Hq, Hkv, pooling);
      };
      const double mass_ms = median_ms(stream, 3, 20, window_mass);
      const double pool_ms = median_ms(stream, 3, 20, pool);

      // The whole layer as scorer.cpp runs it: fresh buffers, both pools and both downloads.
      std::vector<float> host_scores(Hkv * prefix), host_peak(Hkv * prefix);
      const auto layer = [&] {
        k::Buffer m = b.allocate(Hq * n * sizeof(float)), pk = b.allocate(Hq * n * sizeof(float));
        b.window_attention_mass(m.as<float>(), q.as<float>(), Hq * Dh, kk.as<float>(), Hkv * Dh, n,
                                n_obs, Hq, Hkv, Dh, scale, pk.as<float>());
        for (auto [src, dst] : {std::pair{&pk, &host_peak}, std::pair{&m, &host_scores}}) {
          k::Buffer out = b.allocate(Hkv * prefix * sizeof(float));
          b.pool_scores(out.as<float>(), src->as<float>(), n, prefix, Hq, Hkv, pooling);
          b.download(dst->data(), out.data(), Hkv * prefix * sizeof(float));
        }
      };
      for (int i = 0; i < 3; ++i) layer();
      std::vector<double> times;
      for (int i = 0; i < 20; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        layer();
        times.push_back(
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                .count());
      }
      const double layer_ms = median(times);
      for (float x : host_scores) {
        if (!std::isfinite(x)) throw std::runtime_error("pool_scores wrote a non-finite score");
      }
      std::printf("%-14s %12.3f %12.3f %12.3f %16.3f\n", shape, mass_ms, pool_ms, mass_ms + pool_ms,
                  layer_ms);
      p.scores_ms = std::isnan(p.scores_ms) ? layer_ms : std::max(p.scores_ms, layer_ms);
    } catch (const std::exception& e) {
      std::printf("%-14s ", shape);
      report_failure(p, "scoring", e);
    }
  }
}

std::string field(double v, const char* format) {
  if (std::isnan(v)) return "n/a";
  char buf[32];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

}  // namespace

int main() {
  std::string why;
  if (!k::cuda_device_available(&why)) {
    std::fprintf(stderr, "adakv_bench_cuda: no usable CUDA device: %s\n", why.c_str());
    return 2;
  }
  Printed p;
  try {
    cudaDeviceProp prop{};
    cuda_ok(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    std::printf("device 0: %s, %d SMs, %.1f GiB\n", prop.name, prop.multiProcessorCount,
                prop.totalGlobalMem / double(1 << 30));
    std::unique_ptr<k::Backend> backend = k::make_cuda_backend(0);
    k::Backend& b = *backend;
    const auto stream = static_cast<cudaStream_t>(b.native_stream());
    std::mt19937 rng(42);

    try {
      p.copy_gbs = copy_bandwidth(b, stream);
    } catch (const std::exception& e) {
      report_failure(p, "copy", e);
    }
    attention_part(b, stream, p, rng);
    gemm_part(b, stream, p, rng);
    scoring_part(b, stream, p, rng);
  } catch (const std::exception& e) {
    report_failure(p, "setup", e);
  }
  std::printf(
      "\nsummary copy_gbs=%s attention_ratio=%s gemm_ratio=%s gemm_vs_large=%s "
      "scores_ms=%s failed=%d\n",
      field(p.copy_gbs, "%.0f").c_str(), field(p.attention_ratio, "%.3f").c_str(),
      field(p.gemm_ratio, "%.3f").c_str(), field(p.gemm_vs_large, "%.3f").c_str(),
      field(p.scores_ms, "%.3f").c_str(), p.failed ? 1 : 0);
  return p.failed ? 1 : 0;
}

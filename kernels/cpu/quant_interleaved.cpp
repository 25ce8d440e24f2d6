// Weights interleaved in groups of 16 rows (WeightLayout::kInterleaved, kernels/quant.h): the
// layout, its API, the dispatch of products on it and the scalar reference level. On the float
// paths every level computes an output as acc = fma(W[n][k], x[m][k], acc) for k = 0, 1, ...,
// K - 1 from acc = 0, with W[n][k] the value dequantization gives (Q8_0 d q, Q4_0 d (q - 8),
// Q4_1 d q + m: exact products, one rounding). The int16 dots (scalar here, AVX-512 VNNI in
// quant_interleaved_int16_avx512.cpp; other levels run the scalar code) take per block the exact
// integer dot, then acc = fma(float(isum), dw * dx, acc) and for Q4_1 acc = fma(mw, sx, acc).
// Either way the levels agree bit for bit and a row's result never depends on its batch, its
// tile or the thread count.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kernels/cpu/blas_threads.h"
#include "kernels/cpu/quant_impl.h"
#include "kernels/quant.h"

namespace adakv::kernels {

using namespace quant_detail;

namespace {

constexpr size_t kG = kInterleaveRows;

// Offsets inside an interleaved block: 16 fp16 d, (Q4_1) 16 fp16 m, then the quants.
size_t quants_offset(WeightFormat f) {
  return f == WeightFormat::kQ4_1 ? 64 : 32;
}

// Element k of row j of an interleaved block, as float32.
float block_weight(WeightFormat f, const uint8_t* blk, size_t k, size_t j) {
  const float d = load_half(blk + 2 * j);
  const uint8_t* q = blk + quants_offset(f);
  if (f == WeightFormat::kQ8_0) return d * static_cast<float>(static_cast<int8_t>(q[k * kG + j]));
  const uint8_t byte = q[(k / 2) * kG + j];
  const int nib = k % 2 ? byte >> 4 : byte & 0x0F;
  if (f == WeightFormat::kQ4_0) return d * static_cast<float>(nib - 8);
  return std::fma(static_cast<float>(nib), d, load_half(blk + 32 + 2 * j));
}

// Element k of a kRows block of 32 (Q8_0, Q4_0, Q4_1), as its stored integer.
int rows_quant(WeightFormat f, const uint8_t* blk, size_t k) {
  if (f == WeightFormat::kQ8_0) return blk[2 + k];
  const uint8_t* qs = blk + (f == WeightFormat::kQ4_1 ? 4 : 2);
  return k < 16 ? qs[k] & 0x0F : qs[k - 16] >> 4;
}

void scalar_dots(const InterleavedJob& job, size_t g0, size_t g1, size_t m0, size_t m1,
                 WeightFormat f) {
  const size_t bb = block_bytes(f) * kG, nb = job.K / 32;
  std::vector<float> acc(kG);
  for (size_t g = g0; g < g1; ++g) {
    const size_t valid = std::min(kG, job.N - g * kG);
    for (size_t m = m0; m < m1; ++m) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (size_t b = 0; b < nb; ++b) {
        const uint8_t* blk = job.w + g * job.group_bytes + b * bb;
        for (size_t k = 0; k < 32; ++k) {
          for (size_t j = 0; j < valid; ++j) {
            acc[j] = std::fma(block_weight(f, blk, k, j), job.xt[(b * 32 + k) * job.M + m], acc[j]);
          }
        }
      }
      float* y = job.y + m * job.ldy + g * kG;
      for (size_t j = 0; j < valid; ++j) y[j] = job.accumulate ? y[j] + acc[j] : acc[j];
    }
  }
}

// Element k of row j of an interleaved block as its integer (Q4_0: the nibble - 8).
int block_quant(WeightFormat f, const uint8_t* blk, size_t k, size_t j) {
  const uint8_t* q = blk + quants_offset(f);
  if (f == WeightFormat::kQ8_0) return static_cast<int8_t>(q[k * kG + j]);
  const uint8_t byte = q[(k / 2) * kG + j];
  const int nib = k % 2 ? byte >> 4 : byte & 0x0F;
  return f == WeightFormat::kQ4_0 ? nib - 8 : nib;
}

// The int16 dots' reference: per block the exact integer dot, then
// acc = fma(float(isum), dw * dx, acc) and, for Q4_1, acc = fma(mw, sx, acc).
void scalar_interleaved_int16(const InterleavedJob& job, size_t g0, size_t g1, size_t m0, size_t m1,
                              WeightFormat f) {
  const size_t bb = block_bytes(f) * kG, nb = job.K / 32;
  for (size_t g = g0; g < g1; ++g) {
    const size_t valid = std::min(kG, job.N - g * kG);
    for (size_t m = m0; m < m1; ++m) {
      float* y = job.y + m * job.ldy + g * kG;
      for (size_t j = 0; j < valid; ++j) {
        float acc = 0;
        for (size_t b = 0; b < nb; ++b) {
          const uint8_t* blk = job.w + g * job.group_bytes + b * bb;
          const int16_t* x = job.xw + m * job.K + b * 32;
          int32_t isum = 0;
          for (size_t k = 0; k < 32; ++k) isum += block_quant(f, blk, k, j) * x[k];
          acc =
              std::fma(static_cast<float>(isum), load_half(blk + 2 * j) * job.xwd[m * nb + b], acc);
          if (f == WeightFormat::kQ4_1) {
            acc = std::fma(load_half(blk + 32 + 2 * j), job.xws[m * nb + b], acc);
          }
        }
        y[j] = job.accumulate ? y[j] + acc : acc;
      }
    }
  }
}

void scalar_panel(const InterleavedJob& job, size_t g, size_t ng, float* panel, WeightFormat f) {
  const size_t bb = block_bytes(f) * kG, nb = job.K / 32, cols = kG * ng;
  for (size_t i = 0; i < ng; ++i) {
    for (size_t b = 0; b < nb; ++b) {
      const uint8_t* blk = job.w + (g + i) * job.group_bytes + b * bb;
      for (size_t k = 0; k < 32; ++k) {
        for (size_t j = 0; j < kG; ++j) {
          panel[(b * 32 + k) * cols + i * kG + j] = block_weight(f, blk, k, j);
        }
      }
    }
  }
}

}  // namespace

bool interleavable(WeightFormat f) {
  return f == WeightFormat::kQ8_0 || f == WeightFormat::kQ4_0 || f == WeightFormat::kQ4_1;
}

size_t interleaved_bytes(WeightFormat f, size_t N, size_t K) {
  if (!interleavable(f)) return 0;
  return (N + kG - 1) / kG * kG * row_bytes(f, K);
}

Status interleave_weights(void* out, const void* w, WeightFormat f, size_t N, size_t K) {
  if (!interleavable(f) || row_bytes(f, K) == 0) return Status::kInvalidArgument;
  if (N == 0) return Status::kOk;
  if (!out || !w) return Status::kInvalidArgument;
  const size_t bb = block_bytes(f), rb = row_bytes(f, K), nb = K / 32, groups = (N + kG - 1) / kG;
  const size_t qo = quants_offset(f);
  const auto* src = static_cast<const uint8_t*>(w);
  auto* dst = static_cast<uint8_t*>(out);
  std::memset(dst, 0, interleaved_bytes(f, N, K));
  for (size_t g = 0; g < groups; ++g) {
    for (size_t b = 0; b < nb; ++b) {
      uint8_t* blk = dst + (g * nb + b) * bb * kG;
      for (size_t j = 0; j < kG && g * kG + j < N; ++j) {
        const uint8_t* s = src + (g * kG + j) * rb + b * bb;
        std::memcpy(blk + 2 * j, s, 2);
        if (f == WeightFormat::kQ4_1) std::memcpy(blk + 32 + 2 * j, s + 2, 2);
        for (size_t k = 0; k < 32; ++k) {
          if (f == WeightFormat::kQ8_0) {
            blk[qo + k * kG + j] = static_cast<uint8_t>(rows_quant(f, s, k));
          } else {
            blk[qo + (k / 2) * kG + j] |=
                static_cast<uint8_t>(rows_quant(f, s, k) << (4 * (k % 2)));
          }
        }
      }
    }
  }
  return Status::kOk;
}

WeightLayout preferred_weight_layout(WeightFormat f) {
  static const bool rows_only = [] {
    const char* v = std::getenv("ADAKV_WEIGHT_LAYOUT");
    return v && std::strcmp(v, "rows") == 0;
  }();
  if (rows_only || !interleavable(f) || quant_level() != QuantLevel::kAvx512) {
    return WeightLayout::kRows;
  }
  // The int16 dots on interleaved weights need VNNI; without it the rows layout's are faster.
  if (decode_dots_path() == MatmulPath::kInt16Dots && !cpu_has_avx512_vnni()) {
    return WeightLayout::kRows;
  }
  return WeightLayout::kInterleaved;
}

namespace quant_detail {

void dequantize_interleaved_row(const uint8_t* w, WeightFormat f, size_t K, size_t n, float* out) {
  const size_t bb = block_bytes(f) * kG, nb = K / 32;
  const uint8_t* group = w + (n / kG) * nb * bb;
  for (size_t b = 0; b < nb; ++b) {
    // + 0: a zero weight reads +0 as the rows layout's lookup gives it (d * 0 is -0 for d < 0).
    for (size_t k = 0; k < 32; ++k) {
      out[b * 32 + k] = block_weight(f, group + b * bb, k, n % kG) + 0.0f;
    }
  }
}

Status matmul_interleaved(float* y, const float* x, const uint8_t* w, WeightFormat f, size_t M,
                          size_t N, size_t K, const MatmulOptions& options) {
  if (!interleavable(f)) return Status::kInvalidArgument;
  if (options.path == MatmulPath::kRowDots) return Status::kInvalidArgument;
  InterleavedJob job{y,
                     options.ldy == 0 ? N : options.ldy,
                     options.accumulate,
                     w,
                     kG * row_bytes(f, K),
                     N,
                     K,
                     x,
                     x,
                     M};
  const size_t groups = (N + kG - 1) / kG;
  const int threads = M * N * K < (size_t{1} << 18) ? 1 : omp_get_max_threads();
  const QuantLevel level = quant_level();
  const bool gemm = options.path == MatmulPath::kFloatGemm ||
                    (options.path == MatmulPath::kAuto && M >= kGemmMinRows);
  if (gemm) {
    // Panels of 4 groups (64 weight rows) decoded to float32 [K][64] once, then one float32
    // GEMM of each row group against each, as the kRows GEMM does.
    constexpr size_t kPanelGroups = 4;
    const InterleavedPanelFn fn = level == QuantLevel::kAvx512 ? avx512_interleaved_panel(f)
                                  : level == QuantLevel::kAvx2 ? avx2_interleaved_panel(f)
                                                               : nullptr;
    const uint32_t one_group = static_cast<uint32_t>(M);
    const uint32_t* rows = options.row_groups ? options.row_groups : &one_group;
    const size_t n_rows = options.row_groups ? options.n_row_groups : 1;
    blas_single_threaded();
#pragma omp parallel num_threads(threads)
    {
      thread_local std::vector<float> panel;
      if (panel.size() < K * kG * kPanelGroups) panel.resize(K * kG * kPanelGroups);
      const size_t nt = static_cast<size_t>(omp_get_num_threads());
      const size_t chunk =
          ((groups + nt - 1) / nt + kPanelGroups - 1) / kPanelGroups * kPanelGroups;
      const size_t q0 = std::min(groups, chunk * static_cast<size_t>(omp_get_thread_num()));
      const size_t q1 = std::min(groups, q0 + chunk);
      for (size_t g = q0; g < q1; g += kPanelGroups) {
        const size_t ng = std::min(q1, g + kPanelGroups) - g;
        if (fn) {
          fn(job, g, ng, panel.data());
        } else {
          scalar_panel(job, g, ng, panel.data(), f);
        }
        const size_t cols = std::min(N - g * kG, ng * kG);
        for (size_t r = 0, m0 = 0; r < n_rows; m0 += rows[r], ++r) {
          if (rows[r] == 0) continue;
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(rows[r]),
                      static_cast<int>(cols), static_cast<int>(K), 1.0f, x + m0 * K,
                      static_cast<int>(K), panel.data(), static_cast<int>(ng * kG),
                      options.accumulate ? 1.0f : 0.0f, y + m0 * job.ldy + g * kG,
                      static_cast<int>(job.ldy));
        }
      }
    }
    return Status::kOk;
  }
  if (options.path == MatmulPath::kInt16Dots) {
    // Activations rounded to 16 bits per 32 elements once per call (workspace grown once), each
    // thread a share of the rows. int32 storage: a row's values read as pairs by the kernel.
    thread_local std::vector<int32_t> xw32;
    thread_local std::vector<int32_t> xpairs;
    thread_local std::vector<float> xws;
    const size_t nb = K / 32;
    if (xw32.size() < M * K / 2) xw32.resize(M * K / 2);
    if (xws.size() < 4 * M * nb) xws.resize(4 * M * nb);
    int16_t* const xw = reinterpret_cast<int16_t*>(xw32.data());
    float* const xd = xws.data();
    float* const xs = xws.data() + M * nb;
    job.xw = xw;
    job.xwd = xd;
    job.xws = xs;
    const auto quantize = level == QuantLevel::kScalar ? quantize_acts16 : avx2_quantize_acts16;
    const InterleavedDotsFn fn =
        level == QuantLevel::kAvx512 ? avx512_interleaved_int16_dots(f) : nullptr;
    // The kernel broadcasts a pair of each row of a tile from one base address: [K / 2][M]
    // pairs and [K / 32][M] scales, which for one row are the row's own arrays.
    const bool transpose = fn && M > 1;
    if (fn) {
      if (transpose && xpairs.size() < M * K / 2) xpairs.resize(M * K / 2);
      job.xpairs = transpose ? xpairs.data() : xw32.data();
      job.xwdt = transpose ? xws.data() + 2 * M * nb : xd;
      job.xwst = transpose ? xws.data() + 3 * M * nb : xs;
    }
    // Thread-locals are the calling thread's: the region uses these pointers.
    const int32_t* const row_pairs = xw32.data();
    int32_t* const pairs_out = xpairs.data();
    float* const xdt = xws.data() + 2 * M * nb;
    float* const xst = xws.data() + 3 * M * nb;
#pragma omp parallel num_threads(threads)
    {
      const size_t nt = static_cast<size_t>(omp_get_num_threads());
      const size_t t = static_cast<size_t>(omp_get_thread_num());
      const size_t rows = (M + nt - 1) / nt;
      const size_t m0 = std::min(M, rows * t), m1 = std::min(M, m0 + rows);
      if (m1 > m0) quantize(x, m0, m1, K, xw, xd, xs);
#pragma omp barrier
      if (transpose) {
        const size_t blocks = (nb + nt - 1) / nt;
        const size_t b0 = std::min(nb, blocks * t), b1 = std::min(nb, b0 + blocks);
        for (size_t i = b0 * 16; i < b1 * 16; ++i) {
          for (size_t m = 0; m < M; ++m) pairs_out[i * M + m] = row_pairs[m * K / 2 + i];
        }
        for (size_t b = b0; b < b1; ++b) {
          for (size_t m = 0; m < M; ++m) {
            xdt[b * M + m] = xd[m * nb + b];
            xst[b * M + m] = xs[m * nb + b];
          }
        }
#pragma omp barrier
      }
      const size_t chunk = (groups + nt - 1) / nt;
      const size_t g0 = std::min(groups, chunk * t);
      const size_t g1 = std::min(groups, g0 + chunk);
      if (g1 > g0) {
        if (fn) {
          fn(job, g0, g1, 0, M);
        } else {
          scalar_interleaved_int16(job, g0, g1, 0, M, f);
        }
      }
    }
    return Status::kOk;
  }
  // The kernels broadcast x[m][k] for the rows of a tile from one base address: x is
  // transposed first, each thread its share of the columns, then every thread runs its groups.
  thread_local std::vector<float> xt;
  if (M > 1) {
    if (xt.size() < M * K) xt.resize(M * K);
    job.xt = xt.data();
  }
  const InterleavedDotsFn fn = level == QuantLevel::kAvx512 ? avx512_interleaved_dots(f)
                               : level == QuantLevel::kAvx2 ? avx2_interleaved_dots(f)
                                                            : nullptr;
  float* const xt_out = xt.data();
#pragma omp parallel num_threads(threads)
  {
    const size_t nt = static_cast<size_t>(omp_get_num_threads());
    const size_t t = static_cast<size_t>(omp_get_thread_num());
    if (M > 1) {
      const size_t cols = (K / 16 + nt - 1) / nt * 16;
      const size_t k0 = std::min(K, cols * t), k1 = std::min(K, k0 + cols);
      if (level == QuantLevel::kAvx512) {
        avx512_transpose(x, M, K, k0, k1, xt_out);
      } else {
        for (size_t m = 0; m < M; ++m) {
          for (size_t k = k0; k < k1; ++k) xt_out[k * M + m] = x[m * K + k];
        }
      }
#pragma omp barrier
    }
    const size_t chunk = (groups + nt - 1) / nt;
    const size_t g0 = std::min(groups, chunk * t);
    const size_t g1 = std::min(groups, g0 + chunk);
    if (g1 > g0) {
      if (fn) {
        fn(job, g0, g1, 0, M);
      } else {
        scalar_dots(job, g0, g1, 0, M, f);
      }
    }
  }
  return Status::kOk;
}

}  // namespace quant_detail
}  // namespace adakv::kernels

// matmul_quant: products against weights kept in their ggml block formats (kernels/quant.h).
//
// Speed strategy. Decode is memory-bound: every weight byte is read once per token, so the
// kernels read the blocks as stored and never expand a row to float32 in memory.
//  - Quantized formats (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K): each activation row is
//    quantized once per call to 8 bits per 32 elements (scale d = max|x| / 127, 32 int8 and
//    s = d * their sum, the term a format's min/offset needs). A weight block of 32 is unpacked
//    in registers to 32 small integers; the dot product with the int8 activations is exact in
//    int32 (AVX2: _mm256_maddubs_epi16 then _mm256_madd_epi16; AVX-512BW the same on two blocks
//    at once); each block then adds dw * dx * dot (+ mw * s) in float32. Q6_K's two scales per
//    32 elements enter the madd as 16-bit factors.
//  - F32, F16, BF16: converted to float32 in registers and multiplied with FMA.
//  - Float dots (MatmulPath::kFloatDots, the model's decode path): activations stay float32.
//    AVX-512 and AVX2 convert each weight piece to float32 in registers (AVX-512: Q4_0/Q4_1 by a
//    16-entry table) and multiply it with a tile of activation rows (AVX-512: 4 weight rows x up
//    to 4 activation rows, or 2 x 8; AVX2: 8 x 1 up to 1 x 8; AVX2 batches of 8 rows or more
//    decode each group of 6 weight rows to a float32 panel once and run tiles of 3 x 4 on it);
//    each output has one accumulator whose FMA sequence does not depend on the tile, so a row's
//    result is the same alone and in any batch. The scalar level decodes small float32 panels
//    in L1.
//  - Int16 dots (MatmulPath::kInt16Dots, the decode path of --decode-dots int16; on AVX2
//    converting weights to float32 costs about twice the instructions of integer products; the
//    AVX-512 level runs the AVX2 kernel on rows, VNNI on interleaved weights): activations
//    rounded to 16 bits per 32 elements (d = max|x| / 32767), each weight piece widened to
//    int16 once per tile of activation rows and multiplied pairwise (vpmaddwd, exact in int32),
//    then y += float(isum) * (dw * dx); a format's min adds mw times the float sum of the
//    activation block. Tiles and order as for float dots, so a row's result does not depend on
//    its batch (quant_int16_avx2.cpp; scalar reference here).
//  - 1 < M < 32 (batched decode): activation rows are taken in tiles (64 quantized, 16 float);
//    within a tile a weight row is decoded once per group of 4 activation rows and stays in L1
//    for the other groups, so the weights stream from memory once per tile, not per row.
//  - M >= 32 (prefill): compute-bound, where OpenBLAS's float32 GEMM, blocked for registers
//    and caches, does more multiply-adds per cycle than the int8 dot products (each 32-element
//    block of which also pays its unpacking and float scaling): each thread decodes panels of 64
//    weight rows to float32 (in L2) and runs one sgemm of all M rows against each panel; the
//    weights are read once per call and the result is float32-exact (no activation rounding).
//  - Threads split N (output columns); a y element is computed by one thread in a fixed order,
//    so results do not depend on the thread count.
//  - Interleaved weights (WeightLayout::kInterleaved, AVX-512's choice for Q8_0 / Q4_0 / Q4_1):
//    quant_interleaved.cpp; one vector holds an element of 16 weight rows, each output one FMA
//    chain along K (float dots), or a pair of elements multiplied by vpdpwssd (int16 dots).
// The level (scalar / AVX2+FMA+F16C / AVX-512 F+BW+VL) is picked by CPUID at first use; each
// SIMD file compiles its functions with __attribute__((target(...))), so the choice is real
// without -march=native. This file holds the API, the dispatch, the activation quantizer and
// the scalar reference level.
#include <cblas.h>
#include <cpuid.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/cpu/blas_threads.h"
#include "kernels/cpu/quant_impl.h"
#include "kernels/cpu_threads.h"
#include "kernels/quant.h"

namespace adakv::kernels {

using namespace quant_detail;

namespace {

struct FormatInfo {
  WeightFormat f;
  const char* name;
  uint32_t block_elements;
  uint32_t block_bytes;
};

constexpr FormatInfo kFormats[] = {
    {WeightFormat::kF32, "F32", 1, 4},       {WeightFormat::kF16, "F16", 1, 2},
    {WeightFormat::kBF16, "BF16", 1, 2},     {WeightFormat::kQ8_0, "Q8_0", 32, 34},
    {WeightFormat::kQ4_0, "Q4_0", 32, 18},   {WeightFormat::kQ4_1, "Q4_1", 32, 20},
    {WeightFormat::kQ5_0, "Q5_0", 32, 22},   {WeightFormat::kQ5_1, "Q5_1", 32, 24},
    {WeightFormat::kQ4_K, "Q4_K", 256, 144}, {WeightFormat::kQ5_K, "Q5_K", 256, 176},
    {WeightFormat::kQ6_K, "Q6_K", 256, 210},
};

const FormatInfo* find_format(uint32_t id) {
  for (const FormatInfo& fi : kFormats) {
    if (static_cast<uint32_t>(fi.f) == id) return &fi;
  }
  return nullptr;
}

// F16C from CPUID itself: clang before 16 does not know "f16c" in __builtin_cpu_supports.
bool cpu_has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
}

bool cpu_has(QuantLevel level) {
  switch (level) {
    case QuantLevel::kScalar:
      return true;
    case QuantLevel::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
    case QuantLevel::kAvx512:
      return cpu_has(QuantLevel::kAvx2) && __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  }
  return false;
}

std::atomic<int> g_level{-1};  // -1: not chosen yet

constexpr size_t kPanel = 64;

// ---- Scalar reference level -------------------------------------------------------------

// One 32-element piece of a weight row as integers: w[i] = dw * s16[i / 16] * q[i] + mw.
struct Piece {
  int q[32];
  int s16[2] = {1, 1};
  float dw = 0;
  float mw = 0;
};

// Unpacks the j-th 32-element piece of a row of format F.
template <WeightFormat F>
void piece(const uint8_t* row, size_t j, Piece& p) {
  if constexpr (F == WeightFormat::kQ8_0) {
    const uint8_t* b = row + j * 34;
    p.dw = load_half(b);
    for (int l = 0; l < 32; ++l) p.q[l] = static_cast<int8_t>(b[2 + l]);
  } else if constexpr (F == WeightFormat::kQ4_0 || F == WeightFormat::kQ4_1) {
    constexpr bool kMin = F == WeightFormat::kQ4_1;
    const uint8_t* b = row + j * (kMin ? 20 : 18);
    p.dw = load_half(b);
    if (kMin) p.mw = load_half(b + 2);
    const uint8_t* qs = b + (kMin ? 4 : 2);
    const int off = kMin ? 0 : 8;
    for (int l = 0; l < 16; ++l) {
      p.q[l] = (qs[l] & 0x0F) - off;
      p.q[l + 16] = (qs[l] >> 4) - off;
    }
  } else if constexpr (F == WeightFormat::kQ5_0 || F == WeightFormat::kQ5_1) {
    constexpr bool kMin = F == WeightFormat::kQ5_1;
    const uint8_t* b = row + j * (kMin ? 24 : 22);
    p.dw = load_half(b);
    if (kMin) p.mw = load_half(b + 2);
    const uint32_t qh = load_u32(b + (kMin ? 4 : 2));
    const uint8_t* qs = b + (kMin ? 8 : 6);
    const int off = kMin ? 0 : 16;
    for (int l = 0; l < 16; ++l) {
      p.q[l] = ((qs[l] & 0x0F) | static_cast<int>(((qh >> l) & 1) << 4)) - off;
      p.q[l + 16] = ((qs[l] >> 4) | static_cast<int>(((qh >> (l + 16)) & 1) << 4)) - off;
    }
  } else if constexpr (F == WeightFormat::kQ4_K || F == WeightFormat::kQ5_K) {
    constexpr bool k5 = F == WeightFormat::kQ5_K;
    const uint8_t* b = row + (j / 8) * (k5 ? 176 : 144);
    const int sub = static_cast<int>(j % 8);
    int sc[8], mn[8];
    k_scales_mins(b + 4, sc, mn);
    p.dw = load_half(b) * static_cast<float>(sc[sub]);
    p.mw = -(load_half(b + 2) * static_cast<float>(mn[sub]));
    const uint8_t* qh = b + 16;
    const uint8_t* qs = b + (k5 ? 48 : 16);
    const int c = sub / 2, h = sub % 2;
    for (int l = 0; l < 32; ++l) {
      int q = (qs[c * 32 + l] >> (4 * h)) & 0x0F;
      if (k5) q |= ((qh[l] >> sub) & 1) << 4;
      p.q[l] = q;
    }
  } else if constexpr (F == WeightFormat::kQ6_K) {
    const uint8_t* b = row + (j / 8) * 210;
    const int sub = static_cast<int>(j % 8);
    const int c = sub / 4, g = sub % 4;
    const uint8_t* ql = b + c * 64 + (g % 2) * 32;
    const uint8_t* qh = b + 128 + c * 32;
    const int8_t* scales = reinterpret_cast<const int8_t*>(b + 192);
    p.dw = load_half(b + 208);
    p.s16[0] = scales[8 * c + 2 * g];
    p.s16[1] = scales[8 * c + 2 * g + 1];
    for (int l = 0; l < 32; ++l) {
      const int lo = (ql[l] >> (4 * (g / 2))) & 0x0F;
      const int hi = (qh[l] >> (2 * g)) & 0x03;
      p.q[l] = (lo | (hi << 4)) - 32;
    }
  }
}

template <WeightFormat F>
void scalar_rows_quant(const Job& job, size_t n0, size_t n1, size_t m0, size_t m1) {
  const size_t nb = job.K / kActBlock;
  Piece p;
  for (size_t n = n0; n < n1; ++n) {
    const uint8_t* row = job.w + n * job.row_bytes;
    for (size_t m = m0; m < m1; ++m) {
      const int8_t* xq = job.xq + m * job.K;
      const float* xd = job.xd + m * nb;
      const float* xs = job.xs + m * nb;
      float acc = 0, macc = 0;
      for (size_t j = 0; j < nb; ++j) {
        piece<F>(row, j, p);
        int32_t s0 = 0, s1 = 0;
        for (int l = 0; l < 16; ++l) s0 += p.q[l] * xq[j * 32 + l];
        for (int l = 16; l < 32; ++l) s1 += p.q[l] * xq[j * 32 + l];
        const int32_t isum = p.s16[0] * s0 + p.s16[1] * s1;
        acc += static_cast<float>(isum) * (p.dw * xd[j]);
        macc += p.mw * xs[j];
      }
      store(job, m, n, acc + macc);
    }
  }
}

// The int16-dots reference: per piece the exact integer dot of the int16 weights (Q6_K's
// 16-element scales multiplied in) with the int16 activations, scaled by dw * dx; a format's
// min adds mw * (the float sum of the activation block).
template <WeightFormat F>
void scalar_int16_rows(const Job& job, size_t n0, size_t n1, size_t m0, size_t m1) {
  const size_t nb = job.K / kActBlock;
  Piece p;
  for (size_t n = n0; n < n1; ++n) {
    const uint8_t* row = job.w + n * job.row_bytes;
    for (size_t m = m0; m < m1; ++m) {
      const int16_t* xw = job.xw + m * job.K;
      float acc = 0, macc = 0;
      for (size_t j = 0; j < nb; ++j) {
        piece<F>(row, j, p);
        int64_t isum = 0;
        for (int l = 0; l < 32; ++l) isum += int64_t{p.s16[l / 16]} * p.q[l] * xw[j * 32 + l];
        acc += static_cast<float>(isum) * (p.dw * job.xwd[m * nb + j]);
        macc += p.mw * job.xws[m * nb + j];
      }
      store(job, m, n, acc + macc);
    }
  }
}

template <WeightFormat F>
float weight_at(const uint8_t* row, size_t k) {
  if constexpr (F == WeightFormat::kF32) {
    float v;
    std::memcpy(&v, row + 4 * k, 4);
    return v;
  } else if constexpr (F == WeightFormat::kF16) {
    return fp16_to_fp32(load_u16(row + 2 * k));
  } else {
    return bf16_to_fp32(load_u16(row + 2 * k));
  }
}

template <WeightFormat F>
void scalar_rows_float(const Job& job, size_t n0, size_t n1, size_t m0, size_t m1) {
  for (size_t n = n0; n < n1; ++n) {
    const uint8_t* row = job.w + n * job.row_bytes;
    for (size_t m = m0; m < m1; ++m) {
      const float* x = job.x + m * job.K;
      // Eight partial sums, as the SIMD levels keep, then summed pairwise.
      float acc[8] = {};
      size_t k = 0;
      for (; k + 8 <= job.K; k += 8) {
        for (int i = 0; i < 8; ++i) acc[i] += weight_at<F>(row, k + i) * x[k + i];
      }
      for (; k < job.K; ++k) acc[0] += weight_at<F>(row, k) * x[k];
      store(job, m, n,
            ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])));
    }
  }
}

// The values decode_blocks gives (those of the GGUF reader).
template <WeightFormat F>
void scalar_dequant_rows(const Job& job, size_t n0, size_t n1, float* out) {
  for (size_t n = n0; n < n1; ++n, out += job.K)
    decode_blocks(F, job.w + n * job.row_bytes, out, job.K);
}

// Quantizes rows [m0, m1) of x: per 32 elements d = max|x| / 127, q = round(x / d), s = d * sum q.
void quantize_acts(const float* x, size_t m0, size_t m1, size_t K, int8_t* xq, float* xd,
                   float* xs) {
  const size_t nb = K / kActBlock;
  for (size_t m = m0; m < m1; ++m) {
    for (size_t j = 0; j < nb; ++j) {
      const float* v = x + m * K + j * kActBlock;
      float amax = 0;
      for (size_t l = 0; l < kActBlock; ++l) amax = std::max(amax, std::fabs(v[l]));
      const float d = amax / 127.0f;
      const float id = d > 0 ? 1.0f / d : 0.0f;
      int8_t* q = xq + m * K + j * kActBlock;
      int sum = 0;
      for (size_t l = 0; l < kActBlock; ++l) {
        const int qi = static_cast<int>(std::nearbyint(v[l] * id));
        q[l] = static_cast<int8_t>(std::clamp(qi, -127, 127));
        sum += q[l];
      }
      xd[m * nb + j] = d;
      xs[m * nb + j] = d * static_cast<float>(sum);
    }
  }
}

}  // namespace

namespace quant_detail {

void quantize_acts16(const float* x, size_t m0, size_t m1, size_t K, int16_t* xw, float* xd,
                     float* xs) {
  const size_t nb = K / kActBlock;
  for (size_t m = m0; m < m1; ++m) {
    for (size_t j = 0; j < nb; ++j) {
      const float* v = x + m * K + j * kActBlock;
      float amax = 0, lane[8];
      for (size_t l = 0; l < kActBlock; ++l) amax = std::max(amax, std::fabs(v[l]));
      for (size_t i = 0; i < 8; ++i) lane[i] = (((0.0f + v[i]) + v[8 + i]) + v[16 + i]) + v[24 + i];
      for (size_t i = 0; i < 4; ++i) lane[i] += lane[i + 4];
      const float sum = (lane[0] + lane[2]) + (lane[1] + lane[3]);
      const float d = amax / 32767.0f;
      const float id = d > 0 ? 1.0f / d : 0.0f;
      int16_t* q = xw + m * K + j * kActBlock;
      for (size_t l = 0; l < kActBlock; ++l) {
        q[l] = static_cast<int16_t>(
            std::clamp(static_cast<int>(std::nearbyint(v[l] * id)), -32767, 32767));
      }
      xd[m * nb + j] = d;
      xs[m * nb + j] = sum;
    }
  }
}

RowsFn scalar_int16_dots(WeightFormat f) {
  switch (f) {
    case WeightFormat::kQ8_0:
      return scalar_int16_rows<WeightFormat::kQ8_0>;
    case WeightFormat::kQ4_0:
      return scalar_int16_rows<WeightFormat::kQ4_0>;
    case WeightFormat::kQ4_1:
      return scalar_int16_rows<WeightFormat::kQ4_1>;
    case WeightFormat::kQ5_0:
      return scalar_int16_rows<WeightFormat::kQ5_0>;
    case WeightFormat::kQ5_1:
      return scalar_int16_rows<WeightFormat::kQ5_1>;
    case WeightFormat::kQ4_K:
      return scalar_int16_rows<WeightFormat::kQ4_K>;
    case WeightFormat::kQ5_K:
      return scalar_int16_rows<WeightFormat::kQ5_K>;
    case WeightFormat::kQ6_K:
      return scalar_int16_rows<WeightFormat::kQ6_K>;
    default:
      return nullptr;
  }
}

RowsFn scalar_rows(WeightFormat f) {
  switch (f) {
    case WeightFormat::kF32:
      return scalar_rows_float<WeightFormat::kF32>;
    case WeightFormat::kF16:
      return scalar_rows_float<WeightFormat::kF16>;
    case WeightFormat::kBF16:
      return scalar_rows_float<WeightFormat::kBF16>;
    case WeightFormat::kQ8_0:
      return scalar_rows_quant<WeightFormat::kQ8_0>;
    case WeightFormat::kQ4_0:
      return scalar_rows_quant<WeightFormat::kQ4_0>;
    case WeightFormat::kQ4_1:
      return scalar_rows_quant<WeightFormat::kQ4_1>;
    case WeightFormat::kQ5_0:
      return scalar_rows_quant<WeightFormat::kQ5_0>;
    case WeightFormat::kQ5_1:
      return scalar_rows_quant<WeightFormat::kQ5_1>;
    case WeightFormat::kQ4_K:
      return scalar_rows_quant<WeightFormat::kQ4_K>;
    case WeightFormat::kQ5_K:
      return scalar_rows_quant<WeightFormat::kQ5_K>;
    case WeightFormat::kQ6_K:
      return scalar_rows_quant<WeightFormat::kQ6_K>;
  }
  return nullptr;
}

DequantFn scalar_dequant(WeightFormat f) {
  switch (f) {
    case WeightFormat::kF32:
      return scalar_dequant_rows<WeightFormat::kF32>;
    case WeightFormat::kF16:
      return scalar_dequant_rows<WeightFormat::kF16>;
    case WeightFormat::kBF16:
      return scalar_dequant_rows<WeightFormat::kBF16>;
    case WeightFormat::kQ8_0:
      return scalar_dequant_rows<WeightFormat::kQ8_0>;
    case WeightFormat::kQ4_0:
      return scalar_dequant_rows<WeightFormat::kQ4_0>;
    case WeightFormat::kQ4_1:
      return scalar_dequant_rows<WeightFormat::kQ4_1>;
    case WeightFormat::kQ5_0:
      return scalar_dequant_rows<WeightFormat::kQ5_0>;
    case WeightFormat::kQ5_1:
      return scalar_dequant_rows<WeightFormat::kQ5_1>;
    case WeightFormat::kQ4_K:
      return scalar_dequant_rows<WeightFormat::kQ4_K>;
    case WeightFormat::kQ5_K:
      return scalar_dequant_rows<WeightFormat::kQ5_K>;
    case WeightFormat::kQ6_K:
      return scalar_dequant_rows<WeightFormat::kQ6_K>;
  }
  return nullptr;
}

}  // namespace quant_detail

bool is_weight_format(uint32_t ggml_type_id) {
  return find_format(ggml_type_id) != nullptr;
}

const char* weight_format_name(WeightFormat f) {
  const FormatInfo* fi = find_format(static_cast<uint32_t>(f));
  return fi ? fi->name : "unknown";
}

size_t block_elements(WeightFormat f) {
  const FormatInfo* fi = find_format(static_cast<uint32_t>(f));
  return fi ? fi->block_elements : 0;
}

size_t block_bytes(WeightFormat f) {
  const FormatInfo* fi = find_format(static_cast<uint32_t>(f));
  return fi ? fi->block_bytes : 0;
}

size_t row_bytes(WeightFormat f, size_t K) {
  const FormatInfo* fi = find_format(static_cast<uint32_t>(f));
  if (!fi || K == 0 || K % fi->block_elements != 0) return 0;
  return K / fi->block_elements * fi->block_bytes;
}

const char* quant_level_name(QuantLevel level) {
  switch (level) {
    case QuantLevel::kScalar:
      return "scalar";
    case QuantLevel::kAvx2:
      return "avx2";
    case QuantLevel::kAvx512:
      return "avx512";
  }
  return "unknown";
}

namespace quant_detail {
bool cpu_has_avx512_vnni() {
  static const bool has = cpu_has(QuantLevel::kAvx512) && __builtin_cpu_supports("avx512vnni");
  return has;
}
}  // namespace quant_detail

bool cpu_supports(QuantLevel level) {
  return cpu_has(level);
}

QuantLevel best_quant_level() {
  static const QuantLevel best = cpu_has(QuantLevel::kAvx512) ? QuantLevel::kAvx512
                                 : cpu_has(QuantLevel::kAvx2) ? QuantLevel::kAvx2
                                                              : QuantLevel::kScalar;
  return best;
}

bool set_quant_level(QuantLevel level) {
  if (!cpu_has(level)) return false;
  g_level.store(static_cast<int>(level));
  return true;
}

QuantLevel quant_level() {
  const int l = g_level.load();
  return l < 0 ? best_quant_level() : static_cast<QuantLevel>(l);
}

namespace {
std::atomic<bool> g_decode_int16{true};
}  // namespace

void set_decode_dots(MatmulPath path) {
  g_decode_int16.store(path == MatmulPath::kInt16Dots);
}

MatmulPath decode_dots_path() {
  return g_decode_int16.load() ? MatmulPath::kInt16Dots : MatmulPath::kFloatDots;
}

Status matmul_quant(float* y, const float* x, const void* w, WeightFormat f, size_t M, size_t N,
                    size_t K, const MatmulOptions& options, Stream) {
  const FormatInfo* fi = find_format(static_cast<uint32_t>(f));
  if (!fi || K == 0 || K % fi->block_elements != 0) return Status::kInvalidArgument;
  const size_t ldy = options.ldy == 0 ? N : options.ldy;
  if (ldy < N) return Status::kInvalidArgument;
  if (M == 0 || N == 0) return Status::kOk;
  if (!y || !x || !w) return Status::kInvalidArgument;
  const uint32_t one_group = static_cast<uint32_t>(M);
  const uint32_t* groups = options.row_groups ? options.row_groups : &one_group;
  const size_t n_groups = options.row_groups ? options.n_row_groups : 1;
  if (options.row_groups) {
    size_t rows = 0;
    for (size_t i = 0; i < n_groups; ++i) rows += groups[i];
    if (rows != M) return Status::kInvalidArgument;
  }
  if (options.layout == WeightLayout::kInterleaved) {
    return matmul_interleaved(y, x, static_cast<const uint8_t*>(w), f, M, N, K, options);
  }

  RowsFn fn = nullptr;
  switch (quant_level()) {
    case QuantLevel::kAvx512:
      fn = avx512_rows(f);
      break;
    case QuantLevel::kAvx2:
      fn = avx2_rows(f);
      break;
    case QuantLevel::kScalar:
      fn = scalar_rows(f);
      break;
  }
  if (!fn) return Status::kInvalidArgument;

  Job job{};
  job.y = y;
  job.N = N;
  job.ldy = ldy;
  job.accumulate = options.accumulate;
  job.w = static_cast<const uint8_t*>(w);
  job.row_bytes = row_bytes(f, K);
  job.K = K;
  job.x = x;

  const size_t work = M * N * K;
  const int threads = work < (size_t{1} << 18) ? 1 : omp_get_max_threads();

  const bool gemm = options.path == MatmulPath::kFloatGemm ||
                    (options.path == MatmulPath::kAuto && M >= kGemmMinRows);
  if (gemm) {
    // Prefill: panels of kPanel weight rows decoded to float32 once, then one float32 GEMM of
    // each row group against each (OpenBLAS, single-threaded inside each OpenMP thread). Panels
    // sit at multiples of kPanel whatever the thread count, so results do not depend on it.
    const DequantFn dq = quant_level() == QuantLevel::kScalar ? scalar_dequant(f) : avx2_dequant(f);
    blas_single_threaded();
#pragma omp parallel num_threads(threads)
    {
      thread_local std::vector<float> panel;
      const size_t nt = static_cast<size_t>(omp_get_num_threads());
      const size_t chunk = ((N + nt - 1) / nt + kPanel - 1) / kPanel * kPanel;
      const size_t n0 = std::min(N, chunk * static_cast<size_t>(omp_get_thread_num()));
      const size_t n1 = std::min(N, n0 + chunk);
      for (size_t p0 = n0; p0 < n1; p0 += kPanel) {
        const size_t np = std::min(n1, p0 + kPanel) - p0;
        const float* wp;
        if (f == WeightFormat::kF32) {
          wp = reinterpret_cast<const float*>(job.w + p0 * job.row_bytes);
        } else {
          if (panel.size() < np * K) panel.resize(np * K);
          dq(job, p0, p0 + np, panel.data());
          wp = panel.data();
        }
        for (size_t g = 0, m0 = 0; g < n_groups; m0 += groups[g], ++g) {
          if (groups[g] == 0) continue;
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(groups[g]),
                      static_cast<int>(np), static_cast<int>(K), 1.0f, x + m0 * K,
                      static_cast<int>(K), wp, static_cast<int>(K),
                      options.accumulate ? 1.0f : 0.0f, y + m0 * ldy + p0, static_cast<int>(ldy));
        }
      }
    }
    return Status::kOk;
  }

  if (options.path == MatmulPath::kInt16Dots && !is_float_format(f)) {
    // Activations rounded to 16 bits per 32 elements once per call (the caller's workspace,
    // grown once and reused), weights widened to int16: products exact in int32.
    const bool simd = quant_level() != QuantLevel::kScalar;
    const RowsFn rows16 = simd ? avx2_int16_dots(f) : scalar_int16_dots(f);
    thread_local std::vector<int16_t> xw;
    thread_local std::vector<float> xws;
    const size_t nb = K / kActBlock;
    if (xw.size() < M * K) xw.resize(M * K);
    if (xws.size() < 2 * M * nb) xws.resize(2 * M * nb);
    (simd ? avx2_quantize_acts16 : quantize_acts16)(x, 0, M, K, xw.data(), xws.data(),
                                                    xws.data() + M * nb);
    job.xw = xw.data();
    job.xwd = xws.data();
    job.xws = xws.data() + M * nb;
    fn = rows16;  // the shared row loop below, on the int16 activations
  }

  RowsFn fused = nullptr;
  if (options.path == MatmulPath::kFloatDots) {
    fused = quant_level() == QuantLevel::kAvx512 ? avx512_float_dots(f)
            : quant_level() == QuantLevel::kAvx2 ? avx2_float_dots(f)
                                                 : nullptr;
  }
  if (fused) {
    fn = fused;  // the shared row loop below, weights converted to float32 in registers
  } else if (options.path == MatmulPath::kFloatDots && !is_float_format(f)) {
    // Scalar level: panels of weight rows decoded to float32 (small enough to stay in L1), then
    // the float32 row kernel over all M rows. A panel's rows are independent, so the panel size
    // changes nothing in the results.
    const DequantFn dq = scalar_dequant(f);
    const RowsFn frows = scalar_rows(WeightFormat::kF32);
    const size_t panel_rows = std::max<size_t>(1, (size_t{32} << 10) / (K * sizeof(float)));
#pragma omp parallel num_threads(threads)
    {
      thread_local std::vector<float> panel;
      if (panel.size() < panel_rows * K) panel.resize(panel_rows * K);
      const size_t nt = static_cast<size_t>(omp_get_num_threads());
      const size_t chunk = (N + nt - 1) / nt;
      const size_t n0 = std::min(N, chunk * static_cast<size_t>(omp_get_thread_num()));
      const size_t n1 = std::min(N, n0 + chunk);
      for (size_t p0 = n0; p0 < n1; p0 += panel_rows) {
        const size_t np = std::min(n1, p0 + panel_rows) - p0;
        dq(job, p0, p0 + np, panel.data());
        Job fj = job;
        fj.y = y + p0;
        fj.w = reinterpret_cast<const uint8_t*>(panel.data());
        fj.row_bytes = K * sizeof(float);
        for (size_t m0 = 0; m0 < M; m0 += 16) frows(fj, 0, np, m0, std::min(M, m0 + 16));
      }
    }
    return Status::kOk;
  }

  // The caller's workspace for the quantized activations, grown once and reused.
  thread_local std::vector<int8_t> xq;
  thread_local std::vector<float> xds;
  const bool quantized = !is_float_format(f) && options.path != MatmulPath::kFloatDots &&
                         options.path != MatmulPath::kInt16Dots;
  if (quantized) {
    const size_t nb = K / kActBlock;
    if (xq.size() < M * K) xq.resize(M * K);
    if (xds.size() < 2 * M * nb) xds.resize(2 * M * nb);
    int8_t* q = xq.data();
    float* d = xds.data();
    float* s = xds.data() + M * nb;
    if (M >= 8 && threads > 1) {
#pragma omp parallel for num_threads(threads) schedule(static)
      for (size_t m = 0; m < M; ++m) quantize_acts(x, m, m + 1, K, q, d, s);
    } else {
      quantize_acts(x, 0, M, K, q, d, s);
    }
    job.xq = q;
    job.xd = d;
    job.xs = s;
  }

  const size_t m_tile = quantized ? 64 : 16;
#pragma omp parallel num_threads(threads)
  {
    const size_t nt = static_cast<size_t>(omp_get_num_threads());
    const size_t chunk = (N + nt - 1) / nt;
    const size_t n0 = std::min(N, chunk * static_cast<size_t>(omp_get_thread_num()));
    const size_t n1 = std::min(N, n0 + chunk);
    if (n1 > n0) {
      for (size_t m0 = 0; m0 < M; m0 += m_tile) fn(job, n0, n1, m0, std::min(M, m0 + m_tile));
    }
  }
  return Status::kOk;
}

Status dequantize_rows(float* out, const void* w, WeightFormat f, const int32_t* ids, size_t T,
                       size_t n_rows, size_t dim, WeightLayout layout, Stream) {
  const FormatInfo* fi = find_format(static_cast<uint32_t>(f));
  if (!fi || dim == 0 || dim % fi->block_elements != 0) return Status::kInvalidArgument;
  if (T == 0) return Status::kOk;
  if (!out || !w || !ids) return Status::kInvalidArgument;
  for (size_t t = 0; t < T; ++t) {
    if (ids[t] < 0 || static_cast<size_t>(ids[t]) >= n_rows) return Status::kInvalidArgument;
  }
  if (layout == WeightLayout::kInterleaved) {
    if (!interleavable(f)) return Status::kInvalidArgument;
    for (size_t t = 0; t < T; ++t) {
      dequantize_interleaved_row(static_cast<const uint8_t*>(w), f, dim,
                                 static_cast<size_t>(ids[t]), out + t * dim);
    }
    return Status::kOk;
  }
  const DequantFn dq = quant_level() == QuantLevel::kScalar ? scalar_dequant(f) : avx2_dequant(f);
  Job job{};
  job.row_bytes = row_bytes(f, dim);
  job.K = dim;
  for (size_t t = 0; t < T; ++t) {
    job.w = static_cast<const uint8_t*>(w) + static_cast<size_t>(ids[t]) * job.row_bytes;
    dq(job, 0, 1, out + t * dim);
  }
  return Status::kOk;
}

}  // namespace adakv::kernels

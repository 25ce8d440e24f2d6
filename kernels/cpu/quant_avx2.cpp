// matmul_quant, AVX2 + FMA + F16C level (strategy: quant_matmul.cpp). Every function here is
// compiled for that target by attribute and only called after CPUID says the CPU has it.
#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "kernels/cpu/quant_impl.h"
#include "kernels/cpu/quant_simd.h"

#define ADAKV_AVX2_FN __attribute__((target("avx2,fma,f16c")))

namespace adakv::kernels::quant_detail {

namespace {

using simd::Fmt;
using simd::Piece;

#define ADAKV_AVX2_INLINE __attribute__((target("avx2,fma,f16c"), always_inline)) inline
// The float-panel tiles are tuned for a generic x86-64: with -march=native on Zen 3, GCC folds
// every activation load into its FMAs (each activation vector loaded once per weight row of the
// tile instead of once), which makes the tiles load-bound.
#define ADAKV_AVX2_PANEL_FN __attribute__((target("avx2,fma,f16c,tune=generic")))
#define ADAKV_AVX2_PANEL_INLINE \
  __attribute__((target("avx2,fma,f16c,tune=generic"), always_inline)) inline

// Rows m..m+R-1 of the quantized activations and two sets of accumulators (even and odd pieces,
// two independent FMA / add chains).
template <int R>
struct Acts {
  const int8_t* xq[R];
  const float* xd[R];
  const float* xs[R];
  __m256 acc[2][R];
  float macc[2][R];
};

// Adds piece j of the row times activation piece j to accumulator set `set` of every row.
template <WeightFormat F, int R, int set>
ADAKV_AVX2_INLINE void step(Acts<R>& a, const Piece& p, __m256i s16, size_t j) {
  for (int r = 0; r < R; ++r) {
    const __m256i x = simd::load32(reinterpret_cast<const uint8_t*>(a.xq[r] + j * kActBlock));
    const __m256i d = simd::dot_piece<F>(p.q, x, s16);
    a.acc[set][r] =
        _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), _mm256_set1_ps(p.dw * a.xd[r][j]), a.acc[set][r]);
    if constexpr (Fmt<F>::kMin) a.macc[set][r] += p.mw * a.xs[r][j];
  }
}

// out[r] = row . activation row m + r, for r < R, of a quantized format.
template <WeightFormat F, int R>
ADAKV_AVX2_FN void dot_quant(const Job& job, const uint8_t* row, size_t m, float* out) {
  using T = Fmt<F>;
  const size_t nb = job.K / kActBlock;
  Acts<R> a;
  for (int r = 0; r < R; ++r) {
    a.xq[r] = job.xq + (m + r) * job.K;
    a.xd[r] = job.xd + (m + r) * nb;
    a.xs[r] = job.xs + (m + r) * nb;
    for (int set = 0; set < 2; ++set) {
      a.acc[set][r] = _mm256_setzero_ps();
      a.macc[set][r] = 0.0f;
    }
  }
  const __m256i ones = _mm256_set1_epi16(1);
  if constexpr (T::kSubs == 1) {
    size_t j = 0;
    for (; j + 2 <= nb; j += 2) {
      typename T::State s0, s1;
      T::prepare(row + j * T::kBytes, s0);
      T::prepare(row + (j + 1) * T::kBytes, s1);
      step<F, R, 0>(a, T::piece(s0, 0), ones, j);
      step<F, R, 1>(a, T::piece(s1, 0), ones, j + 1);
    }
    if (j < nb) {
      typename T::State s0;
      T::prepare(row + j * T::kBytes, s0);
      step<F, R, 0>(a, T::piece(s0, 0), ones, j);
    }
  } else {
    static_assert(T::kSubs % 2 == 0);
    const size_t blocks = nb / T::kSubs;
    for (size_t blk = 0; blk < blocks; ++blk) {
      typename T::State st;
      T::prepare(row + blk * T::kBytes, st);
      const size_t j = blk * T::kSubs;
      for (int sub = 0; sub < T::kSubs; sub += 2) {
        __m256i s0 = ones, s1 = ones;
        if constexpr (T::kScales16) {
          s0 = T::scales16(st, sub);
          s1 = T::scales16(st, sub + 1);
        }
        step<F, R, 0>(a, T::piece(st, sub), s0, j + sub);
        step<F, R, 1>(a, T::piece(st, sub + 1), s1, j + sub + 1);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    out[r] = simd::hsum(_mm256_add_ps(a.acc[0][r], a.acc[1][r])) + (a.macc[0][r] + a.macc[1][r]);
  }
}

template <WeightFormat F>
ADAKV_AVX2_FN __m256 load8(const uint8_t* row, size_t k) {
  if constexpr (F == WeightFormat::kF32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + k);
  } else if constexpr (F == WeightFormat::kF16) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * k)));
  } else {
    const __m256i u =
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * k)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
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

// out[r] = row . x row m + r, for r < R, of a float format.
template <WeightFormat F, int R>
ADAKV_AVX2_FN void dot_float(const Job& job, const uint8_t* row, size_t m, float* out) {
  const float* x[R];
  __m256 acc[R], acc2[R];  // two FMA chains per row
  for (int r = 0; r < R; ++r) {
    x[r] = job.x + (m + r) * job.K;
    acc[r] = _mm256_setzero_ps();
    acc2[r] = _mm256_setzero_ps();
  }
  size_t k = 0;
  for (; k + 16 <= job.K; k += 16) {
    const __m256 w0 = load8<F>(row, k), w1 = load8<F>(row, k + 8);
    for (int r = 0; r < R; ++r) {
      acc[r] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x[r] + k), acc[r]);
      acc2[r] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x[r] + k + 8), acc2[r]);
    }
  }
  for (; k + 8 <= job.K; k += 8) {
    const __m256 wv = load8<F>(row, k);
    for (int r = 0; r < R; ++r) acc[r] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x[r] + k), acc[r]);
  }
  for (int r = 0; r < R; ++r) {
    float tail = 0.0f;
    for (size_t t = k; t < job.K; ++t) tail += weight_at<F>(row, t) * x[r][t];
    out[r] = simd::hsum(_mm256_add_ps(acc[r], acc2[r])) + tail;
  }
}

template <WeightFormat F, int R>
ADAKV_AVX2_FN void dot(const Job& job, const uint8_t* row, size_t m, float* out) {
  if constexpr (is_float_format(F)) {
    dot_float<F, R>(job, row, m, out);
  } else {
    dot_quant<F, R>(job, row, m, out);
  }
}

template <WeightFormat F>
ADAKV_AVX2_FN void rows(const Job& job, size_t n0, size_t n1, size_t m0, size_t m1) {
  float out[4];
  for (size_t n = n0; n < n1; ++n) {
    const uint8_t* row = job.w + n * job.row_bytes;
    for (size_t m = m0; m < m1;) {
      const size_t R = std::min<size_t>(4, m1 - m);
      switch (R) {
        case 4:
          dot<F, 4>(job, row, m, out);
          break;
        case 3:
          dot<F, 3>(job, row, m, out);
          break;
        case 2:
          dot<F, 2>(job, row, m, out);
          break;
        default:
          dot<F, 1>(job, row, m, out);
          break;
      }
      for (size_t r = 0; r < R; ++r) store(job, m + r, n, out[r]);
      m += R;
    }
  }
}

// Piece `sub` of a block as 32 float32 weights in four registers: w = dw * s * q + mw, one FMA
// rounding per weight (the value every float path of this level uses).
template <WeightFormat F>
ADAKV_AVX2_INLINE void piece_float(const typename Fmt<F>::State& st, int sub, __m256* w) {
  using T = Fmt<F>;
  const Piece p = T::piece(st, sub);
  float d0, d1;
  simd::half_scales<F>(st, sub, p.dw, d0, d1);
  const __m128i half[2] = {_mm256_castsi256_si128(p.q), _mm256_extracti128_si256(p.q, 1)};
  const __m256 mw = _mm256_set1_ps(p.mw);
  for (int c = 0; c < 4; ++c) {
    const __m128i bytes = c % 2 ? _mm_srli_si128(half[c / 2], 8) : half[c / 2];
    const __m256i v = T::kUnsigned ? _mm256_cvtepu8_epi32(bytes) : _mm256_cvtepi8_epi32(bytes);
    w[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(v), _mm256_set1_ps(c < 2 ? d0 : d1), mw);
  }
}

// Piece `sub` of the block at `b` as 32 float32 weights, the values piece_float gives (one FMA
// rounding each), with fewer instructions for the formats of one scale per 32: bytes widened
// straight from memory, the block's scales converted together.
template <WeightFormat F>
ADAKV_AVX2_INLINE void piece_float_at(const uint8_t* b, const typename Fmt<F>::State& st, int sub,
                                      __m256* w) {
  if constexpr (F == WeightFormat::kQ4_0 || F == WeightFormat::kQ4_1) {
    // [d, m] (Q4_1) or [d, first bytes] (Q4_0) in every pair of lanes.
    const __m256 dm =
        _mm256_cvtph_ps(_mm_castps_si128(_mm_broadcast_ss(reinterpret_cast<const float*>(b))));
    const __m256 d = _mm256_permute_ps(dm, 0x00);
    const __m256 m = F == WeightFormat::kQ4_1 ? _mm256_permute_ps(dm, 0x55) : _mm256_setzero_ps();
    const uint8_t* qs = b + (F == WeightFormat::kQ4_1 ? 4 : 2);
    const __m256i lo = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(qs)));
    const __m256i hi =
        _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(qs + 8)));
    const __m256i mask = _mm256_set1_epi32(0x0F);
    // Elements 0..15 are the low nibbles of the 16 bytes, 16..31 the high ones.
    __m256i q[4] = {_mm256_and_si256(lo, mask), _mm256_and_si256(hi, mask),
                    _mm256_srli_epi32(lo, 4), _mm256_srli_epi32(hi, 4)};
    for (int c = 0; c < 4; ++c) {
      if constexpr (F == WeightFormat::kQ4_0) q[c] = _mm256_sub_epi32(q[c], _mm256_set1_epi32(8));
      w[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(q[c]), d, m);
    }
  } else if constexpr (F == WeightFormat::kQ8_0) {
    const __m256 d = _mm256_permute_ps(
        _mm256_cvtph_ps(_mm_castps_si128(_mm_broadcast_ss(reinterpret_cast<const float*>(b)))),
        0x00);
    for (int c = 0; c < 4; ++c) {
      const __m256i q =
          _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 2 + 8 * c)));
      w[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(q), d, _mm256_setzero_ps());
    }
  } else {
    piece_float<F>(st, sub, w);
  }
}

// out[i * MR + r] = weight row i . activation row m + r, for i < NR, r < MR: each weight piece
// converted to float32 in registers once and multiplied with MR activation rows. Every output
// has one accumulator and the same FMA sequence whatever NR and MR, so a row's result is the
// same alone and in any batch.
template <WeightFormat F, int NR, int MR>
ADAKV_AVX2_FN void tile(const Job& job, const uint8_t* const* wrows, size_t m, float* out) {
  using T = Fmt<F>;
  const size_t blocks = job.K / kActBlock / T::kSubs;
  const float* x[MR];
  for (int r = 0; r < MR; ++r) x[r] = job.x + (m + static_cast<size_t>(r)) * job.K;
  __m256 acc[NR][MR];
  for (int i = 0; i < NR; ++i) {
    for (int r = 0; r < MR; ++r) acc[i][r] = _mm256_setzero_ps();
  }
  for (size_t blk = 0; blk < blocks; ++blk) {
    for (int i = 0; i < NR; ++i) {
      const uint8_t* b = wrows[i] + blk * T::kBytes;
      typename T::State st;
      T::prepare(b, st);
      for (int sub = 0; sub < T::kSubs; ++sub) {
        __m256 w[4];
        piece_float_at<F>(b, st, sub, w);
        const size_t k = (blk * T::kSubs + static_cast<size_t>(sub)) * kActBlock;
        for (int c = 0; c < 4; ++c) {
          for (int r = 0; r < MR; ++r) {
            acc[i][r] = _mm256_fmadd_ps(w[c], _mm256_loadu_ps(x[r] + k + 8 * c), acc[i][r]);
          }
        }
      }
    }
  }
  for (int i = 0; i < NR; ++i) {
    for (int r = 0; r < MR; ++r) out[i * MR + r] = simd::hsum(acc[i][r]);
  }
}

// tile<F, NR, MR> for simd::grouped_rows.
template <WeightFormat F>
struct Tile {
  template <int NR, int MR>
  ADAKV_AVX2_INLINE static void run(const Job& job, const uint8_t* const* wrows, size_t m,
                                    float* out) {
    tile<F, NR, MR>(job, wrows, m, out);
  }
};

template <WeightFormat F>
ADAKV_AVX2_FN void dequant(const Job& job, size_t n0, size_t n1, float* out) {
  for (size_t n = n0; n < n1; ++n, out += job.K) {
    const uint8_t* row = job.w + n * job.row_bytes;
    if constexpr (is_float_format(F)) {
      size_t k = 0;
      for (; k + 8 <= job.K; k += 8) _mm256_storeu_ps(out + k, load8<F>(row, k));
      for (; k < job.K; ++k) out[k] = weight_at<F>(row, k);
    } else {
      using T = Fmt<F>;
      const size_t blocks = job.K / kActBlock / T::kSubs;
      for (size_t blk = 0; blk < blocks; ++blk) {
        const uint8_t* b = row + blk * T::kBytes;
        typename T::State st;
        T::prepare(b, st);
        for (int sub = 0; sub < T::kSubs; ++sub) {
          __m256 w[4];
          piece_float_at<F>(b, st, sub, w);
          float* o = out + (blk * T::kSubs + static_cast<size_t>(sub)) * kActBlock;
          for (int c = 0; c < 4; ++c) _mm256_storeu_ps(o + 8 * c, w[c]);
        }
      }
    }
  }
}

// out[i * MR + r] = float row i of the panel (row stride K) . activation row r, the FMA sequence
// of tile<F, NR, MR> on the rows the panel was decoded from: the same bits.
template <int NR, int MR>
ADAKV_AVX2_PANEL_INLINE void panel_tile(const float* panel, size_t K, const float* const* x,
                                        float* out) {
  __m256 acc[NR][MR];
  for (int i = 0; i < NR; ++i) {
    for (int r = 0; r < MR; ++r) acc[i][r] = _mm256_setzero_ps();
  }
  for (size_t k = 0; k < K; k += 8) {
    __m256 w[NR];
    for (int i = 0; i < NR; ++i) w[i] = _mm256_loadu_ps(panel + static_cast<size_t>(i) * K + k);
    for (int r = 0; r < MR; ++r) {
      const __m256 xv = _mm256_loadu_ps(x[r] + k);
      for (int i = 0; i < NR; ++i) acc[i][r] = _mm256_fmadd_ps(w[i], xv, acc[i][r]);
    }
  }
  for (int i = 0; i < NR; ++i) {
    for (int r = 0; r < MR; ++r) out[i * MR + r] = simd::hsum(acc[i][r]);
  }
}

// panel_tile<NR, MR> for simd::tile_rows, on a job whose weight rows are the panel's float rows.
struct PanelTile {
  template <int NR, int MR>
  ADAKV_AVX2_PANEL_INLINE static void run(const Job& job, const uint8_t* const* wrows, size_t m,
                                          float* out) {
    const float* x[MR];
    for (int r = 0; r < MR; ++r) x[r] = job.x + (m + static_cast<size_t>(r)) * job.K;
    panel_tile<NR, MR>(reinterpret_cast<const float*>(wrows[0]), job.K, x, out);
  }
};

// Batches of kPanelMinRows activation rows or more: each group of weight rows is decoded once to
// a float32 panel (the values piece_float_at gives in registers) that every activation row then
// reads, in tiles of 12 accumulators. The conversion is paid once per group instead of once per
// tile of rows, and the tiles have more independent FMA chains than tile<F, 1, 8> can hold in
// registers; each output keeps the FMA sequence of tile<F, NR, MR>, so a row's bits do not
// depend on its batch.
constexpr size_t kPanelMinRows = 8;

template <WeightFormat F>
ADAKV_AVX2_PANEL_FN void panel_rows(const Job& job, size_t n0, size_t n1, size_t m0, size_t m1) {
  constexpr size_t kGroup = 6;
  thread_local std::vector<float> panel;
  if (panel.size() < kGroup * job.K) panel.resize(kGroup * job.K);
  // The panel as the weights of a job: output columns counted from the group's first row.
  Job pj = job;
  pj.w = reinterpret_cast<const uint8_t*>(panel.data());
  pj.row_bytes = job.K * sizeof(float);
  for (size_t g0 = n0; g0 < n1; g0 += kGroup) {
    const size_t rows = std::min(n1, g0 + kGroup) - g0;
    dequant<F>(job, g0, g0 + rows, panel.data());
    pj.y = job.y + g0;
    size_t m = m0;
    for (; m + 4 <= m1; m += 4) simd::tile_rows<PanelTile, 3, 4>(pj, 0, rows, m);
    for (; m + 2 <= m1; m += 2) simd::tile_rows<PanelTile, 4, 2>(pj, 0, rows, m);
    for (; m < m1; ++m) simd::tile_rows<PanelTile, 6, 1>(pj, 0, rows, m);
  }
}

// The float-dots path on quantized weights: weights converted to float32 in registers, never
// stored. Groups of 8 weight rows stay in L1 while the activation rows pass in tiles of 8, 4, 2
// and 1 (at most 8 accumulators each). Larger batches take float32 panels (panel_rows).
template <WeightFormat F>
ADAKV_AVX2_FN void fused_rows(const Job& job, size_t n0, size_t n1, size_t m0, size_t m1) {
  if (m1 - m0 >= kPanelMinRows) {
    panel_rows<F>(job, n0, n1, m0, m1);
    return;
  }
  simd::grouped_rows<Tile<F>>(job, n0, n1, m0, m1);
}

}  // namespace

DequantFn avx2_dequant(WeightFormat f) {
  switch (f) {
    case WeightFormat::kF32:
      return dequant<WeightFormat::kF32>;
    case WeightFormat::kF16:
      return dequant<WeightFormat::kF16>;
    case WeightFormat::kBF16:
      return dequant<WeightFormat::kBF16>;
    case WeightFormat::kQ8_0:
      return dequant<WeightFormat::kQ8_0>;
    case WeightFormat::kQ4_0:
      return dequant<WeightFormat::kQ4_0>;
    case WeightFormat::kQ4_1:
      return dequant<WeightFormat::kQ4_1>;
    case WeightFormat::kQ5_0:
      return dequant<WeightFormat::kQ5_0>;
    case WeightFormat::kQ5_1:
      return dequant<WeightFormat::kQ5_1>;
    case WeightFormat::kQ4_K:
      return dequant<WeightFormat::kQ4_K>;
    case WeightFormat::kQ5_K:
      return dequant<WeightFormat::kQ5_K>;
    case WeightFormat::kQ6_K:
      return dequant<WeightFormat::kQ6_K>;
  }
  return nullptr;
}

RowsFn avx2_float_dots(WeightFormat f) {
  switch (f) {
    case WeightFormat::kQ8_0:
      return fused_rows<WeightFormat::kQ8_0>;
    case WeightFormat::kQ4_0:
      return fused_rows<WeightFormat::kQ4_0>;
    case WeightFormat::kQ4_1:
      return fused_rows<WeightFormat::kQ4_1>;
    case WeightFormat::kQ5_0:
      return fused_rows<WeightFormat::kQ5_0>;
    case WeightFormat::kQ5_1:
      return fused_rows<WeightFormat::kQ5_1>;
    case WeightFormat::kQ4_K:
      return fused_rows<WeightFormat::kQ4_K>;
    case WeightFormat::kQ5_K:
      return fused_rows<WeightFormat::kQ5_K>;
    case WeightFormat::kQ6_K:
      return fused_rows<WeightFormat::kQ6_K>;
    default:
      return nullptr;
  }
}

RowsFn avx2_rows(WeightFormat f) {
  switch (f) {
    case WeightFormat::kF32:
      return rows<WeightFormat::kF32>;
    case WeightFormat::kF16:
      return rows<WeightFormat::kF16>;
    case WeightFormat::kBF16:
      return rows<WeightFormat::kBF16>;
    case WeightFormat::kQ8_0:
      return rows<WeightFormat::kQ8_0>;
    case WeightFormat::kQ4_0:
      return rows<WeightFormat::kQ4_0>;
    case WeightFormat::kQ4_1:
      return rows<WeightFormat::kQ4_1>;
    case WeightFormat::kQ5_0:
      return rows<WeightFormat::kQ5_0>;
    case WeightFormat::kQ5_1:
      return rows<WeightFormat::kQ5_1>;
    case WeightFormat::kQ4_K:
      return rows<WeightFormat::kQ4_K>;
    case WeightFormat::kQ5_K:
      return rows<WeightFormat::kQ5_K>;
    case WeightFormat::kQ6_K:
      return rows<WeightFormat::kQ6_K>;
  }
  return nullptr;
}

}  // namespace adakv::kernels::quant_detail

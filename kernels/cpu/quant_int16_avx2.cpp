// matmul_quant's int16 dots at the AVX2 level (MatmulPath::kInt16Dots; strategy:
// quant_matmul.cpp). Each 32-element weight piece is widened to int16 in registers once and
// multiplied pairwise with int16 activation rows (vpmaddwd: exact in int32), then scaled once per
// piece in float32: y += float(isum) * (dw * dx). A format's min enters as sum_j mw_j * sx_j (sx:
// the float sum of the activation block), a short float dot per output. Every output's operations
// run in one order whatever the tile or the batch, so a row's result is the same alone and in
// any batch. Compiled for the AVX2 target by attribute; called only after CPUID says so.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "kernels/cpu/quant_impl.h"
#include "kernels/cpu/quant_simd.h"

#define ADAKV_AVX2_FN __attribute__((target("avx2,fma,f16c")))
#define ADAKV_AVX2_INLINE __attribute__((target("avx2,fma,f16c"), always_inline)) inline

namespace adakv::kernels::quant_detail {

namespace {

using simd::Fmt;

// Piece `sub` of the block at b as 32 int16 weights (w0: elements 0..15, w1: 16..31, Q6_K's
// 16-element scales already multiplied in), its float scale dw and min mw.
template <WeightFormat F>
ADAKV_AVX2_INLINE void widen(const uint8_t* b, const typename Fmt<F>::State& st, int sub,
                             __m256i& w0, __m256i& w1, float& dw, float& mw) {
  using T = Fmt<F>;
  if constexpr (F == WeightFormat::kQ4_0 || F == WeightFormat::kQ4_1) {
    constexpr bool kMin = F == WeightFormat::kQ4_1;
    const __m256i v =
        _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + (kMin ? 4 : 2))));
    w0 = _mm256_and_si256(v, _mm256_set1_epi16(0x0F));
    w1 = _mm256_srli_epi16(v, 4);
    if constexpr (!kMin) {
      w0 = _mm256_sub_epi16(w0, _mm256_set1_epi16(8));
      w1 = _mm256_sub_epi16(w1, _mm256_set1_epi16(8));
    }
    dw = simd::half(b);
    mw = kMin ? simd::half(b + 2) : 0.0f;
  } else if constexpr (F == WeightFormat::kQ8_0) {
    w0 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2)));
    w1 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 18)));
    dw = simd::half(b);
    mw = 0.0f;
  } else {
    const simd::Piece p = T::piece(st, sub);
    const __m128i lo = _mm256_castsi256_si128(p.q), hi = _mm256_extracti128_si256(p.q, 1);
    w0 = T::kUnsigned ? _mm256_cvtepu8_epi16(lo) : _mm256_cvtepi8_epi16(lo);
    w1 = T::kUnsigned ? _mm256_cvtepu8_epi16(hi) : _mm256_cvtepi8_epi16(hi);
    if constexpr (T::kScales16) {
      // |q| <= 32 times |scale| <= 128 fits int16; the pair sums stay far inside int32.
      int s0, s1;
      T::scale_ints(st, sub, s0, s1);
      w0 = _mm256_mullo_epi16(w0, _mm256_set1_epi16(static_cast<int16_t>(s0)));
      w1 = _mm256_mullo_epi16(w1, _mm256_set1_epi16(static_cast<int16_t>(s1)));
    }
    dw = p.dw;
    mw = p.mw;
  }
}

// sum_i a[i] * b[i], 8 lanes then a fixed reduction (the same for every caller).
ADAKV_AVX2_INLINE float dot_f32(const float* a, const float* b, size_t n) {
  __m256 acc = _mm256_setzero_ps();
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
  float tail = 0.0f;
  for (; i < n; ++i) tail += a[i] * b[i];
  return simd::hsum(acc) + tail;
}

// Pieces whose mins are gathered before their float dot with the activation block sums.
constexpr size_t kMinChunk = 64;

// out[i * MR + r] = weight row i . activation row m + r, for i < NR, r < MR.
template <WeightFormat F, int NR, int MR>
ADAKV_AVX2_FN void tile(const Job& job, const uint8_t* const* wrows, size_t m, float* out) {
  using T = Fmt<F>;
  const size_t nb = job.K / kActBlock;
  const int16_t* x[MR];
  const float* xd[MR];
  const float* xs[MR];
  for (int r = 0; r < MR; ++r) {
    x[r] = job.xw + (m + static_cast<size_t>(r)) * job.K;
    xd[r] = job.xwd + (m + static_cast<size_t>(r)) * nb;
    xs[r] = job.xws + (m + static_cast<size_t>(r)) * nb;
  }
  __m256 acc[NR][MR];
  float min_term[NR][MR];
  float mins[NR][kMinChunk];
  for (int i = 0; i < NR; ++i) {
    for (int r = 0; r < MR; ++r) {
      acc[i][r] = _mm256_setzero_ps();
      min_term[i][r] = 0.0f;
    }
  }
  size_t chunk0 = 0;  // first piece of the mins gathered so far
  for (size_t blk = 0; blk < nb / T::kSubs; ++blk) {
    for (int i = 0; i < NR; ++i) {
      const uint8_t* b = wrows[i] + blk * T::kBytes;
      typename T::State st;
      T::prepare(b, st);
      for (int sub = 0; sub < T::kSubs; ++sub) {
        const size_t j = blk * T::kSubs + static_cast<size_t>(sub);
        __m256i w0, w1;
        float dw, mw;
        widen<F>(b, st, sub, w0, w1, dw, mw);
        if constexpr (T::kMin) mins[i][j - chunk0] = mw;
        for (int r = 0; r < MR; ++r) {
          const auto* xv = reinterpret_cast<const __m256i*>(x[r] + j * kActBlock);
          const __m256i isum = _mm256_add_epi32(_mm256_madd_epi16(w0, _mm256_loadu_si256(xv)),
                                                _mm256_madd_epi16(w1, _mm256_loadu_si256(xv + 1)));
          acc[i][r] =
              _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(dw * xd[r][j]), acc[i][r]);
        }
      }
    }
    if constexpr (T::kMin) {
      const size_t next = (blk + 1) * T::kSubs;
      if (next - chunk0 == kMinChunk || next == nb) {
        for (int i = 0; i < NR; ++i) {
          for (int r = 0; r < MR; ++r) {
            min_term[i][r] += dot_f32(mins[i], xs[r] + chunk0, next - chunk0);
          }
        }
        chunk0 = next;
      }
    }
  }
  for (int i = 0; i < NR; ++i) {
    for (int r = 0; r < MR; ++r) out[i * MR + r] = simd::hsum(acc[i][r]) + min_term[i][r];
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

// Groups of 8 weight rows stay in L1 while the activation rows pass in tiles of 8, 4, 2 and 1.
template <WeightFormat F>
ADAKV_AVX2_FN void int16_rows(const Job& job, size_t n0, size_t n1, size_t m0, size_t m1) {
  simd::grouped_rows<Tile<F>>(job, n0, n1, m0, m1);
}

}  // namespace

// The values of quantize_acts16 (quant_matmul.cpp): the same amax, scale, rounding (to nearest,
// ties to even) and sums.
ADAKV_AVX2_FN void avx2_quantize_acts16(const float* x, size_t m0, size_t m1, size_t K, int16_t* xw,
                                        float* xd, float* xs) {
  const size_t nb = K / kActBlock;
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  for (size_t m = m0; m < m1; ++m) {
    for (size_t j = 0; j < nb; ++j) {
      const float* v = x + m * K + j * kActBlock;
      __m256 p[4];
      __m256 amax = _mm256_setzero_ps(), sum = _mm256_setzero_ps();
      for (int c = 0; c < 4; ++c) {
        p[c] = _mm256_loadu_ps(v + 8 * c);
        amax = _mm256_max_ps(amax, _mm256_and_ps(p[c], abs_mask));
        sum = _mm256_add_ps(sum, p[c]);
      }
      __m128 a = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
      a = _mm_max_ps(a, _mm_movehl_ps(a, a));
      a = _mm_max_ss(a, _mm_movehdup_ps(a));
      const float d = _mm_cvtss_f32(a) / 32767.0f;
      const __m256 id = _mm256_set1_ps(d > 0 ? 1.0f / d : 0.0f);
      int16_t* q = xw + m * K + j * kActBlock;
      for (int c = 0; c < 4; c += 2) {
        const __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(p[c], id));
        const __m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(p[c + 1], id));
        // packs interleaves the 128-bit lanes; the permute puts the 16 values back in order.
        const __m256i packed = _mm256_permute4x64_epi64(_mm256_packs_epi32(i0, i1), 0xD8);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 8 * c), packed);
      }
      xd[m * nb + j] = d;
      xs[m * nb + j] = simd::hsum(sum);
    }
  }
}

RowsFn avx2_int16_dots(WeightFormat f) {
  switch (f) {
    case WeightFormat::kQ8_0:
      return int16_rows<WeightFormat::kQ8_0>;
    case WeightFormat::kQ4_0:
      return int16_rows<WeightFormat::kQ4_0>;
    case WeightFormat::kQ4_1:
      return int16_rows<WeightFormat::kQ4_1>;
    case WeightFormat::kQ5_0:
      return int16_rows<WeightFormat::kQ5_0>;
    case WeightFormat::kQ5_1:
      return int16_rows<WeightFormat::kQ5_1>;
    case WeightFormat::kQ4_K:
      return int16_rows<WeightFormat::kQ4_K>;
    case WeightFormat::kQ5_K:
      return int16_rows<WeightFormat::kQ5_K>;
    case WeightFormat::kQ6_K:
      return int16_rows<WeightFormat::kQ6_K>;
    default:
      return nullptr;
  }
}

}  // namespace adakv::kernels::quant_detail

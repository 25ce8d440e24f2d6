// matmul_quant, AVX-512 (F + BW + VL) level (strategy: quant_matmul.cpp). Quantized formats
// unpack two 32-element pieces with the AVX2 code of quant_simd.h, join them in one 512-bit
// register and take both dot products with one _mm512_maddubs_epi16 / _mm512_madd_epi16 (AVX-512
// has no vpsignb: signed pieces use abs and a masked negate of the activations instead). Float
// formats use 16-wide FMA. Every function here is compiled for that target by attribute and only
// called after CPUID says the CPU has it.
#include <algorithm>

#include "kernels/cpu/avx512_target.h"
#include "kernels/cpu/quant_impl.h"
#include "kernels/cpu/quant_simd.h"

namespace adakv::kernels::quant_detail {

namespace {

using simd::Fmt;
using simd::Piece;

ADAKV_AVX512_INLINE __m512i join(__m256i lo, __m256i hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

ADAKV_AVX512_INLINE __m512 join_ps(__m256 lo, __m256 hi) {
  return _mm512_castpd_ps(
      _mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(lo)), _mm256_castps_pd(hi), 1));
}

// Sum of the 16 lanes (GCC 12's _mm512_reduce_add_ps warns about its own undefined temporaries).
ADAKV_AVX512_INLINE float hsum512(__m512 v) {
  const __m512 folded = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(1, 0, 3, 2)));
  return simd::hsum(_mm512_castps512_ps256(folded));
}

// 16 int32 partial dot products of two joined weight pieces with 64 int8 activations (exact).
template <WeightFormat F>
ADAKV_AVX512_INLINE __m512i dot_pair(__m512i q, __m512i x, __m512i s16) {
  __m512i p16;
  if constexpr (Fmt<F>::kUnsigned) {
    p16 = _mm512_maddubs_epi16(q, x);
  } else {
    // |q| * (x with the sign of q); where q = 0 the product is 0 either way.
    const __mmask64 neg = _mm512_movepi8_mask(q);
    const __m512i xs = _mm512_mask_sub_epi8(x, neg, _mm512_setzero_si512(), x);
    p16 = _mm512_maddubs_epi16(_mm512_abs_epi8(q), xs);
  }
  return _mm512_madd_epi16(p16, s16);
}

// Rows m..m+R-1 of the activations, as the pair and single steps read them.
template <int R>
struct Acts {
  const int8_t* xq[R];
  const float* xd[R];
  const float* xs[R];
  __m512 acc[R];
  __m256 acc1[R];  // the last piece of an odd count
  float macc[R];
};

// Pieces j and j + 1 (consecutive in the row and in the activations).
template <WeightFormat F, int R>
ADAKV_AVX512_INLINE void pair_step(Acts<R>& a, const Piece& p0, const Piece& p1, __m512i s16,
                                   size_t j) {
  const __m512i q = join(p0.q, p1.q);
  for (int r = 0; r < R; ++r) {
    const __m512i x = _mm512_loadu_si512(a.xq[r] + j * kActBlock);
    const __m512i d = dot_pair<F>(q, x, s16);
    const __m512 scale =
        join_ps(_mm256_set1_ps(p0.dw * a.xd[r][j]), _mm256_set1_ps(p1.dw * a.xd[r][j + 1]));
    a.acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), scale, a.acc[r]);
    if constexpr (Fmt<F>::kMin) a.macc[r] += p0.mw * a.xs[r][j] + p1.mw * a.xs[r][j + 1];
  }
}

template <WeightFormat F, int R>
ADAKV_AVX512_INLINE void single_step(Acts<R>& a, const Piece& p, __m256i s16, size_t j) {
  for (int r = 0; r < R; ++r) {
    const __m256i x = simd::load32(reinterpret_cast<const uint8_t*>(a.xq[r] + j * kActBlock));
    const __m256i d = simd::dot_piece<F>(p.q, x, s16);
    a.acc1[r] =
        _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), _mm256_set1_ps(p.dw * a.xd[r][j]), a.acc1[r]);
    if constexpr (Fmt<F>::kMin) a.macc[r] += p.mw * a.xs[r][j];
  }
}

template <WeightFormat F, int R>
ADAKV_AVX512_FN void dot_quant(const Job& job, const uint8_t* row, size_t m, float* out) {
  using T = Fmt<F>;
  const size_t nb = job.K / kActBlock;
  Acts<R> a;
  for (int r = 0; r < R; ++r) {
    a.xq[r] = job.xq + (m + r) * job.K;
    a.xd[r] = job.xd + (m + r) * nb;
    a.xs[r] = job.xs + (m + r) * nb;
    a.acc[r] = _mm512_setzero_ps();
    a.acc1[r] = _mm256_setzero_ps();
    a.macc[r] = 0.0f;
  }
  const __m512i ones = _mm512_set1_epi16(1);
  if constexpr (T::kSubs == 1) {
    size_t j = 0;
    for (; j + 2 <= nb; j += 2) {
      typename T::State s0, s1;
      T::prepare(row + j * T::kBytes, s0);
      T::prepare(row + (j + 1) * T::kBytes, s1);
      pair_step<F, R>(a, T::piece(s0, 0), T::piece(s1, 0), ones, j);
    }
    if (j < nb) {
      typename T::State s0;
      T::prepare(row + j * T::kBytes, s0);
      single_step<F, R>(a, T::piece(s0, 0), _mm256_set1_epi16(1), j);
    }
  } else {
    static_assert(T::kSubs % 2 == 0);
    const size_t blocks = nb / T::kSubs;
    for (size_t blk = 0; blk < blocks; ++blk) {
      typename T::State st;
      T::prepare(row + blk * T::kBytes, st);
      for (int sub = 0; sub < T::kSubs; sub += 2) {
        __m512i s16 = ones;
        if constexpr (T::kScales16) s16 = join(T::scales16(st, sub), T::scales16(st, sub + 1));
        pair_step<F, R>(a, T::piece(st, sub), T::piece(st, sub + 1), s16,
                        blk * T::kSubs + static_cast<size_t>(sub));
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    out[r] = hsum512(a.acc[r]) + simd::hsum(a.acc1[r]) + a.macc[r];
  }
}

template <WeightFormat F>
ADAKV_AVX512_INLINE __m512 load16(const uint8_t* row, size_t k) {
  if constexpr (F == WeightFormat::kF32) {
    return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + k);
  } else if constexpr (F == WeightFormat::kF16) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * k)));
  } else {
    const __m512i u =
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * k)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
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

template <WeightFormat F, int R>
ADAKV_AVX512_FN void dot_float(const Job& job, const uint8_t* row, size_t m, float* out) {
  const float* x[R];
  __m512 acc[R];
  for (int r = 0; r < R; ++r) {
    x[r] = job.x + (m + r) * job.K;
    acc[r] = _mm512_setzero_ps();
  }
  size_t k = 0;
  for (; k + 16 <= job.K; k += 16) {
    const __m512 wv = load16<F>(row, k);
    for (int r = 0; r < R; ++r) acc[r] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(x[r] + k), acc[r]);
  }
  for (int r = 0; r < R; ++r) {
    float tail = 0.0f;
    for (size_t t = k; t < job.K; ++t) tail += weight_at<F>(row, t) * x[r][t];
    out[r] = hsum512(acc[r]) + tail;
  }
}

template <WeightFormat F, int R>
ADAKV_AVX512_FN void dot(const Job& job, const uint8_t* row, size_t m, float* out) {
  if constexpr (is_float_format(F)) {
    dot_float<F, R>(job, row, m, out);
  } else {
    dot_quant<F, R>(job, row, m, out);
  }
}

template <WeightFormat F>
ADAKV_AVX512_FN void rows(const Job& job, size_t n0, size_t n1, size_t m0, size_t m1) {
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

// An fp16 scale in all 16 lanes: a 16-bit broadcast from memory and one conversion.
ADAKV_AVX512_INLINE __m512 half16(const uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_set1_epi16(static_cast<short>(load_u16(p))));
}

// Piece `sub` of a block as 32 float32 weights in two registers, w = dw * s * q + mw computed as
// the dequantization does (one rounding of an FMA, or of a product where there is no min).
template <WeightFormat F>
ADAKV_AVX512_INLINE void unpack_float(const typename Fmt<F>::State& st, int sub, __m512* w) {
  using T = Fmt<F>;
  if constexpr (F == WeightFormat::kQ4_0 || F == WeightFormat::kQ4_1) {
    // 16 nibble pairs: the 16 values a nibble can take are computed once and looked up.
    constexpr bool kMin = F == WeightFormat::kQ4_1;
    const uint8_t* b = st.b;
    const __m512i bytes =
        _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + (kMin ? 4 : 2))));
    const __m512 q = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512 d = half16(b);
    __m512 table;
    if constexpr (kMin) {
      table = _mm512_fmadd_ps(q, d, half16(b + 2));
    } else {
      table = _mm512_mul_ps(_mm512_sub_ps(q, _mm512_set1_ps(8.0f)), d);
    }
    w[0] = _mm512_permutexvar_ps(bytes, table);  // the index is the low 4 bits of each lane
    w[1] = _mm512_permutexvar_ps(_mm512_srli_epi32(bytes, 4), table);
  } else if constexpr (F == WeightFormat::kQ8_0) {
    const uint8_t* b = st.b;
    const __m512 d = half16(b);
    const auto* q = reinterpret_cast<const __m128i*>(b + 2);
    w[0] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(q))), d);
    w[1] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(q + 1))), d);
  } else {
    const Piece p = T::piece(st, sub);
    float d0, d1;
    simd::half_scales<F>(st, sub, p.dw, d0, d1);
    const __m128i b0 = _mm256_castsi256_si128(p.q), b1 = _mm256_extracti128_si256(p.q, 1);
    const __m512i q0 = T::kUnsigned ? _mm512_cvtepu8_epi32(b0) : _mm512_cvtepi8_epi32(b0);
    const __m512i q1 = T::kUnsigned ? _mm512_cvtepu8_epi32(b1) : _mm512_cvtepi8_epi32(b1);
    const __m512 mw = _mm512_set1_ps(p.mw);
    w[0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(q0), _mm512_set1_ps(d0), mw);
    w[1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(q1), _mm512_set1_ps(d1), mw);
  }
}

// The float-dots path on quantized weights: each 32-element piece is unpacked and converted to
// float32 in registers (w = dw * s * q + mw, the value dequantization gives) and multiplied with
// the unrounded float32 activations. A tile is NR weight rows by R activation rows; every output
// element has one accumulator that sees the same sequence of FMAs (the low, then the high 16
// elements of each piece) whatever NR and R are, so a row's result does not depend on the batch.
template <WeightFormat F, int NR, int R>
ADAKV_AVX512_FN void dot_fused(const Job& job, const uint8_t* const* wrows, size_t m,
                               float (*out)[8]) {
  using T = Fmt<F>;
  const size_t blocks = job.K / kActBlock / T::kSubs;
  const float* x[R];
  __m512 acc[NR][R];
  for (int r = 0; r < R; ++r) x[r] = job.x + (m + r) * job.K;
  for (int i = 0; i < NR; ++i) {
    for (int r = 0; r < R; ++r) acc[i][r] = _mm512_setzero_ps();
  }
  for (size_t blk = 0; blk < blocks; ++blk) {
    typename T::State st[NR];
    for (int i = 0; i < NR; ++i) T::prepare(wrows[i] + blk * T::kBytes, st[i]);
    for (int sub = 0; sub < T::kSubs; ++sub) {
      __m512 w[NR][2];
      for (int i = 0; i < NR; ++i) unpack_float<F>(st[i], sub, w[i]);
      const size_t k = (blk * T::kSubs + static_cast<size_t>(sub)) * kActBlock;
      for (int r = 0; r < R; ++r) {
        const __m512 x0 = _mm512_loadu_ps(x[r] + k), x1 = _mm512_loadu_ps(x[r] + k + 16);
        for (int i = 0; i < NR; ++i) acc[i][r] = _mm512_fmadd_ps(w[i][0], x0, acc[i][r]);
        for (int i = 0; i < NR; ++i) acc[i][r] = _mm512_fmadd_ps(w[i][1], x1, acc[i][r]);
      }
    }
  }
  for (int i = 0; i < NR; ++i) {
    for (int r = 0; r < R; ++r) out[i][r] = hsum512(acc[i][r]);
  }
}

// NR weight rows (NR <= 4) against R < 8 activation rows.
template <WeightFormat F, int NR>
ADAKV_AVX512_FN void narrow_tile(const Job& job, const uint8_t* const* wrows, size_t m, size_t R,
                                 float (*out)[8]) {
  switch (R) {
    case 4:
      dot_fused<F, NR, 4>(job, wrows, m, out);
      break;
    case 3:
      dot_fused<F, NR, 3>(job, wrows, m, out);
      break;
    case 2:
      dot_fused<F, NR, 2>(job, wrows, m, out);
      break;
    default:
      dot_fused<F, NR, 1>(job, wrows, m, out);
      break;
  }
}

template <WeightFormat F>
ADAKV_AVX512_FN void store_tile(const Job& job, size_t n, size_t nr, size_t m, size_t R,
                                const float (*out)[8]) {
  for (size_t i = 0; i < nr; ++i) {
    for (size_t r = 0; r < R; ++r) store(job, m + r, n + i, out[i][r]);
  }
}

// Weight rows in groups of four. Activation rows in groups of eight take tiles of 2 x 8 (each
// piece unpacked once per 8 rows); the rest take tiles of 4 x (up to 4): four independent FMA
// chains even at M = 1. Both use 16 accumulators.
template <WeightFormat F>
ADAKV_AVX512_FN void fused_rows(const Job& job, size_t n0, size_t n1, size_t m0, size_t m1) {
  float out[4][8];
  const size_t m_wide = m0 + (m1 - m0) / 8 * 8;
  for (size_t n = n0; n < n1;) {
    const size_t nr = std::min<size_t>(4, n1 - n);
    const uint8_t* wrows[4];
    for (size_t i = 0; i < 4; ++i) wrows[i] = job.w + (n + std::min(i, nr - 1)) * job.row_bytes;
    // The next group's rows are requested now: they arrive while this group is computed on.
    if (n + 2 * nr <= n1) {
      const uint8_t* next = job.w + (n + nr) * job.row_bytes;
      for (size_t b = 0; b < nr * job.row_bytes; b += 64) _mm_prefetch(next + b, _MM_HINT_T0);
    }
    for (size_t m = m0; m < m_wide; m += 8) {
      for (size_t i = 0; i < nr; i += 2) {
        if (i + 1 < nr) {
          dot_fused<F, 2, 8>(job, wrows + i, m, out);
          store_tile<F>(job, n + i, 2, m, 8, out);
        } else {
          dot_fused<F, 1, 8>(job, wrows + i, m, out);
          store_tile<F>(job, n + i, 1, m, 8, out);
        }
      }
    }
    for (size_t m = m_wide; m < m1;) {
      const size_t R = std::min<size_t>(4, m1 - m);
      switch (nr) {
        case 4:
          narrow_tile<F, 4>(job, wrows, m, R, out);
          break;
        case 3:
          narrow_tile<F, 3>(job, wrows, m, R, out);
          break;
        case 2:
          narrow_tile<F, 2>(job, wrows, m, R, out);
          break;
        default:
          narrow_tile<F, 1>(job, wrows, m, R, out);
          break;
      }
      store_tile<F>(job, n, nr, m, R, out);
      m += R;
    }
    n += nr;
  }
}

}  // namespace

RowsFn avx512_float_dots(WeightFormat f) {
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

RowsFn avx512_rows(WeightFormat f) {
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

// matmul_quant, AVX-512 (F + BW + VL) level (strategy: quant_matmul.cpp). Quantized formats
// unpack two 32-element pieces with the AVX2 code of quant_simd.h, join them in one 512-bit
// register and take both dot products with one _mm512_maddubs_epi16 / _mm512_madd_epi16 (AVX-512
// has no vpsignb: signed pieces use abs and a masked negate of the activations instead). Float
// formats use 16-wide FMA. Every function here is compiled for that target by attribute and only
// called after CPUID says the CPU has it.
#include <immintrin.h>

// GCC 12's AVX-512 intrinsics pass _mm*_undefined_*() temporaries to masked builtins and then warn
// about them (GCC bug 105593) wherever they inline; the warnings are about the headers, not this.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <algorithm>

#include "kernels/cpu/quant_impl.h"
#include "kernels/cpu/quant_simd.h"

#define ADAKV_AVX512_FN __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl")))
#define ADAKV_AVX512_INLINE \
  __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl"), always_inline)) inline

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
    return half_to_float(load_u16(row + 2 * k));
  } else {
    return bf16_to_float(load_u16(row + 2 * k));
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

}  // namespace

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

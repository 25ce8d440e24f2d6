// Products against interleaved weights (WeightLayout::kInterleaved), AVX-512 level. One 512-bit
// vector holds one element of a group's 16 weight rows: each element of 16 rows is converted to
// float32 once and multiplied with up to 16 activation rows (broadcast), one accumulator per
// (group, activation row) whose lanes are the 16 outputs. Each output sees the FMAs of
// quant_interleaved.cpp's reference in the same order, so the bits are the same.
#include <algorithm>

#include "kernels/cpu/avx512_target.h"
#include "kernels/cpu/quant_impl.h"

namespace adakv::kernels::quant_detail {

namespace {

constexpr size_t kG = kInterleaveRows;

// The scales of an interleaved block: d, and m for Q4_1 (zero otherwise).
template <WeightFormat F>
ADAKV_AVX512_INLINE void block_scales(const uint8_t* blk, __m512& d, __m512& m) {
  d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk)));
  if constexpr (F == WeightFormat::kQ4_1) {
    m = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 32)));
  } else {
    m = _mm512_setzero_ps();
  }
}

// Elements k and k + 1 (k even) of the block's 16 rows as float32: w0, w1.
template <WeightFormat F>
ADAKV_AVX512_INLINE void element_pair(const uint8_t* blk, size_t k, __m512 d, __m512 m, __m512& w0,
                                      __m512& w1) {
  if constexpr (F == WeightFormat::kQ8_0) {
    const auto* q = reinterpret_cast<const __m128i*>(blk + 32 + k * kG);
    w0 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(q))), d);
    w1 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(q + 1))), d);
  } else {
    constexpr size_t kQuants = F == WeightFormat::kQ4_1 ? 64 : 32;
    const __m512i bytes = _mm512_cvtepu8_epi32(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + kQuants + (k / 2) * kG)));
    __m512i lo = _mm512_and_si512(bytes, _mm512_set1_epi32(0x0F));
    __m512i hi = _mm512_srli_epi32(bytes, 4);
    if constexpr (F == WeightFormat::kQ4_0) {
      lo = _mm512_sub_epi32(lo, _mm512_set1_epi32(8));
      hi = _mm512_sub_epi32(hi, _mm512_set1_epi32(8));
      w0 = _mm512_mul_ps(_mm512_cvtepi32_ps(lo), d);
      w1 = _mm512_mul_ps(_mm512_cvtepi32_ps(hi), d);
    } else {
      w0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lo), d, m);
      w1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(hi), d, m);
    }
  }
}

// Groups [g, g + G) against activation rows [m, m + R).
template <WeightFormat F, int G, int R>
ADAKV_AVX512_FN void tile(const InterleavedJob& job, size_t g, size_t m) {
  const size_t bb = kG * block_bytes(F), nb = job.K / 32;
  const size_t ahead = std::max<size_t>(2, 2560 / bb) * bb;
  __m512 acc[G][R];
  for (int i = 0; i < G; ++i) {
    for (int r = 0; r < R; ++r) acc[i][r] = _mm512_setzero_ps();
  }
  const float* x = job.xt + m;  // x[r][e] at x[e * M + r]
  const size_t M = job.M;
  for (size_t b = 0; b < nb; ++b) {
    __m512 d[G], mn[G];
    const uint8_t* blk[G];
    for (int i = 0; i < G; ++i) {
      blk[i] = job.w + (g + static_cast<size_t>(i)) * job.group_bytes + b * bb;
      block_scales<F>(blk[i], d[i], mn[i]);
      // About 2.5 KiB ahead in each group's stream, so that decode (one activation row) keeps
      // enough reads from memory in flight.
      for (size_t c = 0; c < bb; c += 64) _mm_prefetch(blk[i] + ahead + c, _MM_HINT_T0);
    }
    for (size_t k = 0; k < 32; k += 2) {
      const size_t e = b * 32 + k;
      for (int i = 0; i < G; ++i) {
        __m512 w0, w1;
        element_pair<F>(blk[i], k, d[i], mn[i], w0, w1);
        for (int r = 0; r < R; ++r) {
          acc[i][r] = _mm512_fmadd_ps(w0, _mm512_set1_ps(x[e * M + r]), acc[i][r]);
        }
        for (int r = 0; r < R; ++r) {
          acc[i][r] = _mm512_fmadd_ps(w1, _mm512_set1_ps(x[(e + 1) * M + r]), acc[i][r]);
        }
      }
    }
  }
  for (int i = 0; i < G; ++i) {
    const size_t n0 = (g + static_cast<size_t>(i)) * kG;
    const size_t valid = std::min(kG, job.N - n0);
    const __mmask16 mask = static_cast<__mmask16>((1u << valid) - 1);
    for (int r = 0; r < R; ++r) {
      float* y = job.y + (m + static_cast<size_t>(r)) * job.ldy + n0;
      __m512 v = acc[i][r];
      if (job.accumulate) v = _mm512_add_ps(_mm512_maskz_loadu_ps(mask, y), v);
      _mm512_mask_storeu_ps(y, mask, v);
    }
  }
}

// Groups [g0, g1) against R activation rows from m: G groups at a time while they last (G
// independent FMA chains per row keep the FMA units busy when R is small), then one.
template <WeightFormat F, int G, int R>
ADAKV_AVX512_FN void tile_groups(const InterleavedJob& job, size_t g0, size_t g1, size_t m) {
  size_t g = g0;
  for (; g + G <= g1; g += G) tile<F, G, R>(job, g, m);
  for (; g < g1; ++g) tile<F, 1, R>(job, g, m);
}

template <WeightFormat F>
ADAKV_AVX512_FN void dots(const InterleavedJob& job, size_t g0, size_t g1, size_t m0, size_t m1) {
  size_t m = m0;
  for (; m + 16 <= m1; m += 16) tile_groups<F, 1, 16>(job, g0, g1, m);
  if (m + 8 <= m1) {
    tile_groups<F, 1, 8>(job, g0, g1, m);
    m += 8;
  }
  if (m + 4 <= m1) {
    tile_groups<F, 1, 4>(job, g0, g1, m);
    m += 4;
  }
  if (m + 2 <= m1) {
    tile_groups<F, 2, 2>(job, g0, g1, m);
    m += 2;
  }
  if (m < m1) tile_groups<F, 4, 1>(job, g0, g1, m);
}

template <WeightFormat F>
ADAKV_AVX512_FN void panel(const InterleavedJob& job, size_t g, size_t ng, float* out) {
  const size_t bb = kG * block_bytes(F), nb = job.K / 32, cols = kG * ng;
  for (size_t i = 0; i < ng; ++i) {
    for (size_t b = 0; b < nb; ++b) {
      const uint8_t* blk = job.w + (g + i) * job.group_bytes + b * bb;
      __m512 d, mn;
      block_scales<F>(blk, d, mn);
      for (size_t k = 0; k < 32; k += 2) {
        __m512 w0, w1;
        element_pair<F>(blk, k, d, mn, w0, w1);
        float* p = out + (b * 32 + k) * cols + i * kG;
        _mm512_storeu_ps(p, w0);
        _mm512_storeu_ps(p + cols, w1);
      }
    }
  }
}

// Columns [k, k + 16) of rows [m, m + 16) of x [M][K] into xt [K][M].
ADAKV_AVX512_INLINE void transpose16(const float* x, size_t M, size_t K, size_t m, size_t k,
                                     float* xt) {
  __m512 t[16], u[16];
  for (int i = 0; i < 16; i += 2) {
    const __m512 a = _mm512_loadu_ps(x + (m + static_cast<size_t>(i)) * K + k);
    const __m512 b = _mm512_loadu_ps(x + (m + static_cast<size_t>(i) + 1) * K + k);
    t[i] = _mm512_unpacklo_ps(a, b);  // per 128-bit lane L: a[4L], b[4L], a[4L+1], b[4L+1]
    t[i + 1] = _mm512_unpackhi_ps(a, b);
  }
  // u[4q + c]: per lane L, rows 4q..4q+3 of column 4L + c.
  for (int q = 0; q < 4; ++q) {
    const __m512d lo0 = _mm512_castps_pd(t[4 * q]), hi0 = _mm512_castps_pd(t[4 * q + 1]);
    const __m512d lo1 = _mm512_castps_pd(t[4 * q + 2]), hi1 = _mm512_castps_pd(t[4 * q + 3]);
    u[4 * q] = _mm512_castpd_ps(_mm512_unpacklo_pd(lo0, lo1));
    u[4 * q + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(lo0, lo1));
    u[4 * q + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(hi0, hi1));
    u[4 * q + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(hi0, hi1));
  }
  for (int c = 0; c < 4; ++c) {
    const __m512 v0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88);  // lanes 0, 2 of each
    const __m512 v1 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xdd);  // lanes 1, 3
    const __m512 v2 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88);
    const __m512 v3 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xdd);
    const size_t col = k + static_cast<size_t>(c);
    _mm512_storeu_ps(xt + col * M + m, _mm512_shuffle_f32x4(v0, v2, 0x88));
    _mm512_storeu_ps(xt + (col + 8) * M + m, _mm512_shuffle_f32x4(v0, v2, 0xdd));
    _mm512_storeu_ps(xt + (col + 4) * M + m, _mm512_shuffle_f32x4(v1, v3, 0x88));
    _mm512_storeu_ps(xt + (col + 12) * M + m, _mm512_shuffle_f32x4(v1, v3, 0xdd));
  }
}

}  // namespace

ADAKV_AVX512_FN void avx512_transpose(const float* x, size_t M, size_t K, size_t k0, size_t k1,
                                      float* xt) {
  size_t m = 0;
  if (k0 % 16 == 0 && k1 % 16 == 0) {
    for (; m + 16 <= M; m += 16) {
      for (size_t k = k0; k < k1; k += 16) transpose16(x, M, K, m, k, xt);
    }
  }
  for (; m < M; ++m) {
    for (size_t k = k0; k < k1; ++k) xt[k * M + m] = x[m * K + k];
  }
}

InterleavedDotsFn avx512_interleaved_dots(WeightFormat f) {
  switch (f) {
    case WeightFormat::kQ8_0:
      return dots<WeightFormat::kQ8_0>;
    case WeightFormat::kQ4_0:
      return dots<WeightFormat::kQ4_0>;
    case WeightFormat::kQ4_1:
      return dots<WeightFormat::kQ4_1>;
    default:
      return nullptr;
  }
}

InterleavedPanelFn avx512_interleaved_panel(WeightFormat f) {
  switch (f) {
    case WeightFormat::kQ8_0:
      return panel<WeightFormat::kQ8_0>;
    case WeightFormat::kQ4_0:
      return panel<WeightFormat::kQ4_0>;
    case WeightFormat::kQ4_1:
      return panel<WeightFormat::kQ4_1>;
    default:
      return nullptr;
  }
}

}  // namespace adakv::kernels::quant_detail

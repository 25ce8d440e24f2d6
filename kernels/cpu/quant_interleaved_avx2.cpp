// Products against interleaved weights (WeightLayout::kInterleaved), AVX2 level: as the AVX-512
// level (quant_interleaved_avx512.cpp) with each element of a group's 16 rows in two 256-bit
// halves, and at most 4 activation rows per tile (16 registers). Same FMA order per output as
// the scalar reference, so the same bits.
#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/quant_impl.h"

#define ADAKV_AVX2_FN __attribute__((target("avx2,fma,f16c")))
#define ADAKV_AVX2_INLINE __attribute__((target("avx2,fma,f16c"), always_inline)) inline

namespace adakv::kernels::quant_detail {

namespace {

constexpr size_t kG = kInterleaveRows;

// One element of 16 rows: lanes 0-7 and 8-15.
struct Half2 {
  __m256 v[2];
};

template <WeightFormat F>
ADAKV_AVX2_INLINE void block_scales(const uint8_t* blk, Half2& d, Half2& m) {
  for (int h = 0; h < 2; ++h) {
    d.v[h] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 16 * h)));
    m.v[h] =
        F == WeightFormat::kQ4_1
            ? _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 32 + 16 * h)))
            : _mm256_setzero_ps();
  }
}

template <WeightFormat F>
ADAKV_AVX2_INLINE void element_pair(const uint8_t* blk, size_t k, const Half2& d, const Half2& m,
                                    Half2& w0, Half2& w1) {
  for (int h = 0; h < 2; ++h) {
    if constexpr (F == WeightFormat::kQ8_0) {
      const uint8_t* q = blk + 32 + k * kG + 8 * h;
      const __m256i q0 = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q)));
      const __m256i q1 =
          _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + kG)));
      w0.v[h] = _mm256_mul_ps(_mm256_cvtepi32_ps(q0), d.v[h]);
      w1.v[h] = _mm256_mul_ps(_mm256_cvtepi32_ps(q1), d.v[h]);
    } else {
      constexpr size_t kQuants = F == WeightFormat::kQ4_1 ? 64 : 32;
      const __m256i bytes = _mm256_cvtepu8_epi32(
          _mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk + kQuants + (k / 2) * kG + 8 * h)));
      __m256i lo = _mm256_and_si256(bytes, _mm256_set1_epi32(0x0F));
      __m256i hi = _mm256_srli_epi32(bytes, 4);
      if constexpr (F == WeightFormat::kQ4_0) {
        lo = _mm256_sub_epi32(lo, _mm256_set1_epi32(8));
        hi = _mm256_sub_epi32(hi, _mm256_set1_epi32(8));
        w0.v[h] = _mm256_mul_ps(_mm256_cvtepi32_ps(lo), d.v[h]);
        w1.v[h] = _mm256_mul_ps(_mm256_cvtepi32_ps(hi), d.v[h]);
      } else {
        w0.v[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lo), d.v[h], m.v[h]);
        w1.v[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(hi), d.v[h], m.v[h]);
      }
    }
  }
}

template <WeightFormat F, int G, int R>
ADAKV_AVX2_FN void tile(const InterleavedJob& job, size_t g, size_t m) {
  const size_t bb = kG * block_bytes(F), nb = job.K / 32;
  Half2 acc[G][R];
  for (int i = 0; i < G; ++i) {
    for (int r = 0; r < R; ++r) acc[i][r].v[0] = acc[i][r].v[1] = _mm256_setzero_ps();
  }
  const float* x = job.xt + m;  // x[r][e] at x[e * M + r]
  const size_t M = job.M;
  for (size_t b = 0; b < nb; ++b) {
    for (int i = 0; i < G; ++i) {
      const uint8_t* blk = job.w + (g + static_cast<size_t>(i)) * job.group_bytes + b * bb;
      Half2 d, mn;
      block_scales<F>(blk, d, mn);
      for (size_t k = 0; k < 32; k += 2) {
        const size_t e = b * 32 + k;
        Half2 w0, w1;
        element_pair<F>(blk, k, d, mn, w0, w1);
        for (int r = 0; r < R; ++r) {
          const __m256 x0 = _mm256_broadcast_ss(x + e * M + r);
          const __m256 x1 = _mm256_broadcast_ss(x + (e + 1) * M + r);
          for (int h = 0; h < 2; ++h) {
            acc[i][r].v[h] = _mm256_fmadd_ps(w0.v[h], x0, acc[i][r].v[h]);
            acc[i][r].v[h] = _mm256_fmadd_ps(w1.v[h], x1, acc[i][r].v[h]);
          }
        }
      }
    }
  }
  for (int i = 0; i < G; ++i) {
    const size_t n0 = (g + static_cast<size_t>(i)) * kG;
    const size_t valid = std::min(kG, job.N - n0);
    for (int r = 0; r < R; ++r) {
      float* y = job.y + (m + static_cast<size_t>(r)) * job.ldy + n0;
      alignas(32) float out[kG];
      _mm256_store_ps(out, acc[i][r].v[0]);
      _mm256_store_ps(out + 8, acc[i][r].v[1]);
      for (size_t j = 0; j < valid; ++j) y[j] = job.accumulate ? y[j] + out[j] : out[j];
    }
  }
}

template <WeightFormat F, int G, int R>
ADAKV_AVX2_FN void tile_groups(const InterleavedJob& job, size_t g0, size_t g1, size_t m) {
  size_t g = g0;
  for (; g + G <= g1; g += G) tile<F, G, R>(job, g, m);
  for (; g < g1; ++g) tile<F, 1, R>(job, g, m);
}

template <WeightFormat F>
ADAKV_AVX2_FN void dots(const InterleavedJob& job, size_t g0, size_t g1, size_t m0, size_t m1) {
  size_t m = m0;
  for (; m + 4 <= m1; m += 4) tile_groups<F, 1, 4>(job, g0, g1, m);
  if (m + 2 <= m1) {
    tile_groups<F, 1, 2>(job, g0, g1, m);
    m += 2;
  }
  if (m < m1) tile_groups<F, 2, 1>(job, g0, g1, m);
}

template <WeightFormat F>
ADAKV_AVX2_FN void panel(const InterleavedJob& job, size_t g, size_t ng, float* out) {
  const size_t bb = kG * block_bytes(F), nb = job.K / 32, cols = kG * ng;
  for (size_t i = 0; i < ng; ++i) {
    for (size_t b = 0; b < nb; ++b) {
      const uint8_t* blk = job.w + (g + i) * job.group_bytes + b * bb;
      Half2 d, mn;
      block_scales<F>(blk, d, mn);
      for (size_t k = 0; k < 32; k += 2) {
        Half2 w0, w1;
        element_pair<F>(blk, k, d, mn, w0, w1);
        float* p = out + (b * 32 + k) * cols + i * kG;
        for (int h = 0; h < 2; ++h) {
          _mm256_storeu_ps(p + 8 * h, w0.v[h]);
          _mm256_storeu_ps(p + cols + 8 * h, w1.v[h]);
        }
      }
    }
  }
}

}  // namespace

InterleavedDotsFn avx2_interleaved_dots(WeightFormat f) {
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

InterleavedPanelFn avx2_interleaved_panel(WeightFormat f) {
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

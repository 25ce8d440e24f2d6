// Products against interleaved weights on int16 activations (WeightLayout::kInterleaved,
// MatmulPath::kInt16Dots), AVX-512 with VNNI. One 512-bit vector holds elements k and k + 1 of a
// group's 16 weight rows as int16 pairs; vpdpwssd multiplies them with a broadcast pair of one
// activation row's int16 values and adds both products to that row's 16 int32 sums, exactly.
// A block's weight pairs are unpacked once for up to 16 activation rows. Per 32-element block each
// output then takes acc = fma(float(isum), dw * dx, acc) and, for Q4_1, acc = fma(mw, sx, acc):
// the operations of quant_interleaved.cpp's reference in its order, so the bits are the same.
#include <algorithm>

#include "kernels/cpu/avx512_target.h"
#include "kernels/cpu/quant_impl.h"

namespace adakv::kernels::quant_detail {

namespace {

constexpr size_t kG = kInterleaveRows;

// Elements 2p and 2p + 1 of the block's 16 rows: lane j holds row j's two weights as int16,
// element 2p in the low half. q points at the block's quants.
template <WeightFormat F>
ADAKV_AVX512_VNNI_INLINE __m512i weight_pair(const uint8_t* q, size_t p, __m512i pair_index) {
  if constexpr (F == WeightFormat::kQ8_0) {
    // Elements 2p and 2p + 1 lie one after the other, 16 rows each: widen, then pair them up.
    const __m512i both =
        _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 2 * p * kG)));
    return _mm512_permutexvar_epi16(pair_index, both);
  } else {
    // One byte per row: element 2p in the low nibble, 2p + 1 in the high one, which the shift
    // by 12 moves to bits 16..19.
    const __m512i b =
        _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + p * kG)));
    __m512i pair = _mm512_and_si512(_mm512_or_si512(b, _mm512_slli_epi32(b, 12)),
                                    _mm512_set1_epi32(0x000F000F));
    if constexpr (F == WeightFormat::kQ4_0) pair = _mm512_sub_epi16(pair, _mm512_set1_epi16(8));
    return pair;
  }
}

// isum += w * the int16 pair at x, broadcast to every lane (vpdpwssd with an embedded
// broadcast). In asm because GCC compiles _mm512_dpwssd_epi32 on a broadcast into a separate
// vpbroadcastd and a copy of the accumulator around each instruction, which doubled the inner
// loop.
ADAKV_AVX512_VNNI_INLINE void dot_pair(__m512i& isum, __m512i w, const int32_t* x) {
  asm("vpdpwssd %2%{1to16%}, %1, %0" : "+v"(isum) : "v"(w), "m"(*x));
}

// The block's 32 elements of H activation rows from `pairs` (pair p of row r at pairs[p * M +
// r]) against its 16 weight pairs: exact int32 sums, one vector of 16 weight rows per activation
// row. The pairs come unpacked from wbuf when kBuffered, else unpacked from the quants here.
template <WeightFormat F, int H, bool kBuffered>
ADAKV_AVX512_VNNI_INLINE void block_sums(__m512i (&isum)[H], const int32_t* pairs, size_t M,
                                         const int16_t (*wbuf)[32], const uint8_t* quants,
                                         __m512i pair_index) {
  for (int r = 0; r < H; ++r) isum[r] = _mm512_setzero_si512();
  for (size_t p = 0; p < 16; ++p) {
    __m512i wp;
    if constexpr (kBuffered) {
      wp = _mm512_load_si512(wbuf[p]);
    } else {
      wp = weight_pair<F>(quants, p, pair_index);
    }
    for (int r = 0; r < H; ++r) dot_pair(isum[r], wp, pairs + p * M + r);
  }
}

// Groups [g, g + G) against activation rows [m, m + R). Above 8 rows the block's weight pairs
// are unpacked once into wbuf and the rows taken 8 at a time, so that 16 float accumulators, 8
// int32 sums and the operands fit the 32 registers.
template <WeightFormat F, int G, int R>
ADAKV_AVX512_VNNI_FN void tile(const InterleavedJob& job, size_t g, size_t m) {
  constexpr size_t kQuants = F == WeightFormat::kQ4_1 ? 64 : 32;
  constexpr int H = R > 8 ? 8 : R;
  static_assert(R % H == 0 && (G == 1 || R <= 8));
  const size_t bb = kG * block_bytes(F), nb = job.K / 32;
  const size_t ahead = std::max<size_t>(2, 2560 / bb) * bb;
  alignas(64) static constexpr int16_t kPairs[32] = {0,  16, 1,  17, 2,  18, 3,  19, 4,  20, 5,
                                                     21, 6,  22, 7,  23, 8,  24, 9,  25, 10, 26,
                                                     11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i pair_index = _mm512_load_si512(kPairs);
  alignas(64) int16_t wbuf[16][32];
  __m512 acc[G][R];
  for (int i = 0; i < G; ++i) {
    for (int r = 0; r < R; ++r) acc[i][r] = _mm512_setzero_ps();
  }
  const size_t M = job.M;
  const int32_t* xp = job.xpairs + m;  // pair e of row m + r at xp[e * M + r]
  const float* xd = job.xwdt + m;      // block b of row m + r at xd[b * M + r]
  const float* xs = job.xwst + m;
  for (size_t b = 0; b < nb; ++b) {
    const int32_t* pairs = xp + b * 16 * M;
    for (int i = 0; i < G; ++i) {
      const uint8_t* blk = job.w + (g + static_cast<size_t>(i)) * job.group_bytes + b * bb;
      // About 2.5 KiB ahead in each group's stream, as the float kernel does.
      for (size_t c = 0; c < bb; c += 64) _mm_prefetch(blk + ahead + c, _MM_HINT_T0);
      const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk)));
      __m512 mn = _mm512_setzero_ps();
      if constexpr (F == WeightFormat::kQ4_1) {
        mn = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 32)));
      }
      if constexpr (R > H) {
        for (size_t p = 0; p < 16; ++p) {
          _mm512_store_si512(wbuf[p], weight_pair<F>(blk + kQuants, p, pair_index));
        }
      }
      for (int h = 0; h < R; h += H) {
        __m512i isum[H];
        block_sums<F, H, (R > H)>(isum, pairs + h, M, wbuf, blk + kQuants, pair_index);
        for (int r = 0; r < H; ++r) {
          acc[i][h + r] =
              _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[r]),
                              _mm512_mul_ps(d, _mm512_set1_ps(xd[b * M + h + r])), acc[i][h + r]);
        }
        if constexpr (F == WeightFormat::kQ4_1) {
          for (int r = 0; r < H; ++r) {
            acc[i][h + r] = _mm512_fmadd_ps(mn, _mm512_set1_ps(xs[b * M + h + r]), acc[i][h + r]);
          }
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

// Groups [g0, g1) against R activation rows from m: G groups at a time while they last, then one.
template <WeightFormat F, int G, int R>
ADAKV_AVX512_VNNI_FN void tile_groups(const InterleavedJob& job, size_t g0, size_t g1, size_t m) {
  size_t g = g0;
  for (; g + G <= g1; g += G) tile<F, G, R>(job, g, m);
  for (; g < g1; ++g) tile<F, 1, R>(job, g, m);
}

template <WeightFormat F>
ADAKV_AVX512_VNNI_FN void dots(const InterleavedJob& job, size_t g0, size_t g1, size_t m0,
                               size_t m1) {
  size_t m = m0;
  for (; m + 16 <= m1; m += 16) tile_groups<F, 1, 16>(job, g0, g1, m);
  if (m + 8 <= m1) {
    tile_groups<F, 1, 8>(job, g0, g1, m);
    m += 8;
  }
  if (m + 4 <= m1) {
    tile_groups<F, 2, 4>(job, g0, g1, m);
    m += 4;
  }
  if (m + 2 <= m1) {
    tile_groups<F, 2, 2>(job, g0, g1, m);
    m += 2;
  }
  if (m < m1) tile_groups<F, 4, 1>(job, g0, g1, m);
}

}  // namespace

InterleavedDotsFn avx512_interleaved_int16_dots(WeightFormat f) {
  if (!cpu_has_avx512_vnni()) return nullptr;
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

}  // namespace adakv::kernels::quant_detail

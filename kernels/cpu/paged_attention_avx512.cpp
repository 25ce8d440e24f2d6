// attention_paged, AVX-512 (F + BW + VL) level: the chunk kernel of paged_attention_simd.h on
// 16-float vectors. K and V are read in their stored dtype into registers as the AVX2 level does
// (paged_attention_avx2.cpp): f32 as is, bf16 widened and shifted up 16, E4M3 moved under a
// half's fields (worth code / 256) and widened by _mm512_cvtph_ps. The softmax masks are mask
// registers. P x V tiles are up to 4 vectors (64 dims) wide: 4 rows x 4 vectors = 16
// accumulators. Needs a head_dim that is a multiple of 16. Every function here is compiled for
// that target by attribute and only called after CPUID says the CPU has it.
#include <cstdint>
#include <limits>

#include "kernels/cpu/avx512_target.h"

#define ADAKV_PAGED_FN ADAKV_AVX512_FN
#define ADAKV_PAGED_INLINE ADAKV_AVX512_INLINE

#include "kernels/cpu/paged_attention_impl.h"
#include "kernels/cpu/paged_attention_simd.h"

namespace adakv::kernels::paged_detail {
namespace {

// The vector trait of paged_attention_simd.h on __m512.
struct Avx512 {
  using F = __m512;
  using Mask = __mmask16;
  static constexpr size_t kLanes = 16;
  static constexpr size_t kValueVecs = 4;

  // Sixteen consecutive elements d..d+15 of a stored K or V row, as float32 (E4M3: / 256).
  template <KvDtype D>
  ADAKV_AVX512_INLINE static F load_kv(const uint8_t* row, size_t d) {
    if constexpr (D == KvDtype::kF32) {
      return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + d);
    } else if constexpr (D == KvDtype::kBF16) {
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * d));
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    } else {
      // Byte s.eeee.mmm to half s.0eeee.mmm0000000: shifted to bits 15..8, then an arithmetic
      // shift by one moves e and m into place (copying s into bit 14), the mask clears bit 14.
      const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + d));
      const __m256i h =
          _mm256_and_si256(_mm256_srai_epi16(_mm256_slli_epi16(_mm256_cvtepu8_epi16(c), 8), 1),
                           _mm256_set1_epi16(static_cast<int16_t>(0xBF80)));
      return _mm512_cvtph_ps(h);
    }
  }

  ADAKV_AVX512_INLINE static F load(const float* p) { return _mm512_loadu_ps(p); }
  ADAKV_AVX512_INLINE static void store(float* p, F x) { _mm512_storeu_ps(p, x); }
  ADAKV_AVX512_INLINE static F zero() { return _mm512_setzero_ps(); }
  ADAKV_AVX512_INLINE static F set1(float x) { return _mm512_set1_ps(x); }
  ADAKV_AVX512_INLINE static F broadcast(const float* p) { return _mm512_set1_ps(*p); }
  ADAKV_AVX512_INLINE static F add(F a, F b) { return _mm512_add_ps(a, b); }
  ADAKV_AVX512_INLINE static F sub(F a, F b) { return _mm512_sub_ps(a, b); }
  ADAKV_AVX512_INLINE static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  ADAKV_AVX512_INLINE static F min(F a, F b) { return _mm512_min_ps(a, b); }
  ADAKV_AVX512_INLINE static F max(F a, F b) { return _mm512_max_ps(a, b); }
  ADAKV_AVX512_INLINE static F fmadd(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  ADAKV_AVX512_INLINE static F fnmadd(F a, F b, F c) { return _mm512_fnmadd_ps(a, b, c); }
  ADAKV_AVX512_INLINE static F round(F x) {
    return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  // 2^k for an integral k in the float exponent's range.
  ADAKV_AVX512_INLINE static F exp2i(F k) {
    return _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(k), _mm512_set1_epi32(127)), 23));
  }

  // The high 256 bits (AVX-512F has no _mm512_extractf32x8_ps).
  ADAKV_AVX512_INLINE static __m256 high256(F x) {
    return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1));
  }
  ADAKV_AVX512_INLINE static __m128 fold128(F x) {
    const __m256 s = _mm256_add_ps(_mm512_castps512_ps256(x), high256(x));
    return _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  }
  ADAKV_AVX512_INLINE static float hsum(F x) {
    __m128 s = fold128(x);
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  ADAKV_AVX512_INLINE static float hmax(F x) {
    const __m256 h = _mm256_max_ps(_mm512_castps512_ps256(x), high256(x));
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  // The lane sums of four vectors, as one 4-float vector (sum of a0, ..., sum of a3): a 4 x 4
  // transpose-and-add inside each 128-bit lane, then the four lanes added.
  ADAKV_AVX512_INLINE static __m128 hsum4(F a0, F a1, F a2, F a3) {
    const __m512 t0 = _mm512_add_ps(_mm512_unpacklo_ps(a0, a1), _mm512_unpackhi_ps(a0, a1));
    const __m512 t1 = _mm512_add_ps(_mm512_unpacklo_ps(a2, a3), _mm512_unpackhi_ps(a2, a3));
    const __m512 u = _mm512_add_ps(_mm512_shuffle_ps(t0, t1, _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm512_shuffle_ps(t0, t1, _MM_SHUFFLE(3, 2, 3, 2)));
    return fold128(u);
  }

  // Lanes t + i < visible.
  ADAKV_AVX512_INLINE static Mask keep_below(size_t visible, size_t t) {
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i vis = _mm512_set1_epi32(static_cast<int32_t>(visible));
    return _mm512_cmpgt_epi32_mask(vis, _mm512_add_epi32(lane, _mm512_set1_epi32(int32_t(t))));
  }
  // b where keep, else a.
  ADAKV_AVX512_INLINE static F select(Mask keep, F a, F b) {
    return _mm512_mask_blend_ps(keep, a, b);
  }
  // e where x is not -inf, else 0.
  ADAKV_AVX512_INLINE static F unless_neg_inf(F x, F e) {
    const __m512 neg_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, neg_inf, _CMP_NEQ_UQ), e);
  }

  static bool has_e4m3_nan(const uint8_t* codes, size_t n);
};

// Whether any of the first n codes is an E4M3 NaN (0x7F or 0xFF): exactly the codes for which
// c | 0x80 is 0xFF.
ADAKV_AVX512_FN bool Avx512::has_e4m3_nan(const uint8_t* codes, size_t n) {
  const __m512i sign = _mm512_set1_epi8(static_cast<char>(0x80));
  const __m512i all = _mm512_set1_epi8(static_cast<char>(0xFF));
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    const __m512i c = _mm512_or_si512(_mm512_loadu_si512(codes + i), sign);
    if (_mm512_cmpeq_epi8_mask(c, all)) return true;
  }
  for (; i < n; ++i) {
    if ((codes[i] | 0x80) == 0xFF) return true;
  }
  return false;
}

}  // namespace

void run_chunk_avx512(const Chunk& c, const PagedSequence& seq, const uint8_t* pool,
                      const KvBlockLayout& layout, size_t group, float scale, float* states,
                      ChunkScratch& scratch) {
  run_chunk_simd<Avx512>(c, seq, pool, layout, group, scale, states, scratch);
}

}  // namespace adakv::kernels::paged_detail

// attention_paged, AVX2 + FMA + F16C level: the chunk kernel of paged_attention_simd.h on
// 8-float vectors. K and V are read in their stored dtype straight into registers:
//  - f32: loaded as is;
//  - bf16: the 16-bit code widened to 32 bits and shifted up 16 (bf16 is float's top half);
//  - E4M3: the byte moved under an IEEE half's sign/exponent/mantissa fields, which makes a
//    half worth exactly code / 256 (normals and subnormals alike: the half exponent bias is 8
//    more than E4M3's), then F16C widens it.
// P x V tiles are 2 vectors (16 dims) wide: 4 rows x 2 vectors = 8 accumulators. Every function
// here is compiled for that target by attribute and only called after CPUID says the CPU has
// it.
#include <immintrin.h>

#include <cstdint>
#include <limits>

#define ADAKV_AVX2_FN __attribute__((target("avx2,fma,f16c")))
#define ADAKV_AVX2_INLINE __attribute__((target("avx2,fma,f16c"), always_inline)) inline
#define ADAKV_PAGED_FN ADAKV_AVX2_FN
#define ADAKV_PAGED_INLINE ADAKV_AVX2_INLINE

#include "kernels/cpu/paged_attention_impl.h"
#include "kernels/cpu/paged_attention_simd.h"

namespace adakv::kernels::paged_detail {
namespace {

// The vector trait of paged_attention_simd.h on __m256.
struct Avx2 {
  using F = __m256;
  using Mask = __m256;  // all ones in the lanes kept
  static constexpr size_t kLanes = 8;
  static constexpr size_t kValueVecs = 2;

  // Eight consecutive elements d..d+7 of a stored K or V row, as float32 (E4M3: / 256).
  template <KvDtype D>
  ADAKV_AVX2_INLINE static F load_kv(const uint8_t* row, size_t d) {
    if constexpr (D == KvDtype::kF32) {
      return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + d);
    } else if constexpr (D == KvDtype::kBF16) {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * d));
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    } else {
      // Byte s.eeee.mmm to half s.0eeee.mmm0000000: unpacking under a zero byte puts it at bits
      // 15..8, an arithmetic shift by one moves e and m into place (copying s into bit 14), the
      // mask clears bit 14.
      const __m128i c = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + d));
      const __m128i h = _mm_and_si128(_mm_srai_epi16(_mm_unpacklo_epi8(_mm_setzero_si128(), c), 1),
                                      _mm_set1_epi16(static_cast<int16_t>(0xBF80)));
      return _mm256_cvtph_ps(h);
    }
  }

  ADAKV_AVX2_INLINE static F load(const float* p) { return _mm256_loadu_ps(p); }
  ADAKV_AVX2_INLINE static void store(float* p, F x) { _mm256_storeu_ps(p, x); }
  ADAKV_AVX2_INLINE static F zero() { return _mm256_setzero_ps(); }
  ADAKV_AVX2_INLINE static F set1(float x) { return _mm256_set1_ps(x); }
  ADAKV_AVX2_INLINE static F broadcast(const float* p) { return _mm256_broadcast_ss(p); }
  ADAKV_AVX2_INLINE static F add(F a, F b) { return _mm256_add_ps(a, b); }
  ADAKV_AVX2_INLINE static F sub(F a, F b) { return _mm256_sub_ps(a, b); }
  ADAKV_AVX2_INLINE static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  ADAKV_AVX2_INLINE static F min(F a, F b) { return _mm256_min_ps(a, b); }
  ADAKV_AVX2_INLINE static F max(F a, F b) { return _mm256_max_ps(a, b); }
  ADAKV_AVX2_INLINE static F fmadd(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  ADAKV_AVX2_INLINE static F fnmadd(F a, F b, F c) { return _mm256_fnmadd_ps(a, b, c); }
  ADAKV_AVX2_INLINE static F round(F x) {
    return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  // 2^k for an integral k in the float exponent's range.
  ADAKV_AVX2_INLINE static F exp2i(F k) {
    return _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23));
  }

  ADAKV_AVX2_INLINE static float hsum(F x) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  ADAKV_AVX2_INLINE static float hmax(F x) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  // The lane sums of four vectors, as one 4-float vector (sum of a0, ..., sum of a3).
  ADAKV_AVX2_INLINE static __m128 hsum4(F a0, F a1, F a2, F a3) {
    const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
    return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  }

  // Lanes t + i < visible.
  ADAKV_AVX2_INLINE static Mask keep_below(size_t visible, size_t t) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i vis = _mm256_set1_epi32(static_cast<int32_t>(visible));
    return _mm256_castsi256_ps(
        _mm256_cmpgt_epi32(vis, _mm256_add_epi32(lane, _mm256_set1_epi32(int32_t(t)))));
  }
  // b where keep, else a.
  ADAKV_AVX2_INLINE static F select(Mask keep, F a, F b) { return _mm256_blendv_ps(a, b, keep); }
  // e where x is not -inf, else 0.
  ADAKV_AVX2_INLINE static F unless_neg_inf(F x, F e) {
    const __m256 neg_inf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
    return _mm256_and_ps(e, _mm256_cmp_ps(x, neg_inf, _CMP_NEQ_UQ));
  }

  static bool has_e4m3_nan(const uint8_t* codes, size_t n);
};

// Whether any of the first n codes is an E4M3 NaN (0x7F or 0xFF): exactly the codes for which
// c | 0x80 is 0xFF, so a running byte-wise maximum of c | 0x80 reaches 0xFF iff one is there.
ADAKV_AVX2_FN bool Avx2::has_e4m3_nan(const uint8_t* codes, size_t n) {
  const __m256i sign = _mm256_set1_epi8(static_cast<char>(0x80));
  __m256i m0 = sign, m1 = sign;
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    const __m256i c0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + i));
    const __m256i c1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + i + 32));
    m0 = _mm256_max_epu8(m0, _mm256_or_si256(c0, sign));
    m1 = _mm256_max_epu8(m1, _mm256_or_si256(c1, sign));
  }
  const __m256i all = _mm256_set1_epi8(static_cast<char>(0xFF));
  if (!_mm256_testz_si256(_mm256_cmpeq_epi8(_mm256_max_epu8(m0, m1), all), all)) return true;
  for (; i < n; ++i) {
    if ((codes[i] | 0x80) == 0xFF) return true;
  }
  return false;
}

}  // namespace

void run_chunk_avx2(const Chunk& c, const PagedSequence& seq, const uint8_t* pool,
                    const KvBlockLayout& layout, size_t group, float scale, float* states,
                    ChunkScratch& scratch) {
  run_chunk_simd<Avx2>(c, seq, pool, layout, group, scale, states, scratch);
}

}  // namespace adakv::kernels::paged_detail

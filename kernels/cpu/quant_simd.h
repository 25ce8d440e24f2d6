// AVX2 unpacking of the weight formats, shared by quant_avx2.cpp and quant_avx512.cpp. Every
// function carries the AVX2 target attribute, so it compiles (and is only ever called) under a
// function-level target, whatever -march says; the AVX-512 target includes it, so it inlines
// there too.
#pragma once

#include <immintrin.h>

#include "kernels/cpu/quant_impl.h"

#define ADAKV_TARGET_AVX2 __attribute__((target("avx2,fma,f16c"), always_inline)) inline

namespace adakv::kernels::quant_detail::simd {

// A 32-element piece of a weight row unpacked in registers: w[i] = dw * s16[i / 16] * q[i] + mw.
// q is int8 (signed formats) or uint8 in [0, 31] (formats with a min, kUnsigned).
struct Piece {
  __m256i q;
  float dw;
  float mw;
};

// Low and high nibbles of 16 bytes: byte l -> element l (low) and l + 16 (high).
ADAKV_TARGET_AVX2 __m256i nibbles16(const uint8_t* qs) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(v, 4), v);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

// Bit j of qh -> 0x10 in byte j, else 0.
ADAKV_TARGET_AVX2 __m256i fifth_bits(uint32_t qh) {
  const __m256i v = _mm256_set1_epi32(static_cast<int>(qh));
  // Byte j takes byte j / 8 of qh (shuffle indexes within each 128-bit lane; both lanes hold qh).
  const __m256i spread =
      _mm256_shuffle_epi8(v, _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2,
                                              2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
  return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

// An fp16 scale, converted by F16C (exact, as fp16_to_fp32).
ADAKV_TARGET_AVX2 float half(const uint8_t* p) {
  return _cvtsh_ss(load_u16(p));
}

ADAKV_TARGET_AVX2 __m256i load32(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// Format traits: kSubs 32-element pieces per block; prepare() reads a block's scales once,
// piece() unpacks piece `sub` of it.
template <WeightFormat F>
struct Fmt;

template <>
struct Fmt<WeightFormat::kQ8_0> {
  static constexpr int kSubs = 1, kBytes = 34;
  static constexpr bool kUnsigned = false, kMin = false, kScales16 = false;
  struct State {
    const uint8_t* b;
  };
  ADAKV_TARGET_AVX2 static void prepare(const uint8_t* b, State& s) { s.b = b; }
  ADAKV_TARGET_AVX2 static Piece piece(const State& s, int) {
    return {load32(s.b + 2), half(s.b), 0.0f};
  }
};

template <>
struct Fmt<WeightFormat::kQ4_0> {
  static constexpr int kSubs = 1, kBytes = 18;
  static constexpr bool kUnsigned = false, kMin = false, kScales16 = false;
  struct State {
    const uint8_t* b;
  };
  ADAKV_TARGET_AVX2 static void prepare(const uint8_t* b, State& s) { s.b = b; }
  ADAKV_TARGET_AVX2 static Piece piece(const State& s, int) {
    const __m256i q = _mm256_sub_epi8(nibbles16(s.b + 2), _mm256_set1_epi8(8));
    return {q, half(s.b), 0.0f};
  }
};

template <>
struct Fmt<WeightFormat::kQ4_1> {
  static constexpr int kSubs = 1, kBytes = 20;
  static constexpr bool kUnsigned = true, kMin = true, kScales16 = false;
  struct State {
    const uint8_t* b;
  };
  ADAKV_TARGET_AVX2 static void prepare(const uint8_t* b, State& s) { s.b = b; }
  ADAKV_TARGET_AVX2 static Piece piece(const State& s, int) {
    return {nibbles16(s.b + 4), half(s.b), half(s.b + 2)};
  }
};

template <>
struct Fmt<WeightFormat::kQ5_0> {
  static constexpr int kSubs = 1, kBytes = 22;
  static constexpr bool kUnsigned = false, kMin = false, kScales16 = false;
  struct State {
    const uint8_t* b;
  };
  ADAKV_TARGET_AVX2 static void prepare(const uint8_t* b, State& s) { s.b = b; }
  ADAKV_TARGET_AVX2 static Piece piece(const State& s, int) {
    const __m256i q5 = _mm256_or_si256(nibbles16(s.b + 6), fifth_bits(load_u32(s.b + 2)));
    return {_mm256_sub_epi8(q5, _mm256_set1_epi8(16)), half(s.b), 0.0f};
  }
};

template <>
struct Fmt<WeightFormat::kQ5_1> {
  static constexpr int kSubs = 1, kBytes = 24;
  static constexpr bool kUnsigned = true, kMin = true, kScales16 = false;
  struct State {
    const uint8_t* b;
  };
  ADAKV_TARGET_AVX2 static void prepare(const uint8_t* b, State& s) { s.b = b; }
  ADAKV_TARGET_AVX2 static Piece piece(const State& s, int) {
    const __m256i q5 = _mm256_or_si256(nibbles16(s.b + 8), fifth_bits(load_u32(s.b + 4)));
    return {q5, half(s.b), half(s.b + 2)};
  }
};

// Q4_K / Q5_K: d, dmin, scales[12], (Q5_K: qh[32]), qs[128]. Piece sub = 2c + h is nibble h of
// qs[32c .. 32c + 32); Q5_K adds bit `sub` of qh[l] as 0x10.
template <bool k5>
struct FmtK45 {
  static constexpr int kSubs = 8, kBytes = k5 ? 176 : 144;
  static constexpr bool kUnsigned = true, kMin = true, kScales16 = false;
  struct State {
    const uint8_t* qs;
    __m256i qh;
    float dw[8];
    float mw[8];
  };
  ADAKV_TARGET_AVX2 static void prepare(const uint8_t* b, State& s) {
    int sc[8], mn[8];
    k_scales_mins(b + 4, sc, mn);
    const float d = half(b), dmin = half(b + 2);
    for (int i = 0; i < 8; ++i) {
      s.dw[i] = d * static_cast<float>(sc[i]);
      s.mw[i] = -(dmin * static_cast<float>(mn[i]));
    }
    s.qs = b + (k5 ? 48 : 16);
    if (k5) s.qh = load32(b + 16);
  }
  ADAKV_TARGET_AVX2 static Piece piece(const State& s, int sub) {
    __m256i v = load32(s.qs + (sub / 2) * 32);
    if (sub % 2) v = _mm256_srli_epi16(v, 4);
    __m256i q = _mm256_and_si256(v, _mm256_set1_epi8(0x0F));
    if (k5) {
      const __m256i bit = _mm256_set1_epi8(static_cast<char>(1 << sub));
      const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(s.qh, bit), bit);
      q = _mm256_or_si256(q, _mm256_and_si256(set, _mm256_set1_epi8(0x10)));
    }
    return {q, s.dw[sub], s.mw[sub]};
  }
};
template <>
struct Fmt<WeightFormat::kQ4_K> : FmtK45<false> {};
template <>
struct Fmt<WeightFormat::kQ5_K> : FmtK45<true> {};

// Q6_K: ql[128], qh[64], int8 scales[16], d. Piece sub = 4c + g: low nibble g / 2 of
// ql[64c + 32(g % 2) + l], bits 2g..2g+1 of qh[32c + l], minus 32; scales 8c + 2g and + 1.
template <>
struct Fmt<WeightFormat::kQ6_K> {
  static constexpr int kSubs = 8, kBytes = 210;
  static constexpr bool kUnsigned = false, kMin = false, kScales16 = true;
  struct State {
    const uint8_t* b;
    float d;
  };
  ADAKV_TARGET_AVX2 static void prepare(const uint8_t* b, State& s) {
    s.b = b;
    s.d = half(b + 208);
  }
  ADAKV_TARGET_AVX2 static Piece piece(const State& s, int sub) {
    const int c = sub / 4, g = sub % 4;
    __m256i lo = load32(s.b + c * 64 + (g % 2) * 32);
    if (g / 2) lo = _mm256_srli_epi16(lo, 4);
    lo = _mm256_and_si256(lo, _mm256_set1_epi8(0x0F));
    __m256i hi = load32(s.b + 128 + c * 32);
    hi = _mm256_and_si256(_mm256_srl_epi16(hi, _mm_cvtsi32_si128(2 * g)), _mm256_set1_epi8(3));
    const __m256i q = _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
    return {_mm256_sub_epi8(q, _mm256_set1_epi8(32)), s.d, 0.0f};
  }
  // The two 16-bit factors of piece sub: scale 8c + 2g in the low lane, + 1 in the high lane.
  // The same two factors as integers.
  ADAKV_TARGET_AVX2 static void scale_ints(const State& s, int sub, int& lo, int& hi) {
    const int c = sub / 4, g = sub % 4;
    const int8_t* sc = reinterpret_cast<const int8_t*>(s.b + 192);
    lo = sc[8 * c + 2 * g];
    hi = sc[8 * c + 2 * g + 1];
  }
  ADAKV_TARGET_AVX2 static __m256i scales16(const State& s, int sub) {
    const int c = sub / 4, g = sub % 4;
    const int8_t* sc = reinterpret_cast<const int8_t*>(s.b + 192);
    return _mm256_set_m128i(_mm_set1_epi16(sc[8 * c + 2 * g + 1]),
                            _mm_set1_epi16(sc[8 * c + 2 * g]));
  }
};

// The factors of piece `sub`'s two 16-element halves as float weights: dw, times Q6_K's
// 16-element scales.
template <WeightFormat F>
ADAKV_TARGET_AVX2 void half_scales(const typename Fmt<F>::State& st, int sub, float dw, float& d0,
                                   float& d1) {
  d0 = d1 = dw;
  if constexpr (Fmt<F>::kScales16) {
    int lo, hi;
    Fmt<F>::scale_ints(st, sub, lo, hi);
    d0 = dw * static_cast<float>(lo);
    d1 = dw * static_cast<float>(hi);
  }
}

// 8 int32 partial dot products of a weight piece with 32 int8 activations (exact).
template <WeightFormat F>
ADAKV_TARGET_AVX2 __m256i dot_piece(__m256i q, __m256i x, __m256i s16) {
  __m256i p16;
  if constexpr (Fmt<F>::kUnsigned) {
    p16 = _mm256_maddubs_epi16(q, x);
  } else {
    p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(x, q));
  }
  return _mm256_madd_epi16(p16, s16);
}

// Weight rows [n0, n1) against activation rows [m, m + MR), NR weight rows at a time, then one:
// Tile::run<NR, MR>(job, wrows, m, out) computes out[i * MR + r] = weight row i . activation
// row m + r.
template <class Tile, int NR, int MR>
ADAKV_TARGET_AVX2 void tile_rows(const Job& job, size_t n0, size_t n1, size_t m) {
  float out[NR * MR];
  size_t n = n0;
  for (; n + NR <= n1; n += NR) {
    const uint8_t* wrows[NR];
    for (int i = 0; i < NR; ++i) wrows[i] = job.w + (n + static_cast<size_t>(i)) * job.row_bytes;
    Tile::template run<NR, MR>(job, wrows, m, out);
    for (int i = 0; i < NR; ++i) {
      for (int r = 0; r < MR; ++r) store(job, m + static_cast<size_t>(r), n + i, out[i * MR + r]);
    }
  }
  for (; n < n1; ++n) {
    const uint8_t* row = job.w + n * job.row_bytes;
    Tile::template run<1, MR>(job, &row, m, out);
    for (int r = 0; r < MR; ++r) store(job, m + static_cast<size_t>(r), n, out[r]);
  }
}

// Groups of 8 weight rows stay in L1 while the activation rows [m0, m1) pass in tiles of 1 x 8,
// 2 x 4, 4 x 2 and 8 x 1 (weight rows x activation rows: at most 8 accumulators each).
template <class Tile>
ADAKV_TARGET_AVX2 void grouped_rows(const Job& job, size_t n0, size_t n1, size_t m0, size_t m1) {
  constexpr size_t kGroup = 8;
  for (size_t g0 = n0; g0 < n1; g0 += kGroup) {
    const size_t g1 = g0 + kGroup < n1 ? g0 + kGroup : n1;
    size_t m = m0;
    for (; m + 8 <= m1; m += 8) tile_rows<Tile, 1, 8>(job, g0, g1, m);
    for (; m + 4 <= m1; m += 4) tile_rows<Tile, 2, 4>(job, g0, g1, m);
    for (; m + 2 <= m1; m += 2) tile_rows<Tile, 4, 2>(job, g0, g1, m);
    for (; m < m1; ++m) tile_rows<Tile, 8, 1>(job, g0, g1, m);
  }
}

ADAKV_TARGET_AVX2 float hsum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

}  // namespace adakv::kernels::quant_detail::simd

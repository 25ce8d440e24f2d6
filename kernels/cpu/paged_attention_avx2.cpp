// attention_paged, AVX2 + FMA + F16C level (strategy: paged_attention.cpp). K and V are read in
// their stored dtype straight into registers, never copied out as float32:
//  - f32: loaded as is;
//  - bf16: the 16-bit code widened to 32 bits and shifted up 16 (bf16 is float's top half);
//  - E4M3: the byte moved under an IEEE half's sign/exponent/mantissa fields, which makes a
//    half worth exactly code / 256 (normals and subnormals alike: the half exponent bias is 8
//    more than E4M3's), then F16C widens it. The factor 256 and the row's scale are applied per
//    token to the scores and the softmax weights, not per element. A block holding the NaN
//    code (which the half would read as a finite number) goes through kv_block_read instead.
// Per block, all query rows of the chunk that see it are done together, so each block is read
// from memory once: scores are register tiles of 3 rows x 4 tokens (dot products along
// head_dim, reduced across lanes by hadd), the online softmax is vectorised over the block's
// tokens (the exp of vec_exp.h in intrinsics), and P x V runs in tiles of 4 rows x 16 dims whose
// accumulators stay in registers over the block's tokens.
// Every function here is compiled for that target by attribute and only called after CPUID
// says the CPU has it.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "kernels/cpu/paged_attention_impl.h"

#define ADAKV_AVX2_FN __attribute__((target("avx2,fma,f16c")))
#define ADAKV_AVX2_INLINE __attribute__((target("avx2,fma,f16c"), always_inline)) inline

namespace adakv::kernels::paged_detail {
namespace {

constexpr size_t kScoreRows = 3;    // query rows of a score tile
constexpr size_t kScoreTokens = 4;  // tokens of a score tile: 12 accumulators
constexpr size_t kValueRows = 4;    // query rows of a P x V tile (x 2 vectors: 8 accumulators)
// Blocks requested ahead of the one computed on: enough loads in flight to cover the memory
// latency of scattered blocks. The first ones of a chunk are requested at once, each later one
// spread over the tiles of the block kPrefetchBlocks before it (Prefetch).
constexpr size_t kPrefetchBlocks = 2;
// An E4M3 code read as a half is the code's value / 256 (see the top of the file).
constexpr float kE4M3HalfFactor = 256.0f;

// Eight consecutive elements d..d+7 of a stored K or V row, as float32 (E4M3: / 256).
template <KvDtype D>
ADAKV_AVX2_INLINE __m256 load8(const uint8_t* row, size_t d) {
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

ADAKV_AVX2_INLINE float hsum(__m256 x) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

ADAKV_AVX2_INLINE float hmax(__m256 x) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// The lane sums of four vectors, as one 4-float vector (sum of a0, ..., sum of a3).
ADAKV_AVX2_INLINE __m128 hsum4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
  const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

// e^x, the polynomial of vec_exp.h (inputs clamped to [-87, 88], relative error < 3e-7). The
// clamp keeps a NaN (max/min return their second operand when either is NaN).
ADAKV_AVX2_INLINE __m256 exp8(__m256 x) {
  x = _mm256_min_ps(_mm256_set1_ps(88.0f), _mm256_max_ps(_mm256_set1_ps(-87.0f), x));
  const __m256 kf = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(kf, _mm256_set1_ps(0.693145751953125f), x);
  r = _mm256_fnmadd_ps(kf, _mm256_set1_ps(1.428606765330187045e-06f), r);
  __m256 p = _mm256_set1_ps(1.0f / 720.0f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(kf), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

// One block as the tiles see it: token t of K starts at k + t * row_bytes (V likewise).
struct BlockView {
  const uint8_t* k;
  const uint8_t* v;
  size_t row_bytes;
};

// s[r][j] = q[r] . k[t0 + j] for r < NR, j < NT. q: NR rows of dim floats (contiguous),
// s: row stride s_stride. NR * NT accumulators, each k vector loaded once for all rows.
template <KvDtype D, size_t NR, size_t NT>
ADAKV_AVX2_INLINE void score_tile(const float* q, size_t dim, const uint8_t* k, size_t row_bytes,
                                  float* s, size_t s_stride) {
  __m256 acc[NR][NT];
  for (size_t r = 0; r < NR; ++r) {
    for (size_t j = 0; j < NT; ++j) acc[r][j] = _mm256_setzero_ps();
  }
  for (size_t d = 0; d < dim; d += 8) {
    for (size_t j = 0; j < NT; ++j) {
      const __m256 kv = load8<D>(k + j * row_bytes, d);
      for (size_t r = 0; r < NR; ++r) {
        acc[r][j] = _mm256_fmadd_ps(_mm256_loadu_ps(q + r * dim + d), kv, acc[r][j]);
      }
    }
  }
  for (size_t r = 0; r < NR; ++r) {
    if constexpr (NT == 4) {
      _mm_storeu_ps(s + r * s_stride, hsum4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]));
    } else {
      for (size_t j = 0; j < NT; ++j) s[r * s_stride + j] = hsum(acc[r][j]);
    }
  }
}

// Scores of NR rows over the n tokens of a block: whole tiles of 4 tokens, then single ones.
template <KvDtype D, size_t NR>
ADAKV_AVX2_INLINE void score_rows(const float* q, size_t dim, const BlockView& b, size_t n,
                                  float* s, size_t s_stride, Prefetch& pf) {
  size_t t = 0;
  for (; t + kScoreTokens <= n; t += kScoreTokens) {
    pf.some();
    score_tile<D, NR, kScoreTokens>(q, dim, b.k + t * b.row_bytes, b.row_bytes, s + t, s_stride);
  }
  for (; t < n; ++t)
    score_tile<D, NR, 1>(q, dim, b.k + t * b.row_bytes, b.row_bytes, s + t, s_stride);
}

// acc[r][d0 + x] = acc[r][d0 + x] * corr[r] + sum_{t < n} p[r][t] * v[t][d0 + x] for r < NR and
// x < 8 * NV. The NR * NV accumulators stay in registers over the tokens.
template <KvDtype D, size_t NR, size_t NV>
ADAKV_AVX2_INLINE void value_tile(float* acc, size_t acc_stride, const float* corr, const float* p,
                                  size_t p_stride, const uint8_t* v, size_t row_bytes, size_t n,
                                  size_t d0) {
  __m256 a[NR][NV];
  for (size_t r = 0; r < NR; ++r) {
    const __m256 c = _mm256_set1_ps(corr[r]);
    for (size_t x = 0; x < NV; ++x) {
      a[r][x] = _mm256_mul_ps(_mm256_loadu_ps(acc + r * acc_stride + d0 + 8 * x), c);
    }
  }
  for (size_t t = 0; t < n; ++t) {
    __m256 vv[NV];
    for (size_t x = 0; x < NV; ++x) vv[x] = load8<D>(v + t * row_bytes, d0 + 8 * x);
    for (size_t r = 0; r < NR; ++r) {
      const __m256 pr = _mm256_broadcast_ss(p + r * p_stride + t);
      for (size_t x = 0; x < NV; ++x) a[r][x] = _mm256_fmadd_ps(pr, vv[x], a[r][x]);
    }
  }
  for (size_t r = 0; r < NR; ++r) {
    for (size_t x = 0; x < NV; ++x) _mm256_storeu_ps(acc + r * acc_stride + d0 + 8 * x, a[r][x]);
  }
}

template <KvDtype D, size_t NR>
ADAKV_AVX2_INLINE void value_rows(float* acc, size_t acc_stride, const float* corr, const float* p,
                                  size_t p_stride, const BlockView& b, size_t n, size_t dim,
                                  Prefetch& pf) {
  size_t d0 = 0;
  for (; d0 + 16 <= dim; d0 += 16) {
    pf.some();
    value_tile<D, NR, 2>(acc, acc_stride, corr, p, p_stride, b.v, b.row_bytes, n, d0);
  }
  if (d0 < dim) value_tile<D, NR, 1>(acc, acc_stride, corr, p, p_stride, b.v, b.row_bytes, n, d0);
}

// The online-softmax step of one row over a block (n_pad = the block's tokens rounded up to 8):
// scores at or past `visible` are masked; on return s holds the weights exp(s - m) (0 where
// masked), times vfactor[t] when given; m and l are updated and the factor that rescales the
// row's accumulator is returned. kfactor, when given, multiplies the raw scores first.
ADAKV_AVX2_FN float softmax_row(float* s, size_t n_pad, size_t visible, const float* kfactor,
                                const float* vfactor, float& m, float& l) {
  const __m256 neg_inf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i vis = _mm256_set1_epi32(static_cast<int32_t>(visible));
  __m256 vmax = neg_inf;
  for (size_t t = 0; t < n_pad; t += 8) {
    const __m256 keep = _mm256_castsi256_ps(
        _mm256_cmpgt_epi32(vis, _mm256_add_epi32(lane, _mm256_set1_epi32(int32_t(t)))));
    __m256 x = _mm256_loadu_ps(s + t);
    if (kfactor) x = _mm256_mul_ps(x, _mm256_loadu_ps(kfactor + t));
    x = _mm256_blendv_ps(neg_inf, x, keep);
    _mm256_storeu_ps(s + t, x);
    vmax = _mm256_max_ps(vmax, x);
  }
  const float block_max = hmax(vmax);
  float correction = 1.0f;
  if (block_max > m) {
    correction = std::exp(m - block_max);  // 0 while the state is empty
    l *= correction;
    m = block_max;
  }
  const __m256 vm = _mm256_set1_ps(m);
  __m256 sum = _mm256_setzero_ps();
  for (size_t t = 0; t < n_pad; t += 8) {
    const __m256 x = _mm256_loadu_ps(s + t);
    // Masked scores are -inf: their exp is clamped to ~1e-38, zeroed here (a NaN score stays).
    __m256 e = _mm256_and_ps(exp8(_mm256_sub_ps(x, vm)), _mm256_cmp_ps(x, neg_inf, _CMP_NEQ_UQ));
    sum = _mm256_add_ps(sum, e);
    if (vfactor) e = _mm256_mul_ps(e, _mm256_loadu_ps(vfactor + t));
    _mm256_storeu_ps(s + t, e);
  }
  l += hsum(sum);
  return correction;
}

// Whether any of the first n codes is an E4M3 NaN (0x7F or 0xFF): exactly the codes for which
// c | 0x80 is 0xFF, so a running byte-wise maximum of c | 0x80 reaches 0xFF iff one is there.
ADAKV_AVX2_FN bool has_e4m3_nan(const uint8_t* codes, size_t n) {
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

// Everything one chunk needs about its sequence and head.
struct ChunkContext {
  size_t dim, length, nq, group, rows;
  size_t n_pad;    // block tokens rounded up to 8: the score rows' stride
  float* states;   // [rows][state_floats]
  const float* q;  // [rows][dim], scaled
  float* scores;   // [rows][n_pad]
  float* corr;     // [rows]
};

// Folds one block (n_rows tokens, the first at token index `first`) into the rows' states.
// kfactor / vfactor: per-token score and weight factors (E4M3), or null.
template <KvDtype D>
ADAKV_AVX2_FN void attend_block(const ChunkContext& cx, const BlockView& b, size_t first,
                                size_t n_rows, const float* kfactor, const float* vfactor,
                                Prefetch& pf) {
  // Query i sees tokens [0, length - nq + i + 1): the rows that see this block are those of
  // queries i >= i0.
  const size_t i0 = first + cx.nq > cx.length ? first + cx.nq - cx.length : 0;
  const size_t r0 = i0 * cx.group;
  const size_t sf = state_floats(cx.dim);
  for (size_t r = r0; r < cx.rows;) {
    const size_t nr = std::min(kScoreRows, cx.rows - r);
    const float* q = cx.q + r * cx.dim;
    float* s = cx.scores + r * cx.n_pad;
    if (nr == 3) {
      score_rows<D, 3>(q, cx.dim, b, n_rows, s, cx.n_pad, pf);
    } else if (nr == 2) {
      score_rows<D, 2>(q, cx.dim, b, n_rows, s, cx.n_pad, pf);
    } else {
      score_rows<D, 1>(q, cx.dim, b, n_rows, s, cx.n_pad, pf);
    }
    r += nr;
  }
  // Keys of this block that row r sees.
  const auto visible = [&](size_t r) {
    return std::min(n_rows, cx.length - cx.nq + r / cx.group + 1 - first);
  };
  for (size_t r = r0; r < cx.rows; ++r) {
    float* st = cx.states + r * sf;
    cx.corr[r] =
        softmax_row(cx.scores + r * cx.n_pad, cx.n_pad, visible(r), kfactor, vfactor, st[0], st[1]);
  }
  // A P x V pass takes rows that see the same keys, so that no row multiplies a value it must
  // not see (by a weight of 0, which would still turn an Inf or NaN there into NaN). Rows differ
  // only in the last block of a multi-query chunk.
  for (size_t r = r0; r < cx.rows;) {
    const size_t n = visible(r);
    size_t nr = 1;
    while (nr < kValueRows && r + nr < cx.rows && visible(r + nr) == n) ++nr;
    float* acc = cx.states + r * sf + 2;
    const float* corr = cx.corr + r;
    const float* p = cx.scores + r * cx.n_pad;
    switch (nr) {
      case 4:
        value_rows<D, 4>(acc, sf, corr, p, cx.n_pad, b, n, cx.dim, pf);
        break;
      case 3:
        value_rows<D, 3>(acc, sf, corr, p, cx.n_pad, b, n, cx.dim, pf);
        break;
      case 2:
        value_rows<D, 2>(acc, sf, corr, p, cx.n_pad, b, n, cx.dim, pf);
        break;
      default:
        value_rows<D, 1>(acc, sf, corr, p, cx.n_pad, b, n, cx.dim, pf);
        break;
    }
    r += nr;
  }
  pf.rest();
}

// Blocks are scattered over the pool, where the hardware prefetcher (which follows sequential
// addresses) cannot help: later blocks are requested while this one is computed on.
ADAKV_AVX2_INLINE void prefetch_block(const uint8_t* block, size_t bytes) {
  for (size_t i = 0; i < bytes; i += 64)
    _mm_prefetch(reinterpret_cast<const char*>(block + i), _MM_HINT_T0);
}

template <KvDtype D>
ADAKV_AVX2_FN void run_chunk_t(const Chunk& c, const PagedSequence& seq, const uint8_t* pool,
                               const KvBlockLayout& layout, size_t group, float scale,
                               float* states, ChunkScratch& buf) {
  const size_t bt = layout.block_tokens, dim = layout.head_dim;
  ChunkContext cx;
  cx.dim = dim;
  cx.length = seq.lengths[c.head];
  cx.nq = seq.n_queries;
  cx.group = group;
  cx.rows = cx.nq * group;
  cx.n_pad = (bt + 7) / 8 * 8;
  const size_t sf = state_floats(dim);

  buf.states.resize(cx.rows * sf);
  for (size_t r = 0; r < cx.rows; ++r) {
    float* st = buf.states.data() + r * sf;
    st[0] = -std::numeric_limits<float>::infinity();
    std::fill(st + 1, st + sf, 0.0f);
  }
  // The rows' queries, gathered and pre-multiplied by the score scale.
  buf.q.resize(cx.rows * dim);
  for (size_t i = 0; i < cx.nq; ++i) {
    for (size_t j = 0; j < group; ++j) {
      const float* src = seq.q + i * seq.q_stride + (c.head * group + j) * dim;
      float* dst = buf.q.data() + (i * group + j) * dim;
      for (size_t d = 0; d < dim; ++d) dst[d] = src[d] * scale;
    }
  }
  buf.scores.resize(cx.rows * cx.n_pad + cx.rows);
  cx.states = buf.states.data();
  cx.q = buf.q.data();
  cx.scores = buf.scores.data();
  cx.corr = buf.scores.data() + cx.rows * cx.n_pad;
  // E4M3: per-token factors (row scale * 256) for K and V, zero-padded to n_pad.
  float* kfactor = nullptr;
  float* vfactor = nullptr;
  if constexpr (D == KvDtype::kE4M3) {
    buf.scales.assign(2 * cx.n_pad, 0.0f);
    kfactor = buf.scales.data();
    vfactor = kfactor + cx.n_pad;
  }

  const size_t row_bytes = dim * layout.elem_bytes();
  const int32_t* ids = seq.block_ids[c.head];
  for (size_t b = c.block_begin; b < std::min(c.block_begin + kPrefetchBlocks, c.block_end); ++b)
    prefetch_block(pool + static_cast<size_t>(ids[b]) * layout.block_bytes(), layout.block_bytes());
  // Request points of a full block: its score tiles and its P x V passes, per tile of rows.
  const size_t points = (bt / kScoreTokens) * ((cx.rows + kScoreRows - 1) / kScoreRows) +
                        (dim / 16) * ((cx.rows + kValueRows - 1) / kValueRows);
  const size_t lines_per_point =
      (layout.block_bytes() / 64 + points - 1) / std::max<size_t>(1, points);
  for (size_t b = c.block_begin; b < c.block_end; ++b) {
    const size_t first = b * bt;
    const size_t n_rows = std::min(bt, cx.length - first);
    const uint8_t* block = pool + static_cast<size_t>(ids[b]) * layout.block_bytes();
    Prefetch pf;
    if (b + kPrefetchBlocks < c.block_end) {
      pf.next = pool + static_cast<size_t>(ids[b + kPrefetchBlocks]) * layout.block_bytes();
      pf.end = pf.next + layout.block_bytes();
      pf.lines = lines_per_point;
    }
    const BlockView view{block + layout.k_offset(), block + layout.v_offset(), row_bytes};
    if constexpr (D == KvDtype::kE4M3) {
      if (has_e4m3_nan(view.k, n_rows * dim) || has_e4m3_nan(view.v, n_rows * dim)) {
        buf.k.resize(bt * dim);
        buf.v.resize(bt * dim);
        kv_block_read(block, layout, 0, n_rows, buf.k.data(), buf.v.data());
        const BlockView f32{reinterpret_cast<const uint8_t*>(buf.k.data()),
                            reinterpret_cast<const uint8_t*>(buf.v.data()), dim * sizeof(float)};
        attend_block<KvDtype::kF32>(cx, f32, first, n_rows, nullptr, nullptr, pf);
        continue;
      }
      const uint8_t* scales = block + layout.scales_offset();
      std::memcpy(kfactor, scales, n_rows * sizeof(float));
      std::memcpy(vfactor, scales + bt * sizeof(float), n_rows * sizeof(float));
      for (size_t t = 0; t < n_rows; ++t) {
        kfactor[t] *= kE4M3HalfFactor;
        vfactor[t] *= kE4M3HalfFactor;
      }
    }
    attend_block<D>(cx, view, first, n_rows, kfactor, vfactor, pf);
  }
  std::copy(buf.states.begin(), buf.states.end(), states + c.state);
}

}  // namespace

void run_chunk_avx2(const Chunk& c, const PagedSequence& seq, const uint8_t* pool,
                    const KvBlockLayout& layout, size_t group, float scale, float* states,
                    ChunkScratch& scratch) {
  switch (layout.dtype) {
    case KvDtype::kF32:
      run_chunk_t<KvDtype::kF32>(c, seq, pool, layout, group, scale, states, scratch);
      break;
    case KvDtype::kBF16:
      run_chunk_t<KvDtype::kBF16>(c, seq, pool, layout, group, scale, states, scratch);
      break;
    case KvDtype::kE4M3:
      run_chunk_t<KvDtype::kE4M3>(c, seq, pool, layout, group, scale, states, scratch);
      break;
  }
}

}  // namespace adakv::kernels::paged_detail

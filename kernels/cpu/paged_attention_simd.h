// The chunk kernel of attention_paged on vector registers (strategy: paged_attention.cpp), one
// template over a vector trait V shared by paged_attention_avx2.cpp (8 floats) and
// paged_attention_avx512.cpp (16 floats). K and V are read in their stored dtype straight into
// registers by V::load_kv, never copied out as float32; an E4M3 code is read as code / 256, and
// the factor 256 and the row's scale are applied per token to the scores and the softmax
// weights, not per element. A block holding the E4M3 NaN code (which the half would read as a
// finite number) goes through kv_block_read instead.
// Per block, all query rows of the chunk that see it are done together, so each block is read
// from memory once: scores are register tiles of 3 rows x 4 tokens (dot products along
// head_dim, reduced across lanes by V::hsum4), the online softmax is vectorised over the block's
// tokens (the exp of vec_exp.h in intrinsics), and P x V runs in tiles of 4 rows x
// V::kValueVecs vectors whose accumulators stay in registers over the block's tokens.
//
// The including file defines ADAKV_PAGED_FN and ADAKV_PAGED_INLINE, the function attributes of
// its target, before including this header: every function here is compiled for that target
// (the same as V's functions, which it inlines) and only called after CPUID says the CPU has
// it. The unnamed namespace gives each including file its own copy.
//
// V provides, on its float vector type V::F (V::kLanes floats) and mask type V::Mask:
//   kLanes, kValueVecs (vectors per row of a P x V tile),
//   load_kv<D>(row, d): elements d .. d + kLanes - 1 of a stored K or V row (E4M3: / 256),
//   load, store, zero, set1, broadcast (from memory), add, sub, mul, min, max, fmadd, fnmadd,
//   round (to nearest), exp2i (2^k for an integral k), hsum, hmax, hsum4 (lane sums of four
//   vectors as one __m128), keep_below(visible, t) (lanes t + i < visible), select(keep, a, b)
//   (b where keep, else a), unless_neg_inf(x, e) (e where x != -inf, else 0), and
//   has_e4m3_nan(codes, n).
#pragma once

#if !defined(ADAKV_PAGED_FN) || !defined(ADAKV_PAGED_INLINE)
#error "define ADAKV_PAGED_FN and ADAKV_PAGED_INLINE (the target's attributes) first"
#endif

#include <xmmintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "kernels/cpu/paged_attention_impl.h"

namespace adakv::kernels::paged_detail {
namespace {

constexpr size_t kScoreRows = 3;    // query rows of a score tile
constexpr size_t kScoreTokens = 4;  // tokens of a score tile: 12 accumulators
constexpr size_t kValueRows = 4;    // query rows of a P x V tile
// Blocks requested ahead of the one computed on: enough loads in flight to cover the memory
// latency of scattered blocks. The first ones of a chunk are requested at once, each later one
// spread over the tiles of the block kPrefetchBlocks before it (Prefetch).
constexpr size_t kPrefetchBlocks = 2;
// An E4M3 code read as a half is the code's value / 256 (V::load_kv).
constexpr float kE4M3HalfFactor = 256.0f;

// e^x, the polynomial of vec_exp.h (inputs clamped to [-87, 88], relative error < 3e-7). The
// clamp keeps a NaN (max/min return their second operand when either is NaN).
template <class V>
ADAKV_PAGED_INLINE typename V::F vec_exp(typename V::F x) {
  x = V::min(V::set1(88.0f), V::max(V::set1(-87.0f), x));
  const typename V::F kf = V::round(V::mul(x, V::set1(1.44269504088896341f)));
  typename V::F r = V::fnmadd(kf, V::set1(0.693145751953125f), x);
  r = V::fnmadd(kf, V::set1(1.428606765330187045e-06f), r);
  typename V::F p = V::set1(1.0f / 720.0f);
  p = V::fmadd(p, r, V::set1(1.0f / 120.0f));
  p = V::fmadd(p, r, V::set1(1.0f / 24.0f));
  p = V::fmadd(p, r, V::set1(1.0f / 6.0f));
  p = V::fmadd(p, r, V::set1(0.5f));
  p = V::fmadd(p, r, V::set1(1.0f));
  p = V::fmadd(p, r, V::set1(1.0f));
  return V::mul(p, V::exp2i(kf));
}

// One block as the tiles see it: token t of K starts at k + t * row_bytes (V likewise).
struct BlockView {
  const uint8_t* k;
  const uint8_t* v;
  size_t row_bytes;
};

// s[r][j] = q[r] . k[t0 + j] for r < NR, j < NT. q: NR rows of dim floats (contiguous),
// s: row stride s_stride. NR * NT accumulators, each k vector loaded once for all rows.
template <class V, KvDtype D, size_t NR, size_t NT>
ADAKV_PAGED_INLINE void score_tile(const float* q, size_t dim, const uint8_t* k, size_t row_bytes,
                                   float* s, size_t s_stride) {
  typename V::F acc[NR][NT];
  for (size_t r = 0; r < NR; ++r) {
    for (size_t j = 0; j < NT; ++j) acc[r][j] = V::zero();
  }
  for (size_t d = 0; d < dim; d += V::kLanes) {
    for (size_t j = 0; j < NT; ++j) {
      const typename V::F kv = V::template load_kv<D>(k + j * row_bytes, d);
      for (size_t r = 0; r < NR; ++r) acc[r][j] = V::fmadd(V::load(q + r * dim + d), kv, acc[r][j]);
    }
  }
  for (size_t r = 0; r < NR; ++r) {
    if constexpr (NT == 4) {
      _mm_storeu_ps(s + r * s_stride, V::hsum4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]));
    } else {
      for (size_t j = 0; j < NT; ++j) s[r * s_stride + j] = V::hsum(acc[r][j]);
    }
  }
}

// Scores of NR rows over the n tokens of a block: whole tiles of 4 tokens, then single ones.
template <class V, KvDtype D, size_t NR>
ADAKV_PAGED_INLINE void score_rows(const float* q, size_t dim, const BlockView& b, size_t n,
                                   float* s, size_t s_stride, Prefetch& pf) {
  size_t t = 0;
  for (; t + kScoreTokens <= n; t += kScoreTokens) {
    pf.some();
    score_tile<V, D, NR, kScoreTokens>(q, dim, b.k + t * b.row_bytes, b.row_bytes, s + t, s_stride);
  }
  for (; t < n; ++t)
    score_tile<V, D, NR, 1>(q, dim, b.k + t * b.row_bytes, b.row_bytes, s + t, s_stride);
}

// acc[r][d0 + x] = acc[r][d0 + x] * corr[r] + sum_{t < n} p[r][t] * v[t][d0 + x] for r < NR and
// x < kLanes * NV. The NR * NV accumulators stay in registers over the tokens.
template <class V, KvDtype D, size_t NR, size_t NV>
ADAKV_PAGED_INLINE void value_tile(float* acc, size_t acc_stride, const float* corr, const float* p,
                                   size_t p_stride, const uint8_t* v, size_t row_bytes, size_t n,
                                   size_t d0) {
  typename V::F a[NR][NV];
  for (size_t r = 0; r < NR; ++r) {
    const typename V::F c = V::set1(corr[r]);
    for (size_t x = 0; x < NV; ++x) {
      a[r][x] = V::mul(V::load(acc + r * acc_stride + d0 + V::kLanes * x), c);
    }
  }
  for (size_t t = 0; t < n; ++t) {
    typename V::F vv[NV];
    for (size_t x = 0; x < NV; ++x)
      vv[x] = V::template load_kv<D>(v + t * row_bytes, d0 + V::kLanes * x);
    for (size_t r = 0; r < NR; ++r) {
      const typename V::F pr = V::broadcast(p + r * p_stride + t);
      for (size_t x = 0; x < NV; ++x) a[r][x] = V::fmadd(pr, vv[x], a[r][x]);
    }
  }
  for (size_t r = 0; r < NR; ++r) {
    for (size_t x = 0; x < NV; ++x) V::store(acc + r * acc_stride + d0 + V::kLanes * x, a[r][x]);
  }
}

// P x V of NR rows over all dims: tiles of kValueVecs vectors, then one of the vectors left
// (head_dim is a multiple of kLanes).
template <class V, KvDtype D, size_t NR>
ADAKV_PAGED_INLINE void value_rows(float* acc, size_t acc_stride, const float* corr, const float* p,
                                   size_t p_stride, const BlockView& b, size_t n, size_t dim,
                                   Prefetch& pf) {
  constexpr size_t kTile = V::kValueVecs * V::kLanes;
  size_t d0 = 0;
  for (; d0 + kTile <= dim; d0 += kTile) {
    pf.some();
    value_tile<V, D, NR, V::kValueVecs>(acc, acc_stride, corr, p, p_stride, b.v, b.row_bytes, n,
                                        d0);
  }
  static_assert(V::kValueVecs == 2 || V::kValueVecs == 4);
  if constexpr (V::kValueVecs == 2) {
    // At most one vector is left.
    if (d0 < dim)
      value_tile<V, D, NR, 1>(acc, acc_stride, corr, p, p_stride, b.v, b.row_bytes, n, d0);
  } else {
    switch ((dim - d0) / V::kLanes) {
      case 3:
        value_tile<V, D, NR, 3>(acc, acc_stride, corr, p, p_stride, b.v, b.row_bytes, n, d0);
        break;
      case 2:
        value_tile<V, D, NR, 2>(acc, acc_stride, corr, p, p_stride, b.v, b.row_bytes, n, d0);
        break;
      case 1:
        value_tile<V, D, NR, 1>(acc, acc_stride, corr, p, p_stride, b.v, b.row_bytes, n, d0);
        break;
      default:
        break;
    }
  }
}

// The online-softmax step of one row over a block (n_pad = the block's tokens rounded up to
// kLanes): scores at or past `visible` are masked; on return s holds the weights exp(s - m) (0
// where masked), times vfactor[t] when given; m and l are updated and the factor that rescales
// the row's accumulator is returned. kfactor, when given, multiplies the raw scores first.
template <class V>
ADAKV_PAGED_FN float softmax_row(float* s, size_t n_pad, size_t visible, const float* kfactor,
                                 const float* vfactor, float& m, float& l) {
  const typename V::F neg_inf = V::set1(-std::numeric_limits<float>::infinity());
  typename V::F vmax = neg_inf;
  for (size_t t = 0; t < n_pad; t += V::kLanes) {
    const typename V::Mask keep = V::keep_below(visible, t);
    typename V::F x = V::load(s + t);
    if (kfactor) x = V::mul(x, V::load(kfactor + t));
    x = V::select(keep, neg_inf, x);
    V::store(s + t, x);
    vmax = V::max(vmax, x);
  }
  const float block_max = V::hmax(vmax);
  float correction = 1.0f;
  if (block_max > m) {
    correction = std::exp(m - block_max);  // 0 while the state is empty
    l *= correction;
    m = block_max;
  }
  const typename V::F vm = V::set1(m);
  typename V::F sum = V::zero();
  for (size_t t = 0; t < n_pad; t += V::kLanes) {
    const typename V::F x = V::load(s + t);
    // Masked scores are -inf: their exp is clamped to ~1e-38, zeroed here (a NaN score stays).
    typename V::F e = V::unless_neg_inf(x, vec_exp<V>(V::sub(x, vm)));
    sum = V::add(sum, e);
    if (vfactor) e = V::mul(e, V::load(vfactor + t));
    V::store(s + t, e);
  }
  l += V::hsum(sum);
  return correction;
}

// Everything one chunk needs about its sequence and head.
struct ChunkContext {
  size_t dim, length, nq, group, rows;
  size_t n_pad;    // block tokens rounded up to kLanes: the score rows' stride
  float* states;   // [rows][state_floats]
  const float* q;  // [rows][dim], scaled
  float* scores;   // [rows][n_pad]
  float* corr;     // [rows]
};

// Folds one block (n_rows tokens, the first at token index `first`) into the rows' states.
// kfactor / vfactor: per-token score and weight factors (E4M3), or null.
template <class V, KvDtype D>
ADAKV_PAGED_FN void attend_block(const ChunkContext& cx, const BlockView& b, size_t first,
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
      score_rows<V, D, 3>(q, cx.dim, b, n_rows, s, cx.n_pad, pf);
    } else if (nr == 2) {
      score_rows<V, D, 2>(q, cx.dim, b, n_rows, s, cx.n_pad, pf);
    } else {
      score_rows<V, D, 1>(q, cx.dim, b, n_rows, s, cx.n_pad, pf);
    }
    r += nr;
  }
  // Keys of this block that row r sees.
  const auto visible = [&](size_t r) {
    return std::min(n_rows, cx.length - cx.nq + r / cx.group + 1 - first);
  };
  for (size_t r = r0; r < cx.rows; ++r) {
    float* st = cx.states + r * sf;
    cx.corr[r] = softmax_row<V>(cx.scores + r * cx.n_pad, cx.n_pad, visible(r), kfactor, vfactor,
                                st[0], st[1]);
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
        value_rows<V, D, 4>(acc, sf, corr, p, cx.n_pad, b, n, cx.dim, pf);
        break;
      case 3:
        value_rows<V, D, 3>(acc, sf, corr, p, cx.n_pad, b, n, cx.dim, pf);
        break;
      case 2:
        value_rows<V, D, 2>(acc, sf, corr, p, cx.n_pad, b, n, cx.dim, pf);
        break;
      default:
        value_rows<V, D, 1>(acc, sf, corr, p, cx.n_pad, b, n, cx.dim, pf);
        break;
    }
    r += nr;
  }
  pf.rest();
}

// Blocks are scattered over the pool, where the hardware prefetcher (which follows sequential
// addresses) cannot help: later blocks are requested while this one is computed on.
ADAKV_PAGED_INLINE void prefetch_block(const uint8_t* block, size_t bytes) {
  for (size_t i = 0; i < bytes; i += 64)
    _mm_prefetch(reinterpret_cast<const char*>(block + i), _MM_HINT_T0);
}

template <class V, KvDtype D>
ADAKV_PAGED_FN void run_chunk_t(const Chunk& c, const PagedSequence& seq, const uint8_t* pool,
                                const KvBlockLayout& layout, size_t group, float scale,
                                float* states, ChunkScratch& buf) {
  const size_t bt = layout.block_tokens, dim = layout.head_dim;
  ChunkContext cx;
  cx.dim = dim;
  cx.length = seq.lengths[c.head];
  cx.nq = seq.n_queries;
  cx.group = group;
  cx.rows = cx.nq * group;
  cx.n_pad = (bt + V::kLanes - 1) / V::kLanes * V::kLanes;
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
  const size_t points =
      (bt / kScoreTokens) * ((cx.rows + kScoreRows - 1) / kScoreRows) +
      (dim / (V::kValueVecs * V::kLanes)) * ((cx.rows + kValueRows - 1) / kValueRows);
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
      if (V::has_e4m3_nan(view.k, n_rows * dim) || V::has_e4m3_nan(view.v, n_rows * dim)) {
        buf.k.resize(bt * dim);
        buf.v.resize(bt * dim);
        kv_block_read(block, layout, 0, n_rows, buf.k.data(), buf.v.data());
        const BlockView f32{reinterpret_cast<const uint8_t*>(buf.k.data()),
                            reinterpret_cast<const uint8_t*>(buf.v.data()), dim * sizeof(float)};
        attend_block<V, KvDtype::kF32>(cx, f32, first, n_rows, nullptr, nullptr, pf);
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
    attend_block<V, D>(cx, view, first, n_rows, kfactor, vfactor, pf);
  }
  std::copy(buf.states.begin(), buf.states.end(), states + c.state);
}

// The chunk kernel for the layout's dtype.
template <class V>
void run_chunk_simd(const Chunk& c, const PagedSequence& seq, const uint8_t* pool,
                    const KvBlockLayout& layout, size_t group, float scale, float* states,
                    ChunkScratch& scratch) {
  switch (layout.dtype) {
    case KvDtype::kF32:
      run_chunk_t<V, KvDtype::kF32>(c, seq, pool, layout, group, scale, states, scratch);
      break;
    case KvDtype::kBF16:
      run_chunk_t<V, KvDtype::kBF16>(c, seq, pool, layout, group, scale, states, scratch);
      break;
    case KvDtype::kE4M3:
      run_chunk_t<V, KvDtype::kE4M3>(c, seq, pool, layout, group, scale, states, scratch);
      break;
  }
}

}  // namespace
}  // namespace adakv::kernels::paged_detail

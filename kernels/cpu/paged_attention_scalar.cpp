// attention_paged, portable level (strategy: paged_attention.cpp): each block is decoded to
// float32 with kv_block_read (f32 blocks are read in place) and every query row runs the
// online softmax over it with plain loops that the compiler vectorises for its target.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/cpu/paged_attention_impl.h"

namespace adakv::kernels::paged_detail {
namespace {

// scores[t] = q . k[t] * scale for n keys. Each dot accumulates 16 lanes (independent FMA
// chains once vectorised) and folds them with a short tree: GCC's epilogue for an
// `omp simd reduction` spills the vector and adds its lanes one by one, which cost more
// than the products themselves at head_dim 64.
void block_scores(const float* q, const float* k, size_t n, size_t dim, float scale,
                  float* scores) {
  constexpr size_t kLanes = 16;
  for (size_t t = 0; t < n; ++t) {
    const float* kt = k + t * dim;
    float lanes[kLanes] = {};
    size_t d0 = 0;
    for (; d0 + kLanes <= dim; d0 += kLanes) {
#pragma omp simd
      for (size_t i = 0; i < kLanes; ++i) lanes[i] += q[d0 + i] * kt[d0 + i];
    }
    float tail = 0;
    for (; d0 < dim; ++d0) tail += q[d0] * kt[d0];
#pragma omp simd
    for (size_t i = 0; i < 8; ++i) lanes[i] += lanes[i + 8];
#pragma omp simd
    for (size_t i = 0; i < 4; ++i) lanes[i] += lanes[i + 4];
    scores[t] = (tail + (lanes[0] + lanes[2]) + (lanes[1] + lanes[3])) * scale;
  }
}

// acc[d] += sum_t p[t] * v[t][d]. The accumulator is held in a fixed-size local array
// across the token loop (registers once vectorised: several independent FMA chains), instead
// of a load-FMA-store of acc per token whose store-to-load latency would chain the tokens.
void accumulate_values(float* acc, const float* p, const float* v, size_t n, size_t dim) {
  constexpr size_t kLanes = 64;
  size_t d0 = 0;
  for (; d0 + kLanes <= dim; d0 += kLanes) {
    float a[kLanes];
#pragma omp simd
    for (size_t i = 0; i < kLanes; ++i) a[i] = acc[d0 + i];
    for (size_t t = 0; t < n; ++t) {
      const float pt = p[t];
      const float* vt = v + t * dim + d0;
#pragma omp simd
      for (size_t i = 0; i < kLanes; ++i) a[i] += pt * vt[i];
    }
#pragma omp simd
    for (size_t i = 0; i < kLanes; ++i) acc[d0 + i] = a[i];
  }
  for (size_t t = 0; t < n; ++t) {
    const float pt = p[t];
    const float* vt = v + t * dim;
#pragma omp simd
    for (size_t d = d0; d < dim; ++d) acc[d] += pt * vt[d];
  }
}

// Folds one block's visible keys into one query row's state.
void attend_block(float* state, const float* q, const float* k, const float* v, size_t n_keys,
                  size_t dim, float scale, float* scores) {
  float& m = state[0];
  float& l = state[1];
  float* acc = state + 2;
  block_scores(q, k, n_keys, dim, scale, scores);
  const float block_max = *std::max_element(scores, scores + n_keys);
  if (block_max > m) {
    const float correction = std::exp(m - block_max);  // 0 while the state is empty
    l *= correction;
#pragma omp simd
    for (size_t d = 0; d < dim; ++d) acc[d] *= correction;
    m = block_max;
  }
  for (size_t t = 0; t < n_keys; ++t) {
    scores[t] = std::exp(scores[t] - m);
    l += scores[t];
  }
  accumulate_values(acc, scores, v, n_keys, dim);
}

// Blocks of a head are scattered over the pool, so the hardware prefetcher, which follows
// sequential addresses, stalls at every block boundary: ask for the next block while the
// current one is being computed on.
void prefetch_block(const uint8_t* block, size_t bytes) {
  constexpr size_t kLine = 64;
  for (size_t i = 0; i < bytes; i += kLine) __builtin_prefetch(block + i);
}

}  // namespace

void run_chunk_scalar(const Chunk& c, const PagedSequence& seq, const uint8_t* pool,
                      const KvBlockLayout& layout, size_t group, float scale, float* states,
                      ChunkScratch& buf) {
  const size_t bt = layout.block_tokens, dim = layout.head_dim;
  const size_t length = seq.lengths[c.head];
  const size_t nq = seq.n_queries;
  const size_t rows = nq * group;
  // f32 blocks are read in place when the pool keeps floats aligned (it always does when it
  // comes from an allocator); otherwise they are copied like the other dtypes.
  const bool direct_f32 = layout.dtype == KvDtype::kF32 &&
                          reinterpret_cast<uintptr_t>(pool) % alignof(float) == 0 &&
                          layout.block_bytes() % alignof(float) == 0;
  buf.scores.resize(bt);
  if (!direct_f32) {
    buf.k.resize(bt * dim);
    buf.v.resize(bt * dim);
  }
  buf.states.resize(rows * state_floats(dim));
  float* chunk_states = buf.states.data();
  for (size_t r = 0; r < rows; ++r) {
    float* st = chunk_states + r * state_floats(dim);
    st[0] = -std::numeric_limits<float>::infinity();
    std::fill(st + 1, st + state_floats(dim), 0.0f);
  }

  const int32_t* ids = seq.block_ids[c.head];
  for (size_t b = c.block_begin; b < c.block_end; ++b) {
    const size_t first = b * bt;  // token index of the block's row 0
    const size_t n_rows = std::min(bt, length - first);
    const uint8_t* block = pool + static_cast<size_t>(ids[b]) * layout.block_bytes();
    if (b + 1 < c.block_end) {
      prefetch_block(pool + static_cast<size_t>(ids[b + 1]) * layout.block_bytes(),
                     layout.block_bytes());
    }
    const float* k;
    const float* v;
    if (direct_f32) {
      k = reinterpret_cast<const float*>(block + layout.k_offset());
      v = reinterpret_cast<const float*>(block + layout.v_offset());
    } else {
      kv_block_read(block, layout, 0, n_rows, buf.k.data(), buf.v.data());
      k = buf.k.data();
      v = buf.v.data();
    }
    for (size_t i = 0; i < nq; ++i) {
      const size_t visible = length - nq + i + 1;  // query i sees tokens [0, visible)
      if (visible <= first) continue;
      const size_t n_keys = std::min(n_rows, visible - first);
      for (size_t j = 0; j < group; ++j) {
        const size_t h = c.head * group + j;
        attend_block(chunk_states + (i * group + j) * state_floats(dim),
                     seq.q + i * seq.q_stride + h * dim, k, v, n_keys, dim, scale,
                     buf.scores.data());
      }
    }
  }
  std::copy(buf.states.begin(), buf.states.end(), states + c.state);
}

}  // namespace adakv::kernels::paged_detail

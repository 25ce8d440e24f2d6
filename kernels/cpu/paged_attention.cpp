// Decode attention over a head-paged KV cache whose heads have different lengths (Ada-KV).
//
// Work is split into chunks of consecutive blocks of one (sequence, KV head): each chunk runs
// the online-softmax recurrence for all the query rows that read that head (its GQA group
// times the sequence's new queries), so every K/V block is loaded from memory once per call.
// Long heads are split into several chunks (split-K, as in flash-decoding) so that one
// sequence with few KV heads still keeps every thread busy; a second pass merges the chunks'
// partial (max, sum, accumulator) states. The split depends only on each head's length, never
// on the thread count or on the other sequences of the batch, so a sequence's output is bit
// for bit the same however it is batched or threaded.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/ops.h"

namespace adakv::kernels {
namespace {

// Tokens per chunk: long enough that a chunk's fixed costs (state setup, merge) are noise,
// short enough that one 8k-token sequence with 3 KV heads yields ~50 chunks to balance.
constexpr size_t kChunkTokens = 512;

struct Chunk {
  size_t seq, head;               // sequence and KV head
  size_t block_begin, block_end;  // positions in that head's block table
  size_t state;                   // first row state of this chunk in the state array
};

// Online-softmax state of one query row: running max m, running sum l, accumulator acc[Dh].
// Stored as [m, l, acc...] in one float array.
size_t state_floats(size_t head_dim) {
  return head_dim + 2;
}

size_t rows_per_head(const PagedSequence& s, size_t group) {
  return s.n_queries * group;
}

size_t n_blocks(size_t length, size_t block_tokens) {
  return (length + block_tokens - 1) / block_tokens;
}

bool validate(const PagedSequence* seqs, size_t n_seqs, const uint8_t* pool,
              const KvBlockLayout& layout, size_t Hq, size_t Hkv) {
  if (Hkv == 0 || Hq % Hkv != 0 || layout.block_tokens == 0 || layout.head_dim == 0 ||
      layout.dtype > KvDtype::kE4M3) {
    return false;
  }
  if (n_seqs > 0 && (!seqs || !pool)) return false;
  for (size_t s = 0; s < n_seqs; ++s) {
    const PagedSequence& seq = seqs[s];
    if (!seq.block_ids || !seq.lengths || !seq.q || !seq.out || seq.n_queries == 0) return false;
    if (seq.n_queries > 1 &&
        (seq.q_stride < Hq * layout.head_dim || seq.out_stride < Hq * layout.head_dim)) {
      return false;
    }
    for (size_t g = 0; g < Hkv; ++g) {
      if (seq.lengths[g] < seq.n_queries || !seq.block_ids[g]) return false;
      const int32_t* ids = seq.block_ids[g];
      for (size_t b = 0; b < n_blocks(seq.lengths[g], layout.block_tokens); ++b) {
        if (ids[b] < 0) return false;
      }
    }
  }
  return true;
}

// Splits every (sequence, head) into chunks of kChunkTokens tokens (rounded up to blocks).
std::vector<Chunk> plan_chunks(const PagedSequence* seqs, size_t n_seqs, size_t Hkv, size_t group,
                               size_t block_tokens, size_t head_dim, size_t* n_states) {
  const size_t chunk_blocks = n_blocks(kChunkTokens, block_tokens);
  std::vector<Chunk> chunks;
  size_t state = 0;
  for (size_t s = 0; s < n_seqs; ++s) {
    const size_t rows = rows_per_head(seqs[s], group);
    for (size_t g = 0; g < Hkv; ++g) {
      const size_t nb = n_blocks(seqs[s].lengths[g], block_tokens);
      for (size_t b0 = 0; b0 < nb; b0 += chunk_blocks) {
        chunks.push_back({s, g, b0, std::min(nb, b0 + chunk_blocks), state});
        state += rows * state_floats(head_dim);
      }
    }
  }
  *n_states = state;
  return chunks;
}

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

struct ThreadBuffers {
  std::vector<float> k, v, scores;
  // The chunk's row states live here while it runs (hot in L1, and no false sharing with a
  // neighbouring chunk on another thread); they are copied out when the chunk is done.
  std::vector<float> states;
};

void run_chunk(const Chunk& c, const PagedSequence& seq, const uint8_t* pool,
               const KvBlockLayout& layout, size_t group, float scale, bool direct_f32,
               float* states, ThreadBuffers& buf) {
  const size_t bt = layout.block_tokens, dim = layout.head_dim;
  const size_t length = seq.lengths[c.head];
  const size_t nq = seq.n_queries;
  const size_t rows = nq * group;
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

// Merges the chunk states of one (sequence, head) row by row into the output.
void merge_states(const Chunk* chunks, size_t n_chunks, const PagedSequence& seq, size_t group,
                  size_t dim, const float* states) {
  const size_t nq = seq.n_queries;
  for (size_t i = 0; i < nq; ++i) {
    for (size_t j = 0; j < group; ++j) {
      const size_t r = i * group + j;
      float m = -std::numeric_limits<float>::infinity();
      for (size_t c = 0; c < n_chunks; ++c) {
        m = std::max(m, states[chunks[c].state + r * state_floats(dim)]);
      }
      float* out = seq.out + i * seq.out_stride + (chunks[0].head * group + j) * dim;
      std::fill(out, out + dim, 0.0f);
      float l = 0;
      for (size_t c = 0; c < n_chunks; ++c) {
        const float* st = states + chunks[c].state + r * state_floats(dim);
        if (st[1] == 0.0f) continue;  // the chunk lies past this query's causal limit
        const float w = std::exp(st[0] - m);
        l += st[1] * w;
#pragma omp simd
        for (size_t d = 0; d < dim; ++d) out[d] += st[2 + d] * w;
      }
      const float inv = 1.0f / l;
#pragma omp simd
      for (size_t d = 0; d < dim; ++d) out[d] *= inv;
    }
  }
}

}  // namespace

Status attention_paged(const PagedSequence* seqs, size_t n_seqs, const uint8_t* pool,
                       const KvBlockLayout& layout, size_t Hq, size_t Hkv, float scale, Stream) {
  if (!validate(seqs, n_seqs, pool, layout, Hq, Hkv)) return Status::kInvalidArgument;
  if (n_seqs == 0) return Status::kOk;
  const size_t group = Hq / Hkv;
  const size_t dim = layout.head_dim;

  size_t n_states = 0;
  const std::vector<Chunk> chunks =
      plan_chunks(seqs, n_seqs, Hkv, group, layout.block_tokens, dim, &n_states);
  std::vector<float> states(n_states);

  // f32 blocks are read in place when the pool keeps floats aligned (it always does when it
  // comes from an allocator); otherwise they are copied like the other dtypes.
  const bool direct_f32 = layout.dtype == KvDtype::kF32 &&
                          reinterpret_cast<uintptr_t>(pool) % alignof(float) == 0 &&
                          layout.block_bytes() % alignof(float) == 0;

#pragma omp parallel
  {
    ThreadBuffers buf;
    buf.scores.resize(layout.block_tokens);
    if (!direct_f32) {
      buf.k.resize(layout.block_tokens * dim);
      buf.v.resize(layout.block_tokens * dim);
    }
#pragma omp for schedule(dynamic, 1)
    for (size_t c = 0; c < chunks.size(); ++c) {
      run_chunk(chunks[c], seqs[chunks[c].seq], pool, layout, group, scale, direct_f32,
                states.data(), buf);
    }
  }

  // Chunks of one (sequence, head) are consecutive: merge each run.
  std::vector<size_t> runs;
  for (size_t c = 0; c < chunks.size(); ++c) {
    if (c == 0 || chunks[c].seq != chunks[c - 1].seq || chunks[c].head != chunks[c - 1].head) {
      runs.push_back(c);
    }
  }
  const size_t n_runs = runs.size();
  runs.push_back(chunks.size());
#pragma omp parallel for schedule(dynamic, 1) if (n_runs > 8)
  for (size_t r = 0; r < n_runs; ++r) {
    const Chunk* first = chunks.data() + runs[r];
    merge_states(first, runs[r + 1] - runs[r], seqs[first->seq], group, dim, states.data());
  }
  return Status::kOk;
}

}  // namespace adakv::kernels

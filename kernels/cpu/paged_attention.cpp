// Decode attention over a head-paged KV cache whose heads have different lengths (Ada-KV).
//
// Work is split into chunks of consecutive blocks of one (sequence, KV head): each chunk runs
// the online-softmax recurrence for all the query rows that read that head (its GQA group
// times the sequence's new queries), so every K/V block is loaded from memory once per call.
// Long heads are split into several chunks (split-K, as in flash-decoding) so that one
// sequence with few KV heads still keeps every thread busy; a second pass merges the chunks'
// partial (max, sum, accumulator) states.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/ops.h"

namespace adakv::kernels {
namespace {

constexpr size_t kMinChunkTokens = 256;  // below this a split costs more than it balances
constexpr size_t kChunksPerThread = 4;

struct Chunk {
  size_t seq, head;               // sequence and KV head
  size_t block_begin, block_end;  // positions in that head's block table
  size_t state;                   // first row state of this chunk in the state array
};

float dot(const float* a, const float* b, size_t n) {
  float s = 0;
#pragma omp simd reduction(+ : s)
  for (size_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

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
  if (Hkv == 0 || Hq % Hkv != 0 || layout.block_tokens == 0 || layout.head_dim == 0) {
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

// Splits every (sequence, head) into chunks of at least kMinChunkTokens tokens, aiming at
// kChunksPerThread chunks per thread over the whole batch.
std::vector<Chunk> plan_chunks(const PagedSequence* seqs, size_t n_seqs, size_t Hkv, size_t group,
                               size_t block_tokens, size_t head_dim, size_t* n_states) {
  size_t total_blocks = 0;
  for (size_t s = 0; s < n_seqs; ++s) {
    for (size_t g = 0; g < Hkv; ++g) total_blocks += n_blocks(seqs[s].lengths[g], block_tokens);
  }
  const size_t target = kChunksPerThread * static_cast<size_t>(std::max(1, omp_get_max_threads()));
  const size_t min_blocks = n_blocks(kMinChunkTokens, block_tokens);
  const size_t chunk_blocks = std::max(min_blocks, (total_blocks + target - 1) / target);

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

// Folds one block's visible keys into one query row's state.
void attend_block(float* state, const float* q, const float* k, const float* v, size_t n_keys,
                  size_t head_dim, float scale, float* scores) {
  float& m = state[0];
  float& l = state[1];
  float* acc = state + 2;
  float block_max = -std::numeric_limits<float>::infinity();
  for (size_t t = 0; t < n_keys; ++t) {
    scores[t] = dot(q, k + t * head_dim, head_dim) * scale;
    block_max = std::max(block_max, scores[t]);
  }
  if (block_max > m) {
    const float correction = std::exp(m - block_max);  // 0 while the state is empty
    l *= correction;
#pragma omp simd
    for (size_t d = 0; d < head_dim; ++d) acc[d] *= correction;
    m = block_max;
  }
  for (size_t t = 0; t < n_keys; ++t) {
    const float p = std::exp(scores[t] - m);
    l += p;
    const float* vt = v + t * head_dim;
#pragma omp simd
    for (size_t d = 0; d < head_dim; ++d) acc[d] += p * vt[d];
  }
}

struct ThreadBuffers {
  std::vector<float> k, v, scores;
};

void run_chunk(const Chunk& c, const PagedSequence& seq, const uint8_t* pool,
               const KvBlockLayout& layout, size_t group, float scale, bool direct_f32,
               float* states, ThreadBuffers& buf) {
  const size_t bt = layout.block_tokens, dim = layout.head_dim;
  const size_t length = seq.lengths[c.head];
  const size_t nq = seq.n_queries;
  const size_t rows = nq * group;
  float* chunk_states = states + c.state;
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

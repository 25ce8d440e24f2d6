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
//
// The chunk kernels are per dispatch level (kernels/quant.h): paged_attention_scalar.cpp
// (portable, blocks decoded to float32), paged_attention_avx2.cpp and
// paged_attention_avx512.cpp (K/V read in their stored dtype in registers); this file plans the
// chunks, runs them on threads and merges.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/paged_attention_impl.h"
#include "kernels/ops.h"
#include "kernels/quant.h"

namespace adakv::kernels {

using namespace paged_detail;

namespace {

// Tokens per chunk: long enough that a chunk's fixed costs (state setup, merge) are noise,
// short enough that one 8k-token sequence with 3 KV heads yields ~50 chunks to balance.
constexpr size_t kChunkTokens = 512;

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

  // The chunk kernel follows the dispatch level of kernels/quant.h; a head size that is not
  // whole vectors of a level takes the next level down (AVX-512, AVX2, portable).
  const QuantLevel level = quant_level();
  ChunkFn run_chunk = run_chunk_scalar;
  if (level == QuantLevel::kAvx512 && avx512_supports(layout)) {
    run_chunk = run_chunk_avx512;
  } else if (level != QuantLevel::kScalar && avx2_supports(layout)) {
    run_chunk = run_chunk_avx2;
  }

  // Chunks of one (sequence, head) are consecutive: each run is merged once all are done.
  std::vector<size_t> runs;
  for (size_t c = 0; c < chunks.size(); ++c) {
    if (c == 0 || chunks[c].seq != chunks[c - 1].seq || chunks[c].head != chunks[c - 1].head) {
      runs.push_back(c);
    }
  }
  const size_t n_runs = runs.size();
  runs.push_back(chunks.size());
#pragma omp parallel
  {
    ChunkScratch scratch;
#pragma omp for schedule(dynamic, 1)
    for (size_t c = 0; c < chunks.size(); ++c) {
      run_chunk(chunks[c], seqs[chunks[c].seq], pool, layout, group, scale, states.data(), scratch);
    }
#pragma omp for schedule(dynamic, 4)
    for (size_t r = 0; r < n_runs; ++r) {
      const Chunk* first = chunks.data() + runs[r];
      merge_states(first, runs[r + 1] - runs[r], seqs[first->seq], group, dim, states.data());
    }
  }
  return Status::kOk;
}

}  // namespace adakv::kernels

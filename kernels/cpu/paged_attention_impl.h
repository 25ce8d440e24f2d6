// Internals of attention_paged (paged_attention.cpp) shared with its per-level chunk kernels
// (paged_attention_scalar.cpp; paged_attention_simd.h, the AVX2 and AVX-512 ones).
#pragma once

#include <xmmintrin.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/ops.h"

namespace adakv::kernels::paged_detail {

// A run of consecutive blocks of one (sequence, KV head), processed by one thread.
struct Chunk {
  size_t seq, head;               // sequence and KV head
  size_t block_begin, block_end;  // positions in that head's block table
  size_t state;                   // first row state of this chunk in the state array
};

// A later block requested a few cache lines at a time between the tiles of the current one (the
// AVX2 and AVX-512 chunk kernels): a whole block's prefetches at once fill the core's miss
// buffers and stall the tiles behind them.
struct Prefetch {
  const uint8_t* next = nullptr;  // next line to request
  const uint8_t* end = nullptr;
  size_t lines = 0;  // lines per request point

  __attribute__((always_inline)) void some() {
    for (size_t i = 0; i < lines && next < end; ++i, next += 64)
      _mm_prefetch(reinterpret_cast<const char*>(next), _MM_HINT_T0);
  }
  __attribute__((always_inline)) void rest() {
    for (; next < end; next += 64) _mm_prefetch(reinterpret_cast<const char*>(next), _MM_HINT_T0);
  }
};

// Online-softmax state of one query row: running max m, running sum l (of exp(score - m)),
// accumulator acc[head_dim] (sum of exp(score - m) * value). Stored as [m, l, acc...].
inline size_t state_floats(size_t head_dim) {
  return head_dim + 2;
}

// Per-thread scratch of a chunk kernel, reused from chunk to chunk (each kernel sizes what it
// uses).
struct ChunkScratch {
  std::vector<float> states;  // the chunk's row states while it runs (hot, thread-private)
  std::vector<float> q;       // the chunk's query rows, contiguous
  std::vector<float> scores;  // [rows][block tokens, padded]
  std::vector<float> k, v;    // one block decoded to float32, where a kernel needs that
  std::vector<float> scales;  // per-token factors of one block
};

// Runs one chunk: folds the chunk's blocks into fresh states for every query row that reads
// the head (rows r = i * group + j: new query i, query head head * group + j), then copies the
// states to states + c.state. A row whose causal limit lies before the chunk keeps l = 0.
// The result depends only on the chunk and the sequence, never on the thread running it.
using ChunkFn = void (*)(const Chunk& c, const PagedSequence& seq, const uint8_t* pool,
                         const KvBlockLayout& layout, size_t group, float scale, float* states,
                         ChunkScratch& scratch);

// Portable level: blocks decoded to float32 by kv_block_read (f32 read in place), plain loops.
void run_chunk_scalar(const Chunk& c, const PagedSequence& seq, const uint8_t* pool,
                      const KvBlockLayout& layout, size_t group, float scale, float* states,
                      ChunkScratch& scratch);

// AVX2 + FMA + F16C level: reads f32, bf16 and E4M3 blocks in registers. Needs a head_dim that
// is a multiple of 8 and a CPU with those extensions.
inline bool avx2_supports(const KvBlockLayout& layout) {
  return layout.head_dim % 8 == 0;
}
void run_chunk_avx2(const Chunk& c, const PagedSequence& seq, const uint8_t* pool,
                    const KvBlockLayout& layout, size_t group, float scale, float* states,
                    ChunkScratch& scratch);

// AVX-512 (F + BW + VL) level: the AVX2 kernel on 16-float vectors. Needs a head_dim that is a
// multiple of 16 and a CPU with those extensions.
inline bool avx512_supports(const KvBlockLayout& layout) {
  return layout.head_dim % 16 == 0;
}
void run_chunk_avx512(const Chunk& c, const PagedSequence& seq, const uint8_t* pool,
                      const KvBlockLayout& layout, size_t group, float scale, float* states,
                      ChunkScratch& scratch);

}  // namespace adakv::kernels::paged_detail

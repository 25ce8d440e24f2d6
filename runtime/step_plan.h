// What every rank executes in one step of the serving loop. Rank 0's scheduler writes it and
// broadcasts it; each rank then frees, creates and compresses its own caches of the named
// sequences and runs ONE ragged forward over the entries, so all ranks stay in lock step.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "runtime/compression/config.h"
#include "runtime/compression/reconstruction.h"

namespace adakv::runtime {

// Worker-lifetime settings of the serving loop (the same on every rank).
struct ServingConfig {
  size_t kv_pool_blocks = 0;  // blocks of the pool (each rank's; for its own KV heads)
  size_t block_tokens = 16;
  kernels::KvDtype kv_dtype = kernels::KvDtype::kF32;
  size_t max_num_seqs = 64;              // sequences resident in the pool at once
  size_t max_num_batched_tokens = 2048;  // rows of one step's forward (a chunk may exceed it)
  // Prompts longer than this are prefilled in chunks of it (the last chunk holds the window);
  // the boundaries depend only on the prompt, so a recomputed prompt meets the same ones.
  size_t prefill_chunk = 512;
  // Full blocks of prompts that keep every token stay cached for later prompts with the same
  // beginning (runtime/prefix_cache.h), until the pool needs them.
  bool prefix_caching = true;
  // A request's compressed context (GenerateRequest::context_tokens) is reused by a later one
  // whose context starts with it and goes on for at most this many tokens more (appended
  // uncompressed); a longer context is compressed anew.
  size_t context_tail = 1024;
  // A context scored by reconstruction (CompressionConfig::context_scoring) is repeated after
  // itself in pieces of at most this many tokens, the cache rolled back between pieces: the
  // repeat holds that many more rows per KV head in the pool while it is scored. 0: as many as
  // fit the model's context (one piece, when the context is at most about half of it); else at
  // least compression::kMinRepeatPiece.
  size_t context_repeat_piece = compression::kDefaultRepeatPiece;
  // Throws std::invalid_argument naming the bad field.
  void validate() const;
};

// A sequence the ranks start caching.
struct SequenceStart {
  uint64_t id = 0;
  uint32_t prompt_tokens = 0;
  uint32_t lookahead = 0;  // look-ahead steps planned (0: compressed at the last prompt chunk)
  // A recording sequence keeps its whole prompt (taken in one entry) and every layer's window
  // scores, to be forked into several policies (SequenceFork); `compression` gives the scoring.
  bool record_scores = false;
  compression::CompressionConfig compression;
  // A context scored by a repeat in pieces (compression::RepeatPieces): text tokens per piece
  // and the context position of the text's first token (PagedKvCache::expect_repeat); 0: none.
  uint32_t repeat_piece = 0;
  uint32_t repeat_offset = 0;
};

// A new sequence holding what `compression` keeps of a recording sequence's prompt, as if the
// prompt had been prefilled under it (PagedKvCache::compressed_copy): one prefill, several
// policies. The source's prompt and look-ahead must be done.
// With `share`, the new sequence is another sample of the source's request instead: it holds
// what the source holds, referencing its full blocks (PagedKvCache::shared_copy), and
// `compression` is ignored. The source must be compressed with nothing appended yet.
struct SequenceFork {
  uint64_t id = 0;
  uint64_t source = 0;
  compression::CompressionConfig compression;
  bool share = false;
};

// A cached prompt span (runtime/prefix_cache.h) and a sequence: in prefix_attach, the sequence
// starts with the span as its span `index`; in prefix_insert, its span `index` becomes cached.
struct PrefixLink {
  uint64_t id = 0;
  uint64_t key = 0;
  uint64_t index = 0;
};

// One sequence's rows of the step's forward.
struct StepEntry {
  uint64_t id = 0;
  std::vector<int32_t> tokens;  // inputs, at the cache's next positions
  bool logits = false;          // rank 0 reads the logits of the last row
  // A known text scored after the prompt (teacher forcing): its rows take the prompt rows'
  // numerics, and rank 0 reads the logits of every row (with `logits`).
  bool scored_text = false;
  // Layers run (model::KvBatch::layer_begin): all, unless a prompt is prefilled layer by layer,
  // its whole prompt in each step, a range of layers at a time (the plan's last entry).
  uint32_t layer_begin = 0;
  uint32_t layer_end = UINT32_MAX;
};

struct StepPlan {
  std::vector<uint64_t> report;        // collective KV reports of these, first
  std::vector<uint64_t> release;       // caches freed (finished, aborted or preempted)
  std::vector<uint64_t> prefix_evict;  // cached spans forgotten, after the releases
  std::vector<SequenceStart> start;    // caches created
  // Cached spans each new cache starts with, in order (after the starts).
  std::vector<PrefixLink> prefix_attach;
  // Contexts scored by a repeat in pieces, at a piece's end: rewind_lookahead() before the
  // forward (the next piece is in this plan's entries).
  std::vector<uint64_t> rewind_lookahead;
  std::vector<uint64_t> end_lookahead;  // compress_after_lookahead() before the forward
  std::vector<SequenceFork> fork;       // forked after end_lookahead, before the forward
  // Recording sequences whose window scores every rank gathers, after the forks (collective).
  std::vector<uint64_t> gather_scores;
  std::vector<StepEntry> entries;  // one ragged forward (none: no forward)
  // Spans of the forward's prompts that become cached, once it ran.
  std::vector<PrefixLink> prefix_insert;

  bool empty() const {
    return report.empty() && release.empty() && prefix_evict.empty() && start.empty() &&
           prefix_attach.empty() && rewind_lookahead.empty() && end_lookahead.empty() &&
           fork.empty() && gather_scores.empty() && entries.empty() && prefix_insert.empty();
  }
  size_t tokens() const;
};

std::string encode_plan(const StepPlan& plan);
// Throws std::runtime_error on bytes that are not an encoded plan.
StepPlan decode_plan(const std::string& bytes);

}  // namespace adakv::runtime

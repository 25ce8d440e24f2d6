// One sequence's KV cache in the head-paged block pool, compressed with Ada-KV after prefill.
// This class stores rows and decides when to compress; which rows each head keeps is the
// policy's (compression::Compressor, which scores and selects through the HeadGroup).
//
// Table: [layer][kv head] -> block ids + length. Keys are stored after RoPE, so a kept token
// keeps its position; new tokens take position = prompt length + steps (next_position()).
//
// Prefill (the first append of a layer, n > 1 tokens) attends over the raw q/k/v with full
// causal attention, so compression never changes prefill outputs. Then, unless the policy is
// `full`:
//   scope layer:  score -> gain matrix -> (exchange) -> budgets -> write only the kept rows
//                 (the full-size K/V of a layer never lands in the pool);
//   scope global: write every row; after the last layer, one allocation across all layers and
//                 heads, then each head's kept rows move down in place and the freed blocks
//                 go back.
// A recording cache (record_scores) keeps every row and scores each layer for
// compressed_copy(). With look-ahead it scores later: it keeps the window's queries, then
// the queries of the tokens decoded after the prompt, and finish_lookahead() scores them all
// together and rolls the cache back to the prompt.
// Decode appends to each head's last block and attends with kernels::attention_paged.
//
// Memory: rows live in the pool's arena and reach it only through backend ops (kv_append over a
// slot mapping, kv_copy_rows for compaction and copies, kv_gather to read keys back for
// scoring). The block table lives twice: the host's (which block ids each head holds, decided
// here) and the pool's flat table in backend memory (BlockTables: this sequence's slot of
// [sequence][layer][kv head] block ids, lengths and row pointers), which attention reads; every
// change to a layer's heads is written there right after it (sync_layer).
//
// Chunked prefill (begin_prompt): the prompt arrives over several forwards. Chunks before the
// last keep every row (attention needs them); the last chunk's queries hold the window, so
// that chunk scores the layer over the keys in the blocks and compacts it in place. With
// look-ahead, scoring waits for compress_after_lookahead().
//
// Shapes (Hq, Hkv, Dh: the heads of the ModelConfig the cache was built with, one rank's share
// under tensor parallelism): queries [n][Hq][Dh] and keys/values [n][Hkv][Dh], both after RoPE
// and with the row strides given; outputs [n][Hq][Dh]. Positions are prompt token indices.
#pragma once

#include <algorithm>
#include <memory>
#include <vector>

#include "model/config.h"
#include "model/kv_cache.h"
#include "runtime/compression/compressor.h"
#include "runtime/compression/config.h"
#include "runtime/compression/head_group.h"
#include "runtime/compression/report.h"
#include "runtime/kv/block_pool.h"

namespace adakv::runtime {

// The tensor-parallel head group and the report live with the policy (runtime/compression);
// the names stay here for the engine and the tests.
using HeadGroup = compression::HeadGroup;
using CompressionReport = compression::CompressionReport;

class PagedKvCache : public model::KvCache {
 public:
  // With record_scores, prefill keeps every token (whatever the policy) and stores each layer's
  // window scores, so that compressed_copy() can serve several policies from one prefill.
  // `model` gives this cache's heads (a tensor-parallel rank's local config).
  PagedKvCache(BlockPool& pool, const model::ModelConfig& model,
               const compression::CompressionConfig& compression, HeadGroup group = {},
               bool record_scores = false);
  ~PagedKvCache() override;
  PagedKvCache(const PagedKvCache&) = delete;
  PagedKvCache& operator=(const PagedKvCache&) = delete;

  // Announces a prompt of n_prompt tokens that may arrive over several forwards (chunks; the
  // last one must hold at least the window). With defer_scoring, the window's queries and the
  // decoded tokens' are kept until compress_after_lookahead() scores and compacts. Call before
  // the first forward.
  void begin_prompt(size_t n_prompt, bool defer_scoring);
  // Prefix caching (runtime/prefix_cache.h): the pool block ids of the prompt's span `index`
  // (its tokens [index * block_tokens, (index + 1) * block_tokens)), for each layer this cache
  // holds, then each KV head. Requires the span in the blocks and never compacted (a cache that
  // keeps every prompt token).
  std::vector<int32_t> span_blocks(size_t index) const;
  // Starts the announced prompt (begin_prompt) with cached spans (span_blocks() of earlier
  // caches, in prompt order), referenced rather than computed: the prompt's next rows follow
  // them, as a later chunk. Call before the first forward.
  void attach_spans(const std::vector<const std::vector<int32_t>*>& spans);
  // Look-ahead done: scores every layer from the window's and the look-ahead tokens' queries,
  // rolls the cache back to the prompt, and compacts it in place under this cache's policy
  // (a recording cache keeps every row: finish_lookahead()).
  void compress_after_lookahead();

  size_t next_position() const override { return position_; }
  // True while the next rows are prompt rows (before the whole prompt is in).
  bool in_prompt() const { return position_ < std::max<size_t>(prompt_n_, 1); }
  void append_and_attend(size_t layer, const float* q, size_t q_stride, const float* k,
                         const float* v, size_t kv_stride, size_t n, float* out) override;
  void commit(size_t n) override { position_ += n; }

  // The parts of append_and_attend, for a ragged batch that runs one kv_append and one
  // attention_paged call per layer over many caches: stage() places the rows (allocating their
  // blocks and writing their slots into `slots`, host memory [n][Hkv] filled with -1 by the
  // caller; the rows a prefill evicts stay -1) and, unless it attended on its own (a whole prompt
  // or a first prompt chunk, on the raw K/V), fills `seq` (valid until this cache's next stage())
  // and returns true. The caller then stores the rows (kv_append over the slots), runs the
  // attention, and calls finish_layer(), which scores and compacts when the rows ended the
  // prompt.
  bool stage(size_t layer, const float* q, size_t q_stride, const float* k, const float* v,
             size_t kv_stride, size_t n, float* out, size_t out_stride, int32_t* slots,
             kernels::PagedSequence& seq);
  void finish_layer(size_t layer, const float* q, size_t q_stride, size_t n);
  // After the step's forward, on every rank (pipeline stages: a collective over the stages):
  // the scope-global allocation and compaction that the prompt's last layer of this stage left
  // for when every stage has scored its layers. No-op otherwise.
  void finish_step();

  // Tokens each [layer][model kv head] holds right after compression (the budget vector every
  // rank computed; the prompt length where nothing was evicted). Rank 0 accounts every rank's
  // blocks from it.
  std::vector<std::vector<size_t>> model_kept_tokens(size_t model_kv_heads) const;
  const BlockPool& pool() const { return pool_; }
  // The layer's [kv head] row pointers and lengths in the pool's table (backend memory), as
  // attention reads them; valid until any cache of the pool changes a table.
  const int32_t* const* table_rows(size_t layer) const {
    return pool_.tables().rows(table_slot_, layer);
  }
  const uint32_t* table_lengths(size_t layer) const {
    return pool_.tables().lengths(table_slot_, layer);
  }

  size_t head_length(size_t layer, size_t head) const { return heads_[layer][head].length; }
  size_t held_blocks() const;
  size_t held_bytes() const { return held_blocks() * pool_.block_bytes(); }
  // Bytes the same tokens take uncompressed in the same pool (block rounding included).
  size_t full_bytes() const;
  const CompressionReport& report() const { return report_; }
  const compression::CompressionConfig& config() const { return compressor_.config(); }

  // Window scores of each layer after a recording prefill (and finish_lookahead(), with
  // look-ahead): [layer] -> [kv head][prefix].
  const std::vector<std::vector<float>>& scores() const { return compressor_.scores(); }

  // True for a recording cache with look-ahead between its prefill and finish_lookahead():
  // the tokens decoded meanwhile are pseudo-queries whose queries join the scoring.
  bool awaiting_lookahead() const { return compressor_.awaiting_lookahead(); }
  // Scores every layer from the window's queries and the look-ahead tokens' (over the prompt
  // and those tokens' keys), then rolls the cache back to the prompt: the look-ahead rows go
  // and their blocks return to the pool. No-op unless awaiting_lookahead().
  void finish_lookahead();
  // Between two pieces of a context repeated for reconstruct scoring: scores the piece's
  // queries as finish_lookahead() does, rolls the cache back to the prompt, and keeps awaiting
  // the next piece (the window's queries stay observed). Throws std::logic_error unless
  // awaiting_lookahead() with scoring reconstruct.
  void rewind_lookahead();
  // The layout of the repeat that will score this context (reconstruct scoring): pieces of
  // piece_tokens text tokens, the text starting at context position text_offset. Under
  // ReconstructKeys::kPiece each piece then scores only the span it repeats
  // (compression::piece_span); without it, every piece scores the whole context.
  void expect_repeat(size_t piece_tokens, size_t text_offset);

  // A new cache in the same pool holding what `policy` keeps of this cache's prompt, as if the
  // prompt had been prefilled under it. Requires a recording cache right after its prefill,
  // and the same window, pooling, GQA aggregation, look-ahead and budget scores as the
  // recording (the scores depend on them). Throws std::length_error when the pool cannot hold the
  // copy.
  std::unique_ptr<PagedKvCache> compressed_copy(const compression::CompressionConfig& policy) const;
  // Another sample of the same prompt: a new cache in the same pool holding exactly what this
  // one holds, under the same policy. The full blocks are shared by reference (the pool frees
  // them with their last holder); each head's partial last block is copied, since both caches
  // append to it. Requires the prompt done and compressed (no look-ahead pending) and nothing
  // appended after it. Throws std::length_error when the pool cannot hold the copied blocks.
  std::unique_ptr<PagedKvCache> shared_copy() const;

 private:
  // finish_lookahead() and rewind_lookahead(): score what was observed, drop the rows after
  // the prompt.
  void score_and_roll_back(bool keep_window);
  struct HeadTable {
    std::vector<int32_t> blocks;
    uint32_t length = 0;
    size_t synced = 0;  // leading block ids already in the backend's table
  };

  kernels::Backend& backend() const { return pool_.backend(); }
  // A whole prompt in one forward: causal attention over the raw q/k/v, then only the rows
  // the policy keeps go to the blocks (scope layer), or every row (the rest).
  void prefill_layer(size_t layer, const float* q, size_t q_stride, const float* k, const float* v,
                     size_t kv_stride, size_t n, float* out, int32_t* slots);
  // Places n new rows of `layer` at the end of each head (every row, or with `kept` only rows
  // kept[g] of head g), allocating blocks: their slots go to slots[row * Hkv + g].
  void place_rows(size_t layer, size_t n, const std::vector<std::vector<uint32_t>>* kept,
                  int32_t* slots);
  // Index of [layer][head] among the heads of the layers this cache holds (span_blocks order).
  size_t head_index(size_t layer, size_t head) const;
  // Slot of row `row` of a head (its block must exist).
  int32_t slot(const HeadTable& head, size_t row) const;
  // Writes the layer's new block ids and its lengths into the pool's table.
  void sync_layer(size_t layer);
  // `values` uploaded into the scratch buffer `buffer` (grown as needed); backend memory.
  template <class T>
  const T* stage_array(kernels::Buffer& buffer, const std::vector<T>& values);
  // The prompt's report and score slots, on its first rows.
  void init_prompt(size_t n);
  // The last prompt chunk of `layer` is in the blocks: score it with the window's queries
  // (q_window: [W][Hq][Dh]) and compact it in place (or keep the queries for look-ahead).
  void compress_chunked_layer(size_t layer, const float* q_window, size_t q_stride);
  // Keys of the first `total` tokens of `layer`, read back from the blocks: [total][Hkv][Dh] in
  // backend memory; with `values`, their values too, in the same shape.
  kernels::Buffer read_keys(size_t layer, size_t total, kernels::Buffer* values = nullptr);
  // Keeps only `positions[g]` (ascending) of each head of `layer`, moved down in place; the
  // blocks past the new lengths go back to the pool.
  void compact_layer(size_t layer, const std::vector<std::vector<uint32_t>>& positions);
  // Scope global, after the last layer: one allocation over every layer, then compaction.
  void compact_global();
  // compact_global() now, or at finish_step() when this cache is one pipeline stage's.
  void compact_global_when_staged();
  // The layers this cache holds (HeadGroup::layer_begin/layer_end): their count, and one past
  // the last.
  size_t held_layers() const;
  size_t last_layer() const;
  void release(HeadTable& head);

  BlockPool& pool_;
  model::ModelConfig model_;
  compression::Compressor compressor_;         // the policy: scores, queries, selection
  std::vector<std::vector<HeadTable>> heads_;  // [layer][kv head]
  size_t position_ = 0;
  size_t prompt_n_ = 0;           // begin_prompt's; 0: the first forward is the whole prompt
  bool defer_scoring_ = false;    // scoring waits for look-ahead (compress_after_lookahead)
  bool compact_pending_ = false;  // scope global: compact once the last layer's rows are stored
  bool global_pending_ = false;   // scope global on a pipeline stage: compact at finish_step()
  size_t table_slot_ = 0;         // this sequence's rows of the pool's block tables
  size_t repeat_piece_ = 0, repeat_offset_ = 0;  // expect_repeat()'s
  size_t pieces_scored_ = 0;                     // pieces of the repeat scored so far
  kernels::Buffer slots_, moves_, seq_;          // scratch for one op's slot lists and descriptor
  CompressionReport report_;
};

}  // namespace adakv::runtime

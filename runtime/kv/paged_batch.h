// The ragged batch of one serving step over head-paged caches: per layer, every sequence's rows
// are placed in its own cache and stored by ONE kv_append over a slot mapping of all the
// sequences and heads, then ONE attention_paged call serves all the rows that read from the pool
// (decodes, look-ahead and later prompt chunks); a whole prompt or a first prompt chunk attends
// over its own raw rows instead (PagedKvCache::stage). An entry whose layer range
// leaves a layer out is skipped there, and takes its rows (commit) only when its range ends at
// the last layer.
#pragma once

#include <vector>

#include "model/kv_cache.h"
#include "runtime/kv/paged_kv_cache.h"

namespace adakv::runtime {

class PagedBatch : public model::KvBatch {
 public:
  struct Entry {
    PagedKvCache* cache;
    size_t tokens;
    bool logits;  // of the last row, or of every row of a scored text
    // A known text after the prompt (teacher forcing): several rows of it take the prompt
    // rows' numerics, as every text taken in parallel does.
    bool scored_text = false;
    // Layers [layer_begin, layer_end) run (a prompt prefilled layer by layer; the batch's last
    // entry), with the residual stream carried in `residual` ([tokens][d_model]) between them.
    size_t layer_begin = 0;
    size_t layer_end = static_cast<size_t>(-1);
    float* residual = nullptr;
  };
  // Every cache lives in `pool`; heads and sizes from `model` (this rank's local config).
  PagedBatch(BlockPool& pool, const model::ModelConfig& model, std::vector<Entry> entries);

  size_t size() const override { return entries_.size(); }
  size_t tokens(size_t s) const override { return entries_[s].tokens; }
  size_t next_position(size_t s) const override { return entries_[s].cache->next_position(); }
  size_t logit_rows(size_t s) const override {
    const Entry& e = entries_[s];
    return e.logits ? (e.scored_text ? e.tokens : 1) : 0;
  }
  bool is_prompt(size_t s) const override {
    const Entry& e = entries_[s];
    return (e.scored_text && e.tokens > 1) || e.cache->in_prompt();
  }
  size_t layer_begin(size_t s) const override { return entries_[s].layer_begin; }
  size_t layer_end(size_t s) const override { return entries_[s].layer_end; }
  float* residual(size_t s) override { return entries_[s].residual; }
  void append_and_attend(size_t layer, const float* q, size_t q_stride, const float* k,
                         const float* v, size_t kv_stride, float* out, size_t out_stride) override;
  void commit() override;

 private:
  BlockPool& pool_;
  const model::ModelConfig& model_;
  std::vector<Entry> entries_;
  // One layer's work: the entries running it (index, first packed row), the slot mapping of
  // every packed row [rows][kv heads] (-1: not stored), the descriptors of those that attend
  // over the pool; and the last two's backend copies.
  std::vector<std::pair<size_t, size_t>> running_;
  std::vector<int32_t> slots_;
  std::vector<kernels::PagedSequence> staged_;
  std::vector<const PagedKvCache*> staged_caches_;  // the cache of each staged_ descriptor
  kernels::Buffer slots_dev_, seqs_;
};

}  // namespace adakv::runtime

#include "runtime/kv/paged_batch.h"

#include <cmath>

namespace adakv::runtime {

PagedBatch::PagedBatch(const BlockPool& pool, const model::ModelConfig& model,
                       std::vector<Entry> entries)
    : pool_(pool), model_(model), entries_(std::move(entries)) {}

void PagedBatch::append_and_attend(size_t layer, const float* q, size_t q_stride, const float* k,
                                   const float* v, size_t kv_stride, float* out,
                                   size_t out_stride) {
  staged_.clear();
  staged_entry_.clear();
  staged_row_.clear();
  for (size_t s = 0, row = 0; s < entries_.size(); row += entries_[s].tokens, ++s) {
    if (layer < entries_[s].layer_begin || layer >= entries_[s].layer_end) continue;
    kernels::PagedSequence seq{};
    if (entries_[s].cache->stage(layer, q + row * q_stride, q_stride, k + row * kv_stride,
                                 v + row * kv_stride, kv_stride, entries_[s].tokens,
                                 out + row * out_stride, out_stride, seq)) {
      staged_.push_back(seq);
      staged_entry_.push_back(s);
      staged_row_.push_back(row);
    }
  }
  if (!staged_.empty()) {
    // The descriptors go to backend memory, where attention reads them.
    kernels::Backend& backend = pool_.backend();
    const size_t bytes = staged_.size() * sizeof(kernels::PagedSequence);
    if (seqs_.bytes() < bytes) seqs_ = backend.allocate(bytes);
    backend.upload(seqs_.data(), staged_.data(), bytes);
    backend.attention_paged(seqs_.as<kernels::PagedSequence>(), staged_.size(), pool_.arena(),
                            pool_.layout(), model_.n_heads, model_.n_kv_heads,
                            1.0f / std::sqrt(float(model_.head_dim)));
  }
  for (size_t i = 0; i < staged_.size(); ++i) {
    const Entry& e = entries_[staged_entry_[i]];
    e.cache->finish_layer(layer, q + staged_row_[i] * q_stride, q_stride, e.tokens);
  }
}

void PagedBatch::commit() {
  for (const auto& e : entries_) {
    if (e.layer_end >= model_.n_layers) e.cache->commit(e.tokens);
  }
}

}  // namespace adakv::runtime

#include "runtime/kv/paged_batch.h"

#include <algorithm>
#include <cmath>

namespace adakv::runtime {

PagedBatch::PagedBatch(BlockPool& pool, const model::ModelConfig& model, std::vector<Entry> entries)
    : pool_(pool), model_(model), entries_(std::move(entries)) {}

void PagedBatch::append_and_attend(size_t layer, const float* q, size_t q_stride, const float* k,
                                   const float* v, size_t kv_stride, float* out,
                                   size_t out_stride) {
  const size_t H = model_.n_kv_heads;
  size_t rows = 0;
  for (const Entry& e : entries_) rows += e.tokens;
  staged_.clear();
  staged_caches_.clear();
  running_.clear();
  slots_.assign(rows * H, -1);
  for (size_t s = 0, row = 0; s < entries_.size(); row += entries_[s].tokens, ++s) {
    const Entry& e = entries_[s];
    if (layer < e.layer_begin || layer >= e.layer_end) continue;
    running_.push_back({s, row});
    kernels::PagedSequence seq{};
    if (e.cache->stage(layer, q + row * q_stride, q_stride, k + row * kv_stride,
                       v + row * kv_stride, kv_stride, e.tokens, out + row * out_stride, out_stride,
                       slots_.data() + row * H, seq)) {
      staged_.push_back(seq);
      staged_caches_.push_back(e.cache);
    }
  }
  // A later sequence's stage may have grown the pool's block tables: every descriptor takes its
  // table pointers once all are staged.
  for (size_t i = 0; i < staged_.size(); ++i) {
    staged_[i].block_ids = staged_caches_[i]->table_rows(layer);
    staged_[i].lengths = staged_caches_[i]->table_lengths(layer);
  }
  // Every sequence's new rows of this layer, all heads, in one op; then one attention over the
  // sequences that read the pool. Both go through backend memory: the slot mapping and the
  // descriptors are uploaded.
  kernels::Backend& backend = pool_.backend();
  const auto upload = [&](kernels::Buffer& buffer, const void* data, size_t bytes) {
    if (buffer.bytes() < bytes) buffer = backend.allocate(std::max(bytes, 2 * buffer.bytes()));
    backend.upload(buffer.data(), data, bytes);
    return buffer.data();
  };
  backend.kv_append(pool_.arena(), pool_.layout(), k, v, kv_stride, rows, H,
                    static_cast<const int32_t*>(
                        upload(slots_dev_, slots_.data(), slots_.size() * sizeof(int32_t))));
  if (!staged_.empty()) {
    const auto* seqs = static_cast<const kernels::PagedSequence*>(
        upload(seqs_, staged_.data(), staged_.size() * sizeof(kernels::PagedSequence)));
    backend.attention_paged(seqs, staged_.size(), pool_.arena(), pool_.layout(), model_.n_heads,
                            model_.n_kv_heads, 1.0f / std::sqrt(float(model_.head_dim)));
  }
  for (const auto& [s, row] : running_) {
    entries_[s].cache->finish_layer(layer, q + row * q_stride, q_stride, entries_[s].tokens);
  }
}

void PagedBatch::commit() {
  for (const auto& e : entries_) {
    if (e.layer_end >= model_.n_layers) e.cache->commit(e.tokens);
  }
}

}  // namespace adakv::runtime

#include "runtime/kv/paged_kv_cache.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "runtime/compression/allocator.h"
#include "runtime/compression/scorer.h"

namespace adakv::runtime {
namespace {

using compression::Policy;
using compression::Scope;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Copies one token row (K, V and, for E4M3, their scales) between blocks, byte for byte, so
// compaction never re-quantizes.
void copy_row(const kernels::KvBlockLayout& l, const uint8_t* src, size_t src_row, uint8_t* dst,
              size_t dst_row) {
  const size_t row_bytes = l.head_dim * l.elem_bytes();
  std::memcpy(dst + l.k_offset() + dst_row * row_bytes, src + l.k_offset() + src_row * row_bytes,
              row_bytes);
  std::memcpy(dst + l.v_offset() + dst_row * row_bytes, src + l.v_offset() + src_row * row_bytes,
              row_bytes);
  if (l.dtype == kernels::KvDtype::kE4M3) {
    auto* ds = reinterpret_cast<float*>(dst + l.scales_offset());
    const auto* ss = reinterpret_cast<const float*>(src + l.scales_offset());
    ds[dst_row] = ss[src_row];
    ds[l.block_tokens + dst_row] = ss[l.block_tokens + src_row];
  }
}

}  // namespace

PagedKvCache::PagedKvCache(BlockPool& pool, const model::ModelConfig& model,
                           const compression::CompressionConfig& compression, HeadGroup group,
                           bool record_scores)
    : pool_(pool),
      model_(model),
      compression_(compression),
      group_(std::move(group)),
      heads_(model.n_layers, std::vector<HeadTable>(model.n_kv_heads)),
      record_scores_(record_scores) {
  compression_.validate();
  if (pool.layout().head_dim != model.head_dim) {
    throw std::invalid_argument("KV pool head_dim " + std::to_string(pool.layout().head_dim) +
                                " does not match the model's " + std::to_string(model.head_dim));
  }
  if (compression_.scope == Scope::kGlobal && compression_.policy != Policy::kAdaKV &&
      compression_.policy != Policy::kFull) {
    throw std::invalid_argument(std::string("scope global applies to policy adakv, not ") +
                                compression::to_string(compression_.policy));
  }
}

PagedKvCache::~PagedKvCache() {
  for (auto& layer : heads_) {
    for (auto& head : layer) release(head);
  }
}

void PagedKvCache::release(HeadTable& head) {
  for (int32_t id : head.blocks) pool_.release(id);
  head.blocks.clear();
  head.length = 0;
}

size_t PagedKvCache::held_blocks() const {
  size_t n = 0;
  for (const auto& layer : heads_) {
    for (const auto& head : layer) n += head.blocks.size();
  }
  return n;
}

size_t PagedKvCache::full_bytes() const {
  const size_t bt = pool_.layout().block_tokens;
  const size_t blocks_per_head = (position_ + bt - 1) / bt;
  return blocks_per_head * model_.n_layers * model_.n_kv_heads * pool_.block_bytes();
}

void PagedKvCache::append_rows(HeadTable& head, const float* k, const float* v, size_t stride,
                               size_t n) {
  const auto& layout = pool_.layout();
  for (size_t done = 0; done < n;) {
    const size_t row = head.length % layout.block_tokens;
    if (row == 0) {
      const int32_t id = pool_.allocate();
      if (id < 0) {
        throw std::length_error("KV pool exhausted: all " + std::to_string(pool_.capacity()) +
                                " blocks are in use");
      }
      head.blocks.push_back(id);
    }
    const size_t count = std::min(layout.block_tokens - row, n - done);
    kernels::check(kernels::kv_block_write(pool_.block(head.blocks.back()), layout, row,
                                           k + done * stride, v + done * stride, count, stride),
                   "kv_block_write");
    head.length += static_cast<uint32_t>(count);
    done += count;
  }
}

void PagedKvCache::begin_prompt(size_t n_prompt, bool defer_scoring) {
  if (position_ != 0 || !report_.kept.empty()) {
    throw std::logic_error("begin_prompt: the cache already holds a prompt");
  }
  if (n_prompt == 0) throw std::invalid_argument("begin_prompt: the prompt is empty");
  prompt_n_ = n_prompt;
  defer_scoring_ = defer_scoring;
}

void PagedKvCache::init_prompt(size_t n) {
  report_.prompt_tokens = n;
  report_.kept.assign(model_.n_layers, std::vector<size_t>(model_.n_kv_heads, n));
  scores_.assign(model_.n_layers, {});
  budget_scores_.assign(model_.n_layers, {});
  const bool defer = record_scores_ ? compression_.lookahead > 0 : defer_scoring_;
  if (defer) observed_q_.assign(model_.n_layers, {});
}

void PagedKvCache::append_and_attend(size_t layer, const float* q, size_t q_stride, const float* k,
                                     const float* v, size_t kv_stride, size_t n, float* out) {
  kernels::PagedSequence seq{};
  if (!stage(layer, q, q_stride, k, v, kv_stride, n, out, model_.q_width(), seq)) return;
  const auto t0 = std::chrono::steady_clock::now();
  kernels::check(kernels::attention_paged(&seq, 1, pool_.arena(), pool_.layout(), model_.n_heads,
                                          model_.n_kv_heads,
                                          1.0f / std::sqrt(static_cast<float>(model_.head_dim))),
                 "attention_paged");
  report_.decode_attention_s += seconds_since(t0);
  finish_layer(layer, q, q_stride, n);
}

bool PagedKvCache::stage(size_t layer, const float* q, size_t q_stride, const float* k,
                         const float* v, size_t kv_stride, size_t n, float* out,
                         size_t out_stride, kernels::PagedSequence& seq) {
  const size_t Dh = model_.head_dim, Hkv = model_.n_kv_heads;
  auto& heads = heads_[layer];
  if (position_ == 0 && n > 1 && (prompt_n_ == 0 || prompt_n_ == n)) {
    prefill_layer(layer, q, q_stride, k, v, kv_stride, n, out);
    return false;
  }
  if (position_ == 0 && prompt_n_ > n) {
    // The first of several prompt chunks: causal attention over its own raw rows.
    if (layer == 0) init_prompt(prompt_n_);
    kernels::check(kernels::attention_causal(out, q, k, v, n, n, model_.n_heads, Hkv, Dh, q_stride,
                                             kv_stride, out_stride,
                                             1.0f / std::sqrt(static_cast<float>(Dh))),
                   "attention_causal");
    for (size_t g = 0; g < Hkv; ++g) append_rows(heads[g], k + g * Dh, v + g * Dh, kv_stride, n);
    return false;
  }
  for (size_t g = 0; g < Hkv; ++g) append_rows(heads[g], k + g * Dh, v + g * Dh, kv_stride, n);
  // Rows after the prompt decoded before compression: their queries join the scoring.
  if (awaiting_lookahead() && position_ >= report_.prompt_tokens) {
    for (size_t i = 0; i < n; ++i) observe_query(layer, q + i * q_stride);
  }
  view_ids_.resize(Hkv);
  view_lengths_.resize(Hkv);
  for (size_t g = 0; g < Hkv; ++g) {
    view_ids_[g] = heads[g].blocks.data();
    view_lengths_[g] = heads[g].length;
  }
  seq = kernels::PagedSequence{view_ids_.data(), view_lengths_.data(), n, q, q_stride, out,
                               out_stride};
  return true;
}

void PagedKvCache::finish_layer(size_t layer, const float* q, size_t q_stride, size_t n) {
  if (prompt_n_ == 0 || position_ == 0 || position_ >= prompt_n_) return;
  if (position_ + n != prompt_n_) return;  // a middle chunk: nothing to score yet
  const size_t W = compression_.window;
  if (prompt_n_ > W && n < W) {
    throw std::logic_error("the last prompt chunk (" + std::to_string(n) +
                           " tokens) must hold the observation window of " + std::to_string(W));
  }
  compress_chunked_layer(layer, q + (n - std::min(n, W)) * q_stride, q_stride);
}

void PagedKvCache::compress_chunked_layer(size_t layer, const float* q_window, size_t q_stride) {
  const size_t N = prompt_n_, W = compression_.window;
  if (N <= W) return;
  if (awaiting_lookahead()) {
    for (size_t i = 0; i < W; ++i) observe_query(layer, q_window + i * q_stride);
    return;
  }
  if (record_scores_) throw std::logic_error("a recording cache takes its prompt in one forward");
  if (compression_.keeps_everything(N)) return;
  const auto t0 = std::chrono::steady_clock::now();
  if (compression_.policy != Policy::kStreaming) {
    const auto keys = read_keys(layer, N);
    score_into(layer, q_window, q_stride, keys.data(), model_.n_kv_heads * model_.head_dim, N, W);
  }
  report_.score_s += seconds_since(t0);
  if (compression_.scope == Scope::kGlobal) {
    if (layer + 1 == model_.n_layers) compact_global();
    return;
  }
  const auto& scores = scores_[layer];
  const auto positions = layer_positions(layer, scores.empty() ? nullptr : scores.data(), N,
                                         allocation_scores(layer).data());
  scores_[layer].clear();
  budget_scores_[layer].clear();
  compact_layer(layer, positions);
}

void PagedKvCache::compress_after_lookahead() {
  if (!awaiting_lookahead()) return;
  finish_lookahead();
  const size_t N = report_.prompt_tokens, L = model_.n_layers;
  if (compression_.keeps_everything(N) || N <= compression_.window) return;
  if (compression_.scope == Scope::kGlobal) return compact_global();
  for (size_t l = 0; l < L; ++l) {
    const auto& scores = scores_[l];
    const auto positions = layer_positions(l, scores.empty() ? nullptr : scores.data(), N,
                                           allocation_scores(l).data());
    scores_[l].clear();
    budget_scores_[l].clear();
    compact_layer(l, positions);
  }
}

std::vector<std::vector<size_t>> PagedKvCache::model_kept_tokens(size_t model_kv_heads) const {
  if (!report_.budgets.empty()) return report_.budgets;
  // Nothing allocated: every head kept the same count (the whole prompt, or streaming's).
  std::vector<std::vector<size_t>> kept(model_.n_layers);
  for (size_t l = 0; l < model_.n_layers; ++l) {
    const size_t n = report_.kept.empty() ? position_ : report_.kept[l][0];
    kept[l].assign(model_kv_heads, n);
  }
  return kept;
}

void PagedKvCache::prefill_layer(size_t layer, const float* q, size_t q_stride, const float* k,
                                 const float* v, size_t kv_stride, size_t n, float* out) {
  const size_t Dh = model_.head_dim, Hkv = model_.n_kv_heads, W = compression_.window;
  kernels::check(
      kernels::attention_causal(out, q, k, v, n, n, model_.n_heads, Hkv, Dh, q_stride, kv_stride,
                                model_.q_width(), 1.0f / std::sqrt(static_cast<float>(Dh))),
      "attention_causal");
  auto& heads = heads_[layer];
  if (report_.kept.empty()) init_prompt(n);
  auto keep_all = [&] {
    for (size_t g = 0; g < Hkv; ++g) append_rows(heads[g], k + g * Dh, v + g * Dh, kv_stride, n);
  };

  // A budget of the whole prompt (or more) compresses nothing, bit for bit.
  const bool compress = !compression_.keeps_everything(n) && n > W;
  const bool needs_scores = compression_.policy != Policy::kStreaming;
  if (awaiting_lookahead()) {
    // Scored in finish_lookahead(), once the look-ahead queries are known.
    if (n > W) {
      for (size_t i = n - W; i < n; ++i) observe_query(layer, q + i * q_stride);
    }
    return keep_all();
  }
  if ((compress && needs_scores) || (record_scores_ && n > W)) {
    const auto t0 = std::chrono::steady_clock::now();
    score_into(layer, q + (n - W) * q_stride, q_stride, k, kv_stride, n, W);
    report_.score_s += seconds_since(t0);
  }
  if (!compress || record_scores_) return keep_all();
  if (compression_.scope == Scope::kGlobal) {
    keep_all();
    if (layer + 1 == model_.n_layers) compact_global();
    return;
  }
  const auto positions =
      layer_positions(layer, scores_[layer].data(), n, allocation_scores(layer).data());
  scores_[layer].clear();
  budget_scores_[layer].clear();
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<float> kk, vv;
  for (size_t g = 0; g < Hkv; ++g) {
    const auto& pos = positions[g];
    kk.resize(pos.size() * Dh);
    vv.resize(pos.size() * Dh);
    for (size_t i = 0; i < pos.size(); ++i) {
      std::memcpy(&kk[i * Dh], k + pos[i] * kv_stride + g * Dh, Dh * sizeof(float));
      std::memcpy(&vv[i * Dh], v + pos[i] * kv_stride + g * Dh, Dh * sizeof(float));
    }
    append_rows(heads[g], kk.data(), vv.data(), Dh, pos.size());
    report_.kept[layer][g] = pos.size();
  }
  report_.compact_s += seconds_since(t0);
}

void PagedKvCache::observe_query(size_t layer, const float* q) {
  auto& rows = observed_q_[layer];
  rows.insert(rows.end(), q, q + model_.n_heads * model_.head_dim);
}

void PagedKvCache::finish_lookahead() {
  if (!awaiting_lookahead()) return;
  const auto t0 = std::chrono::steady_clock::now();
  const size_t n = report_.prompt_tokens, steps = position_ - n, total = position_;
  const size_t Dh = model_.head_dim, Hkv = model_.n_kv_heads, Hq = model_.n_heads;
  const size_t bt = pool_.layout().block_tokens;
  for (size_t l = 0; l < model_.n_layers; ++l) {
    const auto& observed = observed_q_[l];
    if (observed.empty()) continue;  // a prompt no longer than the window: nothing to score
    // The keys of prompt and look-ahead tokens.
    const auto keys = read_keys(l, total);
    score_into(l, observed.data(), Hq * Dh, keys.data(), Hkv * Dh, total,
               observed.size() / (Hq * Dh));
  }
  observed_q_.clear();
  // Roll back to the prompt: the look-ahead rows are dropped, their blocks freed.
  const size_t keep_blocks = (n + bt - 1) / bt;
  for (auto& layer : heads_) {
    for (auto& head : layer) {
      while (head.blocks.size() > keep_blocks) {
        pool_.release(head.blocks.back());
        head.blocks.pop_back();
      }
      head.length = static_cast<uint32_t>(n);
    }
  }
  position_ = n;
  report_.lookahead_tokens = steps;
  report_.score_s += seconds_since(t0);
}

void PagedKvCache::score_into(size_t layer, const float* q_obs, size_t q_stride, const float* k,
                              size_t k_stride, size_t n_keys, size_t n_obs) {
  using compression::Policy;
  const Policy p = compression_.policy;
  // A recording serves every policy's copy, so it scores the peak whenever the config asks.
  const bool peak = compression_.budget_scores == compression::BudgetScores::kPeak &&
                    (record_scores_ || p == Policy::kAdaKV || p == Policy::kAdaPyramid);
  scores_[layer] = compression::score_observations(
      q_obs, q_stride, k, k_stride, n_keys, n_obs, model_.n_heads, model_.n_kv_heads,
      model_.head_dim, compression_, peak ? &budget_scores_[layer] : nullptr);
  if (group_.merge_replicas) {
    group_.merge_replicas(scores_[layer], compression_.gqa);
    if (peak) group_.merge_replicas(budget_scores_[layer], compression_.gqa);
  }
}

const std::vector<float>& PagedKvCache::allocation_scores(size_t layer) const {
  return budget_scores_[layer].empty() ? scores_[layer] : budget_scores_[layer];
}

std::vector<std::vector<uint32_t>> PagedKvCache::layer_positions(size_t layer, const float* scores,
                                                                 size_t n,
                                                                 const float* budget_scores) {
  const size_t Hkv = model_.n_kv_heads, W = compression_.window;
  std::vector<std::vector<uint32_t>> positions(Hkv);
  if (compression_.keeps_everything(n) || n <= W) {
    for (auto& p : positions) {
      for (size_t i = 0; i < n; ++i) p.push_back(static_cast<uint32_t>(i));
    }
    return positions;
  }
  const size_t B = compression_.budget_per_head(n);
  if (compression_.policy == Policy::kStreaming) {
    const size_t sink = std::min(compression_.sink, B), recent = B - sink;
    for (auto& p : positions) {
      for (size_t i = 0; i < n; ++i) {
        if (i < sink || i >= n - recent) p.push_back(static_cast<uint32_t>(i));
      }
    }
    return positions;
  }
  const size_t prefix = n - W;
  const float* gains_from = budget_scores ? budget_scores : scores;
  const std::vector<float> layer_scores(gains_from, gains_from + Hkv * prefix);
  const auto budgets = allocate(layer_scores, 1, prefix, layer);
  for (size_t g = 0; g < Hkv; ++g) {
    positions[g] = kept_positions(scores + g * prefix, prefix, budgets[g], n);
  }
  return positions;
}

std::unique_ptr<PagedKvCache> PagedKvCache::compressed_copy(
    const compression::CompressionConfig& policy) const {
  const size_t n = report_.prompt_tokens, Hkv = model_.n_kv_heads, L = model_.n_layers;
  if (!record_scores_ || n == 0 || position_ != n || awaiting_lookahead()) {
    throw std::logic_error(
        "compressed_copy needs a recording cache right after its prefill (and its look-ahead)");
  }
  if (!policy.same_scoring(compression_)) {
    throw std::invalid_argument(
        "compressed_copy: window, pooling (kernel, sink, shift), GQA aggregation and look-ahead "
        "must match the recording");
  }
  auto copy = std::make_unique<PagedKvCache>(pool_, model_, policy, group_);
  copy->position_ = position_;
  copy->report_.prompt_tokens = n;
  copy->report_.kept.assign(L, std::vector<size_t>(Hkv, n));

  std::vector<std::vector<std::vector<uint32_t>>> positions(L);  // [layer][head]
  const bool global = policy.scope == Scope::kGlobal && !policy.keeps_everything(n) &&
                      policy.policy != Policy::kFull && n > policy.window;
  if (global) {
    const size_t prefix = n - policy.window;
    std::vector<float> all, gains_from;
    for (size_t l = 0; l < L; ++l) {
      all.insert(all.end(), scores_[l].begin(), scores_[l].end());
      if (!budget_scores_.empty() && !budget_scores_[l].empty()) {
        gains_from.insert(gains_from.end(), budget_scores_[l].begin(), budget_scores_[l].end());
      }
    }
    const auto budgets = copy->allocate(gains_from.empty() ? all : gains_from, L, prefix, 0);
    for (size_t l = 0; l < L; ++l) {
      for (size_t g = 0; g < Hkv; ++g) {
        const size_t row = l * Hkv + g;
        positions[l].push_back(
            copy->kept_positions(all.data() + row * prefix, prefix, budgets[row], n));
      }
    }
  } else {
    for (size_t l = 0; l < L; ++l) {
      positions[l] = copy->layer_positions(
          l, scores_[l].empty() ? nullptr : scores_[l].data(), n,
          budget_scores_.empty() || budget_scores_[l].empty() ? nullptr : budget_scores_[l].data());
    }
  }

  const auto t0 = std::chrono::steady_clock::now();
  const auto& layout = pool_.layout();
  const size_t bt = layout.block_tokens;
  for (size_t l = 0; l < L; ++l) {
    for (size_t g = 0; g < Hkv; ++g) {
      const HeadTable& src = heads_[l][g];
      HeadTable& dst = copy->heads_[l][g];
      for (uint32_t p : positions[l][g]) {
        if (dst.length % bt == 0) {
          const int32_t id = pool_.allocate();
          if (id < 0) throw std::length_error("KV pool exhausted while copying a sequence");
          dst.blocks.push_back(id);
        }
        copy_row(layout, pool_.block(src.blocks[p / bt]), p % bt, pool_.block(dst.blocks.back()),
                 dst.length % bt);
        ++dst.length;
      }
      copy->report_.kept[l][g] = dst.length;
    }
  }
  copy->report_.compact_s = seconds_since(t0);
  return copy;
}

std::vector<size_t> PagedKvCache::allocate(const std::vector<float>& scores, size_t layers,
                                           size_t prefix, size_t first_layer) {
  const auto t0 = std::chrono::steady_clock::now();
  const size_t W = compression_.window, n = prefix + W, Hkv = model_.n_kv_heads;
  // Rows of the allocation: every KV head of the model in the covered layers.
  const size_t Hm = group_.model_kv_heads ? group_.model_kv_heads : Hkv;
  const size_t rows = layers * Hm;
  const size_t B = compression_.budget_per_head(n);
  const Policy policy = compression_.policy;
  std::vector<size_t> pyramid;
  if (policy == Policy::kPyramidKV || policy == Policy::kAdaPyramid) {
    pyramid =
        compression::pyramid_layer_budgets(model_.n_layers, B, W, compression_.pyramid_beta, n);
  }
  // Prefix budget (window excluded) of a row's layer before any per-head adaptation.
  auto layer_base = [&](size_t row) {
    const size_t b = pyramid.empty() ? B : pyramid[first_layer + row / Hm];
    return std::min(prefix, b > W ? b - W : 0);
  };
  std::vector<size_t> budgets(rows);
  if (policy == Policy::kSnapKV || policy == Policy::kPyramidKV) {
    for (size_t r = 0; r < rows; ++r) budgets[r] = layer_base(r);
  } else {
    const bool topk = compression_.rule == compression::Rule::kTopK;
    compression::GainMatrix gains(rows, prefix, topk ? 1 : compression_.delta);
    if (group_.contributes) {
      for (size_t l = 0; l < layers; ++l) {
        for (size_t g = 0; g < Hkv; ++g) {
          gains.fill_row(l * Hm + group_.first_kv_head + g, scores.data() + (l * Hkv + g) * prefix);
        }
      }
    }
    if (group_.exchange) group_.exchange(gains.data);
    const size_t base = layer_base(0);
    const size_t total = rows * base;
    budgets = topk ? compression::allocate_topk(gains, total, base, compression_.alpha)
                   : compression::allocate_waterfill(gains, total, compression_.b_min);
  }
  if (report_.budgets.empty()) report_.budgets.assign(model_.n_layers, std::vector<size_t>(Hm));
  std::vector<size_t> own(layers * Hkv);
  for (size_t l = 0; l < layers; ++l) {
    for (size_t h = 0; h < Hm; ++h) {
      report_.budgets[first_layer + l][h] = std::min(budgets[l * Hm + h], prefix) + W;
    }
    for (size_t g = 0; g < Hkv; ++g) own[l * Hkv + g] = budgets[l * Hm + group_.first_kv_head + g];
  }
  report_.allocate_s += seconds_since(t0);
  return own;
}

std::vector<uint32_t> PagedKvCache::kept_positions(const float* scores, size_t prefix, size_t keep,
                                                   size_t n) const {
  auto positions = compression::select_top_positions(scores, prefix, std::min(keep, prefix));
  for (size_t i = prefix; i < n; ++i) positions.push_back(static_cast<uint32_t>(i));
  return positions;
}

void PagedKvCache::compact_global() {
  const size_t Hkv = model_.n_kv_heads, L = model_.n_layers;
  const size_t n = report_.prompt_tokens, prefix = n - compression_.window;
  std::vector<float> all, gains_from;
  all.reserve(L * Hkv * prefix);
  for (size_t l = 0; l < L; ++l) {
    all.insert(all.end(), scores_[l].begin(), scores_[l].end());
    if (!budget_scores_[l].empty()) {
      gains_from.insert(gains_from.end(), budget_scores_[l].begin(), budget_scores_[l].end());
    }
    scores_[l].clear();
    budget_scores_[l].clear();
  }
  const auto budgets = allocate(gains_from.empty() ? all : gains_from, L, prefix, 0);

  std::vector<std::vector<uint32_t>> positions(Hkv);
  for (size_t l = 0; l < L; ++l) {
    for (size_t g = 0; g < Hkv; ++g) {
      const size_t row = l * Hkv + g;
      positions[g] = kept_positions(all.data() + row * prefix, prefix, budgets[row], n);
    }
    compact_layer(l, positions);
  }
}

void PagedKvCache::compact_layer(size_t layer,
                                 const std::vector<std::vector<uint32_t>>& positions) {
  // In place: kept positions ascend, so row i moves from position p_i >= i and never
  // overwrites a row still to be read; then the blocks past the new length go back. No block
  // is needed during compaction, so it works with a pool filled by the prefill.
  const auto t0 = std::chrono::steady_clock::now();
  const auto& layout = pool_.layout();
  const size_t bt = layout.block_tokens;
  for (size_t g = 0; g < model_.n_kv_heads; ++g) {
    const auto& kept = positions[g];
    HeadTable& head = heads_[layer][g];
    for (size_t i = 0; i < kept.size(); ++i) {
      const size_t p = kept[i];
      if (p == i) continue;
      copy_row(layout, pool_.block(head.blocks[p / bt]), p % bt, pool_.block(head.blocks[i / bt]),
               i % bt);
    }
    head.length = static_cast<uint32_t>(kept.size());
    const size_t blocks_needed = (kept.size() + bt - 1) / bt;
    for (size_t b = blocks_needed; b < head.blocks.size(); ++b) pool_.release(head.blocks[b]);
    head.blocks.resize(blocks_needed);
    report_.kept[layer][g] = kept.size();
  }
  report_.compact_s += seconds_since(t0);
}

std::vector<float> PagedKvCache::read_keys(size_t layer, size_t total) const {
  const size_t Dh = model_.head_dim, Hkv = model_.n_kv_heads;
  const auto& layout = pool_.layout();
  const size_t bt = layout.block_tokens;
  std::vector<float> keys(total * Hkv * Dh), k_rows(bt * Dh), v_rows(bt * Dh);
  for (size_t g = 0; g < Hkv; ++g) {
    const HeadTable& head = heads_[layer][g];
    for (size_t b = 0; b * bt < total; ++b) {
      const size_t rows = std::min(bt, total - b * bt);
      kernels::check(kernels::kv_block_read(pool_.block(head.blocks[b]), layout, 0, rows,
                                            k_rows.data(), v_rows.data()),
                     "kv_block_read");
      for (size_t r = 0; r < rows; ++r) {
        std::memcpy(&keys[((b * bt + r) * Hkv + g) * Dh], &k_rows[r * Dh], Dh * sizeof(float));
      }
    }
  }
  return keys;
}

}  // namespace adakv::runtime

#include "runtime/kv/paged_kv_cache.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <stdexcept>
#include <string>

namespace adakv::runtime {
namespace {

using compression::Scope;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

PagedKvCache::PagedKvCache(BlockPool& pool, const model::ModelConfig& model,
                           const compression::CompressionConfig& compression, HeadGroup group,
                           bool record_scores)
    : pool_(pool),
      model_(model),
      compressor_(model, compression, std::move(group), record_scores, pool.backend()),
      heads_(model.n_layers, std::vector<HeadTable>(model.n_kv_heads)) {
  compression.validate();
  if (pool.layout().head_dim != model.head_dim) {
    throw std::invalid_argument("KV pool head_dim " + std::to_string(pool.layout().head_dim) +
                                " does not match the model's " + std::to_string(model.head_dim));
  }
  compression::HeadSelector::check_scope(compression);
  table_slot_ = pool.tables().acquire(model.n_layers, model.n_kv_heads);
}

template <class T>
const T* PagedKvCache::stage_array(kernels::Buffer& buffer, const std::vector<T>& values) {
  const size_t bytes = values.size() * sizeof(T);
  if (buffer.bytes() < bytes) buffer = backend().allocate(std::max(bytes, 2 * buffer.bytes()));
  backend().upload(buffer.data(), values.data(), bytes);
  return buffer.as<T>();
}

void PagedKvCache::sync_layer(size_t layer) {
  const size_t H = model_.n_kv_heads;
  std::vector<const std::vector<int32_t>*> blocks(H);
  std::vector<size_t> synced(H);
  std::vector<uint32_t> lengths(H);
  for (size_t g = 0; g < H; ++g) {
    const HeadTable& head = heads_[layer][g];
    blocks[g] = &head.blocks;
    synced[g] = head.synced;
    lengths[g] = head.length;
  }
  pool_.tables().write_layer(table_slot_, layer, blocks, synced, lengths);
  for (size_t g = 0; g < H; ++g) heads_[layer][g].synced = synced[g];
}

int32_t PagedKvCache::slot(const HeadTable& head, size_t row) const {
  const size_t bt = pool_.layout().block_tokens;
  return static_cast<int32_t>(static_cast<size_t>(head.blocks[row / bt]) * bt + row % bt);
}

PagedKvCache::~PagedKvCache() {
  for (auto& layer : heads_) {
    for (auto& head : layer) release(head);
  }
  pool_.tables().release(table_slot_);
}

void PagedKvCache::release(HeadTable& head) {
  for (int32_t id : head.blocks) pool_.release(id);
  head.blocks.clear();
  head.length = 0;
  head.synced = 0;
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
  return blocks_per_head * held_layers() * model_.n_kv_heads * pool_.block_bytes();
}

void PagedKvCache::place_rows(size_t layer, size_t n,
                              const std::vector<std::vector<uint32_t>>* kept, int32_t* slots) {
  const size_t H = model_.n_kv_heads, bt = pool_.layout().block_tokens;
  for (size_t g = 0; g < H; ++g) {
    HeadTable& head = heads_[layer][g];
    const size_t count = kept ? (*kept)[g].size() : n;
    for (size_t i = 0; i < count; ++i) {
      if (head.length % bt == 0) {
        const int32_t id = pool_.allocate();
        if (id < 0) {
          sync_layer(layer);
          throw std::length_error("KV pool exhausted: all " + std::to_string(pool_.capacity()) +
                                  " blocks are in use");
        }
        head.blocks.push_back(id);
      }
      const size_t row = kept ? (*kept)[g][i] : i;
      slots[row * H + g] = slot(head, head.length++);
    }
  }
  sync_layer(layer);
}

void PagedKvCache::begin_prompt(size_t n_prompt, bool defer_scoring) {
  if (position_ != 0 || !report_.kept.empty()) {
    throw std::logic_error("begin_prompt: the cache already holds a prompt");
  }
  if (n_prompt == 0) throw std::invalid_argument("begin_prompt: the prompt is empty");
  prompt_n_ = n_prompt;
  defer_scoring_ = defer_scoring;
}

std::vector<int32_t> PagedKvCache::span_blocks(size_t index) const {
  const size_t bt = pool_.layout().block_tokens;
  std::vector<int32_t> ids;
  for (size_t l = 0; l < model_.n_layers; ++l) {
    if (!compressor_.group().holds(l)) continue;
    for (const HeadTable& head : heads_[l]) {
      if (head.length < (index + 1) * bt || head.blocks.size() <= index) {
        throw std::logic_error("span_blocks: span " + std::to_string(index) +
                               " is not in the blocks of every head");
      }
      ids.push_back(head.blocks[index]);
    }
  }
  return ids;
}

void PagedKvCache::attach_spans(const std::vector<const std::vector<int32_t>*>& spans) {
  const size_t bt = pool_.layout().block_tokens, tokens = spans.size() * bt;
  if (position_ != 0 || !report_.kept.empty() || tokens >= prompt_n_) {
    throw std::logic_error(
        "attach_spans: needs an announced prompt longer than the spans, before its first forward");
  }
  init_prompt(prompt_n_);
  for (size_t l = 0; l < model_.n_layers; ++l) {
    if (!compressor_.group().holds(l)) continue;
    for (size_t g = 0; g < model_.n_kv_heads; ++g) {
      HeadTable& head = heads_[l][g];
      for (const auto* span : spans) {
        const int32_t id = span->at(head_index(l, g));
        pool_.share(id);
        head.blocks.push_back(id);
      }
      head.length = static_cast<uint32_t>(tokens);
    }
    sync_layer(l);
  }
  position_ = tokens;
}

size_t PagedKvCache::head_index(size_t layer, size_t head) const {
  size_t held = 0;
  for (size_t l = 0; l < layer; ++l) held += compressor_.group().holds(l);
  return held * model_.n_kv_heads + head;
}

void PagedKvCache::init_prompt(size_t n) {
  report_.prompt_tokens = n;
  report_.kept.assign(model_.n_layers, std::vector<size_t>(model_.n_kv_heads, n));
  compressor_.start_prompt(defer_scoring_);
}

void PagedKvCache::append_and_attend(size_t layer, const float* q, size_t q_stride, const float* k,
                                     const float* v, size_t kv_stride, size_t n, float* out) {
  std::vector<int32_t> slots(n * model_.n_kv_heads, -1);
  kernels::PagedSequence seq{};
  const bool attends =
      stage(layer, q, q_stride, k, v, kv_stride, n, out, model_.q_width(), slots.data(), seq);
  backend().kv_append(pool_.arena(), pool_.layout(), k, v, kv_stride, n, model_.n_kv_heads,
                      stage_array(slots_, slots));
  if (attends) {
    const auto t0 = std::chrono::steady_clock::now();
    backend().attention_paged(stage_array(seq_, std::vector{seq}), 1, pool_.arena(), pool_.layout(),
                              model_.n_heads, model_.n_kv_heads,
                              1.0f / std::sqrt(static_cast<float>(model_.head_dim)));
    report_.decode_attention_s += seconds_since(t0);
  }
  finish_layer(layer, q, q_stride, n);
}

bool PagedKvCache::stage(size_t layer, const float* q, size_t q_stride, const float* k,
                         const float* v, size_t kv_stride, size_t n, float* out, size_t out_stride,
                         int32_t* slots, kernels::PagedSequence& seq) {
  const size_t Dh = model_.head_dim, Hkv = model_.n_kv_heads;
  if (position_ == 0 && n > 1 && (prompt_n_ == 0 || prompt_n_ == n)) {
    prefill_layer(layer, q, q_stride, k, v, kv_stride, n, out, slots);
    return false;
  }
  if (position_ == 0 && prompt_n_ > n) {
    // The first of several prompt chunks: causal attention over its own raw rows. The prompt
    // starts at the first layer this cache holds (a later pipeline stage never sees layer 0).
    if (report_.kept.empty()) init_prompt(prompt_n_);
    pool_.backend().attention_causal(out, q, k, v, n, n, model_.n_heads, Hkv, Dh, q_stride,
                                     kv_stride, out_stride,
                                     1.0f / std::sqrt(static_cast<float>(Dh)));
    place_rows(layer, n, nullptr, slots);
    return false;
  }
  place_rows(layer, n, nullptr, slots);
  // Rows after the prompt decoded before compression: their queries join the scoring.
  if (awaiting_lookahead() && position_ >= report_.prompt_tokens) {
    compressor_.observe(layer, q, q_stride, n);
  }
  seq = kernels::PagedSequence{table_rows(layer), table_lengths(layer), n, q, q_stride, out,
                               out_stride};
  return true;
}

void PagedKvCache::finish_layer(size_t layer, const float* q, size_t q_stride, size_t n) {
  if (compact_pending_) {
    // A whole prompt under scope global: every layer's rows are in the blocks now.
    compact_pending_ = false;
    compact_global_when_staged();
    return;
  }
  if (prompt_n_ == 0 || position_ == 0 || position_ >= prompt_n_) return;
  if (position_ + n != prompt_n_) return;  // a middle chunk: nothing to score yet
  // A prompt kept whole scores nothing: its last chunk may be of any size (after cached spans,
  // a few tokens).
  if (!compressor_.records() && !awaiting_lookahead() && !compressor_.evicts(prompt_n_)) return;
  const size_t W = config().window;
  if (prompt_n_ > W && n < W) {
    throw std::logic_error("the last prompt chunk (" + std::to_string(n) +
                           " tokens) must hold the observation window of " + std::to_string(W));
  }
  compress_chunked_layer(layer, q + (n - std::min(n, W)) * q_stride, q_stride);
}

void PagedKvCache::compress_chunked_layer(size_t layer, const float* q_window, size_t q_stride) {
  const size_t N = prompt_n_, W = config().window;
  if (N <= W) return;
  if (awaiting_lookahead()) {
    compressor_.observe(layer, q_window, q_stride, W);
    return;
  }
  if (compressor_.records()) {
    throw std::logic_error("a recording cache takes its prompt in one forward");
  }
  if (!compressor_.evicts(N)) return;
  const auto t0 = std::chrono::steady_clock::now();
  if (compressor_.scores_prompt(N)) {
    kernels::Buffer values;
    const bool weigh = config().scoring == compression::Scoring::kOutputAware;
    const auto keys = read_keys(layer, N, weigh ? &values : nullptr);
    compressor_.score(layer, q_window, q_stride, keys.as<float>(), model_.kv_width(), N, W,
                      weigh ? values.as<float>() : nullptr, model_.kv_width());
  }
  report_.score_s += seconds_since(t0);
  if (config().scope == Scope::kGlobal) {
    if (layer + 1 == last_layer()) compact_global_when_staged();
    return;
  }
  compact_layer(layer, compressor_.take_layer(layer, N, report_));
}

void PagedKvCache::compress_after_lookahead() {
  if (!awaiting_lookahead()) return;
  finish_lookahead();
  const size_t N = report_.prompt_tokens;
  if (compressor_.records() || !compressor_.evicts(N)) return;
  if (config().scope == Scope::kGlobal) return compact_global();
  for (size_t l = 0; l < model_.n_layers; ++l) {
    if (!compressor_.group().holds(l)) continue;
    compact_layer(l, compressor_.take_layer(l, N, report_));
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
                                 const float* v, size_t kv_stride, size_t n, float* out,
                                 int32_t* slots) {
  const size_t Dh = model_.head_dim, Hkv = model_.n_kv_heads, W = config().window;
  pool_.backend().attention_causal(out, q, k, v, n, n, model_.n_heads, Hkv, Dh, q_stride, kv_stride,
                                   model_.q_width(), 1.0f / std::sqrt(static_cast<float>(Dh)));
  if (report_.kept.empty()) init_prompt(n);
  auto keep_all = [&] { place_rows(layer, n, nullptr, slots); };

  if (awaiting_lookahead()) {
    // Scored in finish_lookahead(), once the look-ahead queries are known.
    if (n > W) compressor_.observe(layer, q + (n - W) * q_stride, q_stride, W);
    return keep_all();
  }
  if (compressor_.scores_prompt(n)) {
    const auto t0 = std::chrono::steady_clock::now();
    compressor_.score(layer, q + (n - W) * q_stride, q_stride, k, kv_stride, n, W, v, kv_stride);
    report_.score_s += seconds_since(t0);
  }
  // A budget of the whole prompt (or more) compresses nothing, bit for bit.
  if (!compressor_.evicts(n) || compressor_.records()) return keep_all();
  if (config().scope == Scope::kGlobal) {
    keep_all();
    compact_pending_ = layer + 1 == last_layer();
    return;
  }
  const auto positions = compressor_.take_layer(layer, n, report_);
  const auto t0 = std::chrono::steady_clock::now();
  place_rows(layer, n, &positions, slots);
  for (size_t g = 0; g < Hkv; ++g) report_.kept[layer][g] = positions[g].size();
  report_.compact_s += seconds_since(t0);
}

void PagedKvCache::finish_lookahead() {
  if (!awaiting_lookahead()) return;
  score_and_roll_back(false);
}

void PagedKvCache::rewind_lookahead() {
  if (!awaiting_lookahead() || config().scoring != compression::Scoring::kReconstruct) {
    throw std::logic_error("rewind_lookahead needs a context being scored by its repeat");
  }
  score_and_roll_back(true);
}

void PagedKvCache::expect_repeat(size_t piece_tokens, size_t text_offset) {
  repeat_piece_ = piece_tokens;
  repeat_offset_ = text_offset;
  pieces_scored_ = 0;
}

void PagedKvCache::score_and_roll_back(bool keep_window) {
  const auto t0 = std::chrono::steady_clock::now();
  const size_t n = report_.prompt_tokens, steps = position_ - n, total = position_;
  const size_t bt = pool_.layout().block_tokens;
  // A piece of a repeat scores its own span (the last piece is the one not followed by more).
  std::optional<compression::RepeatPiece> piece;
  if (repeat_piece_ > 0 && steps > 0 &&
      config().reconstruct_keys == compression::ReconstructKeys::kPiece) {
    piece = compression::RepeatPiece{
        n, compression::piece_span(pieces_scored_, !keep_window, repeat_piece_, repeat_offset_, n)};
  }
  ++pieces_scored_;
  // Scored over the keys of prompt and look-ahead tokens.
  compressor_.score_lookahead(
      total, [&](size_t layer) { return read_keys(layer, total); }, keep_window,
      piece ? &*piece : nullptr);
  // Roll back to the prompt: the look-ahead rows are dropped, their blocks freed.
  const size_t keep_blocks = (n + bt - 1) / bt;
  for (size_t l = 0; l < heads_.size(); ++l) {
    if (!compressor_.group().holds(l)) continue;  // another pipeline stage's layer: empty here
    for (auto& head : heads_[l]) {
      while (head.blocks.size() > keep_blocks) {
        pool_.release(head.blocks.back());
        head.blocks.pop_back();
      }
      head.length = static_cast<uint32_t>(n);
    }
    sync_layer(l);
  }
  position_ = n;
  report_.lookahead_tokens += steps;
  report_.score_s += seconds_since(t0);
}

std::unique_ptr<PagedKvCache> PagedKvCache::compressed_copy(
    const compression::CompressionConfig& policy) const {
  const size_t n = report_.prompt_tokens, Hkv = model_.n_kv_heads, L = model_.n_layers;
  if (!compressor_.records() || n == 0 || position_ != n || awaiting_lookahead()) {
    throw std::logic_error(
        "compressed_copy needs a recording cache right after its prefill (and its look-ahead)");
  }
  if (!policy.same_scoring(config())) {
    throw std::invalid_argument(
        "compressed_copy: window, pooling (kernel, sink, shift), GQA aggregation and look-ahead "
        "must match the recording");
  }
  auto copy = std::make_unique<PagedKvCache>(pool_, model_, policy, compressor_.group());
  copy->position_ = position_;
  copy->report_.prompt_tokens = n;
  copy->report_.kept.assign(L, std::vector<size_t>(Hkv, n));
  // [layer][head]
  const auto positions = copy->compressor_.select_from(compressor_, n, copy->report_);

  const auto t0 = std::chrono::steady_clock::now();
  const size_t bt = pool_.layout().block_tokens;
  std::vector<int32_t> src_slots, dst_slots;
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
        src_slots.push_back(slot(src, p));
        dst_slots.push_back(copy->slot(dst, dst.length++));
      }
      copy->report_.kept[l][g] = dst.length;
    }
    copy->sync_layer(l);
  }
  if (!src_slots.empty()) {
    src_slots.insert(src_slots.end(), dst_slots.begin(), dst_slots.end());
    const int32_t* moves = copy->stage_array(copy->moves_, src_slots);
    backend().kv_copy_rows(pool_.arena(), pool_.layout(), moves, moves + dst_slots.size(),
                           dst_slots.size());
  }
  copy->report_.compact_s = seconds_since(t0);
  return copy;
}

std::unique_ptr<PagedKvCache> PagedKvCache::shared_copy() const {
  const size_t n = report_.prompt_tokens, Hkv = model_.n_kv_heads, L = model_.n_layers;
  if (n == 0 || position_ != n || awaiting_lookahead() || compact_pending_ ||
      compressor_.records()) {
    throw std::logic_error(
        "shared_copy needs a compressed prompt with nothing appended after it (and no recording)");
  }
  auto copy = std::make_unique<PagedKvCache>(pool_, model_, config(), compressor_.group());
  copy->position_ = position_;
  copy->prompt_n_ = prompt_n_;
  copy->report_ = report_;
  const size_t bt = pool_.layout().block_tokens;
  std::vector<int32_t> src_slots, dst_slots;
  for (size_t l = 0; l < L; ++l) {
    for (size_t g = 0; g < Hkv; ++g) {
      const HeadTable& src = heads_[l][g];
      HeadTable& dst = copy->heads_[l][g];
      const size_t full = src.length / bt;
      for (size_t b = 0; b < full; ++b) {
        pool_.share(src.blocks[b]);
        dst.blocks.push_back(src.blocks[b]);
      }
      dst.length = static_cast<uint32_t>(full * bt);
      if (src.length % bt != 0) {
        const int32_t id = pool_.allocate();
        if (id < 0) {
          copy->sync_layer(l);
          throw std::length_error("KV pool exhausted while sharing a prompt with another sample");
        }
        dst.blocks.push_back(id);
        for (size_t row = full * bt; row < src.length; ++row) {
          src_slots.push_back(slot(src, row));
          dst_slots.push_back(copy->slot(dst, dst.length++));
        }
      }
    }
    copy->sync_layer(l);
  }
  if (!src_slots.empty()) {
    const size_t moved = dst_slots.size();
    src_slots.insert(src_slots.end(), dst_slots.begin(), dst_slots.end());
    const int32_t* moves = copy->stage_array(copy->moves_, src_slots);
    backend().kv_copy_rows(pool_.arena(), pool_.layout(), moves, moves + moved, moved);
  }
  return copy;
}

void PagedKvCache::compact_global() {
  const auto positions = compressor_.take_global(report_.prompt_tokens, report_);
  for (size_t l = 0; l < model_.n_layers; ++l) {
    if (compressor_.group().holds(l)) compact_layer(l, positions[l]);
  }
}

void PagedKvCache::compact_global_when_staged() {
  // A pipeline stage cannot allocate yet: the later stages score their layers after this
  // stage's forward, and the allocation's exchange waits for all of them.
  if (compressor_.group().staged(model_.n_layers)) {
    global_pending_ = true;
    return;
  }
  compact_global();
}

void PagedKvCache::finish_step() {
  if (!global_pending_) return;
  global_pending_ = false;
  compact_global();
}

size_t PagedKvCache::held_layers() const {
  const auto& g = compressor_.group();
  return last_layer() - std::min(g.layer_begin, last_layer());
}

size_t PagedKvCache::last_layer() const {
  const auto& g = compressor_.group();
  return g.layer_end == 0 ? model_.n_layers : std::min(g.layer_end, model_.n_layers);
}

void PagedKvCache::compact_layer(size_t layer,
                                 const std::vector<std::vector<uint32_t>>& positions) {
  // In place: kept positions ascend, so each row moves down to its rank among the kept; then
  // the blocks past the new length go back. No block is needed during compaction, so it works
  // with a pool filled by the prefill.
  const auto t0 = std::chrono::steady_clock::now();
  const size_t bt = pool_.layout().block_tokens;
  std::vector<int32_t> src, dst;
  for (size_t g = 0; g < model_.n_kv_heads; ++g) {
    const auto& kept = positions[g];
    HeadTable& head = heads_[layer][g];
    for (size_t i = 0; i < kept.size(); ++i) {
      if (kept[i] == i) continue;
      src.push_back(slot(head, kept[i]));
      dst.push_back(slot(head, i));
    }
  }
  if (!src.empty()) {
    const size_t n = src.size();
    src.insert(src.end(), dst.begin(), dst.end());
    const int32_t* moves = stage_array(moves_, src);
    backend().kv_copy_rows(pool_.arena(), pool_.layout(), moves, moves + n, n);
  }
  for (size_t g = 0; g < model_.n_kv_heads; ++g) {
    const size_t kept = positions[g].size();
    HeadTable& head = heads_[layer][g];
    head.length = static_cast<uint32_t>(kept);
    const size_t blocks_needed = (kept + bt - 1) / bt;
    for (size_t b = blocks_needed; b < head.blocks.size(); ++b) pool_.release(head.blocks[b]);
    head.blocks.resize(blocks_needed);
    report_.kept[layer][g] = kept;
  }
  sync_layer(layer);
  report_.compact_s += seconds_since(t0);
}

kernels::Buffer PagedKvCache::read_keys(size_t layer, size_t total, kernels::Buffer* values) {
  const size_t Dh = model_.head_dim, H = model_.n_kv_heads;
  std::vector<int32_t> slots(total * H);
  for (size_t t = 0; t < total; ++t) {
    for (size_t g = 0; g < H; ++g) slots[t * H + g] = slot(heads_[layer][g], t);
  }
  kernels::Buffer keys = backend().allocate(total * H * Dh * sizeof(float));
  if (values) *values = backend().allocate(total * H * Dh * sizeof(float));
  backend().kv_gather(keys.as<float>(), values ? values->as<float>() : nullptr, Dh, pool_.arena(),
                      pool_.layout(), stage_array(slots_, slots), total * H);
  return keys;
}

}  // namespace adakv::runtime

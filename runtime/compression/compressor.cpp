#include "runtime/compression/compressor.h"

#include <algorithm>
#include <stdexcept>

#include "runtime/compression/output_aware.h"
#include "runtime/compression/scorer.h"

namespace adakv::compression {
namespace {

// Layer l's scores, or null where it has none (not scored, or no peak).
const float* scores_or_null(const std::vector<std::vector<float>>& scores, size_t l) {
  return l < scores.size() && !scores[l].empty() ? scores[l].data() : nullptr;
}

}  // namespace

Compressor::Compressor(const model::ModelConfig& model, const CompressionConfig& config,
                       HeadGroup group, bool record, kernels::Backend& backend)
    : n_layers_(model.n_layers),
      q_heads_(model.n_heads),
      kv_heads_(model.n_kv_heads),
      head_dim_(model.head_dim),
      model_(model),
      backend_(&backend),
      record_(record),
      selector_(config, model.n_layers, model.n_kv_heads, std::move(group)) {}

bool Compressor::scores_prompt(size_t n) const {
  return (evicts(n) && config().policy != Policy::kStreaming) || (record_ && n > config().window);
}

void Compressor::start_prompt(bool defer) {
  scores_.assign(n_layers_, {});
  budget_scores_.assign(n_layers_, {});
  // A recording waits for the queries after the prompt: look-ahead tokens, or the repeated
  // context that reconstruct scoring observes.
  const bool observes_after = config().lookahead > 0 || config().scoring == Scoring::kReconstruct;
  if (record_ ? observes_after : defer) {
    observed_q_.clear();
    observed_q_.resize(n_layers_);
  }
}

void Compressor::score(size_t layer, const float* q_obs, size_t q_stride, const float* k,
                       size_t k_stride, size_t n_keys, size_t n_obs, const float* v,
                       size_t v_stride) {
  const CompressionConfig& c = config();
  if (c.scoring == Scoring::kReconstruct) {
    if (n_obs <= c.window) {
      throw std::invalid_argument(
          "scoring reconstruct needs the repeated context's queries after the prompt (a "
          "compressed context, or adakv eval passkey-multi)");
    }
    // KVzip: each key's largest attention from one query of the repeat; selection and
    // allocation both read it.
    std::vector<float> peak;
    score_observations(q_obs, q_stride, k, k_stride, n_keys, n_obs, q_heads_, kv_heads_, head_dim_,
                       c, &peak, *backend_);
    merge_replica_scores(group(), peak, kv_heads_, c.gqa);
    // A context repeated in pieces is scored once per piece: each key keeps its largest score.
    std::vector<float>& kept = scores_[layer];
    if (kept.size() == peak.size()) {
      for (size_t i = 0; i < peak.size(); ++i) kept[i] = std::max(kept[i], peak[i]);
    } else {
      kept = std::move(peak);
    }
    budget_scores_[layer].clear();
    return;
  }
  std::vector<float> weights;
  if (c.scoring == Scoring::kOutputAware) {
    if (!v) throw std::logic_error("output-aware scoring needs the values of the scored keys");
    if (!projection_) projection_ = model::find_output_projection(*backend_, model_);
    weights = value_output_norms(*backend_, v, v_stride, n_keys, q_heads_, kv_heads_, head_dim_,
                                 projection_->grams(layer));
  }
  // A recording serves every policy's copy, so it scores the peak whenever the config asks.
  const bool peak = c.budget_scores == BudgetScores::kPeak &&
                    (record_ || c.policy == Policy::kAdaKV || c.policy == Policy::kAdaPyramid);
  scores_[layer] = score_observations(
      q_obs, q_stride, k, k_stride, n_keys, n_obs, q_heads_, kv_heads_, head_dim_, c,
      peak ? &budget_scores_[layer] : nullptr, *backend_, weights.empty() ? nullptr : &weights);
  merge_replica_scores(group(), scores_[layer], kv_heads_, c.gqa);
  if (peak) merge_replica_scores(group(), budget_scores_[layer], kv_heads_, c.gqa);
}

void Compressor::score_piece(size_t layer, const float* q_obs, size_t q_stride, const float* k,
                             size_t n_keys, size_t n_obs, const RepeatPiece& piece) {
  const CompressionConfig& c = config();
  const size_t n = piece.context, W = c.window;
  if (n_keys <= n || n_keys - n > n_obs || n <= W) {
    throw std::logic_error("score_piece: the observed rows must end with a repeat of the context");
  }
  const size_t steps = n_keys - n;
  const size_t begin = std::min(piece.span.begin, n), end = std::min(piece.span.end, n);
  const size_t sink = std::min(kReconstructSink, begin), span = end - begin;
  if (sink + span == 0) return;
  // The keys the piece's queries are normalised over, gathered in one dense buffer: sink,
  // span, then the repeat's own (last, so that the kernel's causal mask holds for them).
  const size_t width = kv_heads_ * head_dim_, row_bytes = width * sizeof(float);
  const size_t m = sink + span + steps;
  const kernels::Buffer keys = backend_->allocate(m * row_bytes);
  auto* dst = static_cast<uint8_t*>(keys.data());
  auto gather = [&](size_t from, size_t rows) {
    if (rows > 0) backend_->copy(dst, k + from * width, rows * row_bytes);
    dst += rows * row_bytes;
  };
  gather(0, sink);
  gather(begin, span);
  gather(n, steps);
  // The sink's attention stays out of its new neighbours' pooling.
  CompressionConfig local = c;
  if (sink > 0) local.pool_sink = sink;
  std::vector<float> peak;
  score_observations(q_obs + (n_obs - steps) * q_stride, q_stride, keys.as<float>(), width, m,
                     steps, q_heads_, kv_heads_, head_dim_, local, &peak, *backend_);
  merge_replica_scores(group(), peak, kv_heads_, c.gqa);
  // Into the layer's [Hkv][n - W] scores (the window is kept anyway).
  const size_t prefix = n - W, scored = sink + span;
  std::vector<float>& kept = scores_[layer];
  if (kept.size() != kv_heads_ * prefix) kept.assign(kv_heads_ * prefix, 0.0f);
  for (size_t h = 0; h < kv_heads_; ++h) {
    float* out = kept.data() + h * prefix;
    const float* in = peak.data() + h * scored;
    for (size_t j = 0; j < sink && j < prefix; ++j) out[j] = std::max(out[j], in[j]);
    for (size_t j = begin; j < std::min(end, prefix); ++j) {
      out[j] = std::max(out[j], in[sink + j - begin]);
    }
  }
  budget_scores_[layer].clear();
}

void Compressor::observe(size_t layer, const float* q, size_t q_stride, size_t rows) {
  Observed& observed = observed_q_[layer];
  const size_t row_bytes = q_heads_ * head_dim_ * sizeof(float);
  if (observed.q.bytes() < (observed.rows + rows) * row_bytes) {
    // Room for the window and the look-ahead rows that follow it, one at a time.
    const size_t capacity = std::max(2 * observed.rows, observed.rows + rows + 16);
    kernels::Buffer grown = backend_->allocate(capacity * row_bytes);
    if (observed.rows > 0)
      backend_->copy(grown.data(), observed.q.data(), observed.rows * row_bytes);
    observed.q = std::move(grown);
  }
  auto* dst = static_cast<uint8_t*>(observed.q.data()) + observed.rows * row_bytes;
  for (size_t i = 0; i < rows; ++i)
    backend_->copy(dst + i * row_bytes, q + i * q_stride, row_bytes);
  observed.rows += rows;
}

void Compressor::score_lookahead(size_t n_keys, const std::function<kernels::Buffer(size_t)>& keys,
                                 bool keep_window, const RepeatPiece* piece) {
  const size_t q_width = q_heads_ * head_dim_;
  for (size_t l = 0; l < observed_q_.size(); ++l) {
    Observed& observed = observed_q_[l];
    if (observed.rows == 0) continue;  // a prompt no longer than the window: nothing to score
    const kernels::Buffer k = keys(l);
    if (piece && config().scoring == Scoring::kReconstruct) {
      score_piece(l, observed.q.as<float>(), q_width, k.as<float>(), n_keys, observed.rows, *piece);
    } else {
      score(l, observed.q.as<float>(), q_width, k.as<float>(), kv_heads_ * head_dim_, n_keys,
            observed.rows);
    }
    if (keep_window) observed.rows = std::min(observed.rows, config().window);
  }
  if (!keep_window) observed_q_.clear();
}

std::vector<std::vector<uint32_t>> Compressor::take_layer(size_t layer, size_t n,
                                                          CompressionReport& report) {
  auto positions = selector_.layer_positions(layer, n, scores_or_null(scores_, layer),
                                             scores_or_null(budget_scores_, layer), report);
  scores_[layer].clear();
  budget_scores_[layer].clear();
  return positions;
}

std::vector<std::vector<std::vector<uint32_t>>> Compressor::take_global(size_t n,
                                                                        CompressionReport& report) {
  auto positions = selector_.global_positions(n, scores_, budget_scores_, report);
  for (size_t l = 0; l < n_layers_; ++l) {
    scores_[l].clear();
    budget_scores_[l].clear();
  }
  return positions;
}

std::vector<std::vector<std::vector<uint32_t>>> Compressor::select_from(
    const Compressor& recording, size_t n, CompressionReport& report) const {
  if (selector_.selects_globally(n)) {
    return selector_.global_positions(n, recording.scores_, recording.budget_scores_, report);
  }
  std::vector<std::vector<std::vector<uint32_t>>> positions(n_layers_);
  for (size_t l = 0; l < n_layers_; ++l) {
    if (!group().holds(l)) {
      positions[l].resize(kv_heads_);
      continue;
    }
    positions[l] = selector_.layer_positions(l, n, scores_or_null(recording.scores_, l),
                                             scores_or_null(recording.budget_scores_, l), report);
  }
  return positions;
}

}  // namespace adakv::compression

// The compression policy of one sequence's KV cache (the cache itself only stores rows): it
// scores each layer's prompt positions by the attention of the observation window's queries,
// or of the window's and the look-ahead tokens' queries, holds those scores until the cache
// compacts, and then says which positions each head keeps (HeadSelector). It never reads the
// KV blocks: the cache hands it queries and keys and applies the positions it returns.
//
// Shapes (Hq = model.n_heads, Hkv = model.n_kv_heads: this cache's heads, Dh = model.head_dim):
//   queries:   [rows][Hq][Dh] with a row stride;   keys: [n_keys][Hkv][Dh] with a row stride;
//   scores():  [layer] -> [Hkv][prefix] (prefix = scored prompt positions), empty where a layer
//              was not scored;
//   positions: [kv head] -> ascending prompt positions (one layer), or [layer][kv head].
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "kernels/backend.h"
#include "model/config.h"
#include "model/output_projection.h"
#include "runtime/compression/config.h"
#include "runtime/compression/head_group.h"
#include "runtime/compression/head_selector.h"
#include "runtime/compression/reconstruction.h"
#include "runtime/compression/report.h"

namespace adakv::compression {

// A piece of a context repeated for reconstruct scoring, scored over its own span
// (ReconstructKeys::kPiece): the repeat's rows follow the context's `context` tokens.
struct RepeatPiece {
  size_t context = 0;
  PieceSpan span;
};

class Compressor {
 public:
  // `model` gives this cache's heads (a tensor-parallel rank's local config); `config` must
  // pass CompressionConfig::validate() and HeadSelector::check_scope() (the cache checks). A
  // recording compressor (record) scores every prompt longer than the window, whatever the
  // policy, keeps the scores for copies under other policies, scores the peak whenever the
  // config asks, and waits for look-ahead whenever config.lookahead > 0.
  // Scoring runs on `backend` (outliving the compressor).
  Compressor(const model::ModelConfig& model, const CompressionConfig& config, HeadGroup group,
             bool record, kernels::Backend& backend);

  const CompressionConfig& config() const { return selector_.config(); }
  const HeadGroup& group() const { return selector_.group(); }
  bool records() const { return record_; }
  // See HeadSelector.
  bool evicts(size_t n) const { return selector_.evicts(n); }
  // True when a prefill of n prompt tokens is scored: evicted under a policy that ranks tokens
  // (all but streaming), or recorded.
  bool scores_prompt(size_t n) const;

  // A new prompt: empty scores for every layer and, when scoring waits for look-ahead
  // (recording: config.lookahead > 0; otherwise `defer`), empty query lists.
  void start_prompt(bool defer);

  // Scores `layer` from n_obs observed queries (positions n_keys - n_obs .. n_keys - 1) over
  // n_keys keys (compression::score_observations), replacing its scores; merges replicas.
  // Queries, keys and values ([n_keys][Hkv][Dh], row stride v_stride) are backend memory; the
  // scores come back to the host. Output-aware scoring requires the values (else
  // std::logic_error); window scoring does not read them.
  void score(size_t layer, const float* q_obs, size_t q_stride, const float* k, size_t k_stride,
             size_t n_keys, size_t n_obs, const float* v = nullptr, size_t v_stride = 0);

  // True from a deferring start_prompt() until score_lookahead().
  bool awaiting_lookahead() const { return !observed_q_.empty(); }
  // Appends `rows` query rows of `layer` (the window's, then one per look-ahead token), copied
  // within the backend.
  void observe(size_t layer, const float* q, size_t q_stride, size_t rows);
  // Scores every layer that observed queries from them, over the first n_keys keys that
  // keys(layer) returns ([n_keys][Hkv][Dh], dense, backend memory), then drops the queries;
  // with keep_window, all but the window's (a piece of a repeated context was scored, the next
  // piece follows: reconstruct scores keep each key's largest over the pieces). With `piece`
  // (reconstruct scoring), only the repeat's queries score, over the piece's keys alone.
  void score_lookahead(size_t n_keys, const std::function<kernels::Buffer(size_t)>& keys,
                       bool keep_window = false, const RepeatPiece* piece = nullptr);

  const std::vector<std::vector<float>>& scores() const { return scores_; }

  // Positions each head of `layer` keeps of an n-token prompt, from the layer's scores, which
  // are then dropped. Records budgets into `report` (HeadSelector::layer_positions).
  std::vector<std::vector<uint32_t>> take_layer(size_t layer, size_t n, CompressionReport& report);
  // Requires selects_globally(n) (scope global and evicts(n)): [layer][kv head] positions
  // from one allocation over every layer's scores, which are then dropped.
  std::vector<std::vector<std::vector<uint32_t>>> take_global(size_t n, CompressionReport& report);
  // What this compressor's policy keeps, [layer][kv head], of the n-token prompt that
  // `recording` scored (same scoring config); the recording's scores stay.
  std::vector<std::vector<std::vector<uint32_t>>> select_from(const Compressor& recording, size_t n,
                                                              CompressionReport& report) const;

 private:
  // Reconstruct scores of `layer` from a piece's queries (the last n_keys - piece.context of
  // the n_obs observed) normalised over the attention sink, the piece's span and the repeat's
  // own keys (k: [n_keys][Hkv][Dh], dense); each key of the span (and the sink) keeps its
  // largest score.
  void score_piece(size_t layer, const float* q_obs, size_t q_stride, const float* k, size_t n_keys,
                   size_t n_obs, const RepeatPiece& piece);

  size_t n_layers_, q_heads_, kv_heads_, head_dim_;
  model::ModelConfig model_;  // this cache's heads: finds the output projection
  kernels::Backend* backend_;
  // The model's W_o Grams, found on the first output-aware score.
  std::shared_ptr<const model::OutputProjection> projection_;
  bool record_;
  HeadSelector selector_;
  // [layer][kv head][prefix]: recorded scores, or those waiting for compaction.
  std::vector<std::vector<float>> scores_;
  // Like scores_, with budget_scores = peak: what Ada-KV's allocation reads (else empty).
  std::vector<std::vector<float>> budget_scores_;
  // While awaiting look-ahead, per layer: [rows][Hq * Dh] in backend memory, the window's
  // queries then one row per look-ahead token (no rows for prompts <= window).
  struct Observed {
    kernels::Buffer q;
    size_t rows = 0;
  };
  std::vector<Observed> observed_q_;
};

}  // namespace adakv::compression

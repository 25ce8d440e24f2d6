// What the forward pass needs from the KV caches of its sequences. The runtime owns the
// storage (contiguous or head-paged with Ada-KV compaction); the model only appends and attends.
#pragma once

#include <algorithm>
#include <cstddef>

namespace adakv::model {

class KvCache {
 public:
  virtual ~KvCache() = default;

  // Position of the next token (prompt length + tokens generated so far).
  virtual size_t next_position() const = 0;

  // Stores n new tokens' keys (after RoPE) and values for `layer`, then writes the causal
  // attention of their n queries over everything this layer holds.
  //   q:   [n][n_heads][head_dim]      (row stride q_stride floats)
  //   k,v: [n][n_kv_heads][head_dim]   (row stride kv_stride floats)
  //   out: [n][n_heads][head_dim]      (contiguous)
  // Throws std::length_error when the cache cannot hold n more tokens.
  virtual void append_and_attend(size_t layer, const float* q, size_t q_stride, const float* k,
                                 const float* v, size_t kv_stride, size_t n, float* out) = 0;

  // Called once all layers took the n tokens: advances next_position() by n.
  virtual void commit(size_t n) = 0;
};

// The sequences of one ragged forward: sequence s contributes tokens(s) consecutive rows of the
// packed activation [sum of tokens][...], in order. One forward reads the weights once for all.
class KvBatch {
 public:
  virtual ~KvBatch() = default;
  virtual size_t size() const = 0;
  virtual size_t tokens(size_t s) const = 0;         // >= 1
  virtual size_t next_position(size_t s) const = 0;  // position of sequence s's first new row
  // How many of sequence s's last rows the forward writes logits for: 0, 1 (the next token's
  // distribution) or up to tokens(s) (a known text being scored). Logit rows of a sequence that
  // asks for several take the float32 GEMM, a single row the decode row dots.
  virtual size_t logit_rows(size_t s) const = 0;
  // Whether sequence s's rows are prompt rows (known text, taken in parallel: the float32 GEMM)
  // rather than decode rows (sampled tokens, replayed or looked ahead: the decode row dots). A
  // row's numerics follow its role, never the batch's shape. Default: several rows at once are a
  // prompt (or a text being scored), a single row a decode.
  virtual bool is_prompt(size_t s) const { return tokens(s) > 1; }
  // Layers [layer_begin(s), layer_end(s)) of sequence s run in this forward (default: all; an
  // end past the last layer means the last). A prompt prefilled layer by layer over several
  // forwards runs one range per forward; its residual stream lives in residual(s)
  // ([tokens(s)][d_model], kept by the caller between forwards), which the forward embeds into
  // when layer_begin(s) == 0 and updates in place. Only the batch's last sequence may run a range
  // short of all layers.
  virtual size_t layer_begin(size_t) const { return 0; }
  virtual size_t layer_end(size_t) const { return static_cast<size_t>(-1); }
  virtual float* residual(size_t) { return nullptr; }
  // Stores every sequence's new K/V rows of `layer` and writes their attention outputs; the
  // arguments are KvCache::append_and_attend's over the packed rows of the whole batch, with
  // out's row stride out_stride floats. A sequence whose layer range leaves out `layer` is
  // skipped (its rows are not read).
  virtual void append_and_attend(size_t layer, const float* q, size_t q_stride, const float* k,
                                 const float* v, size_t kv_stride, float* out,
                                 size_t out_stride) = 0;
  // Called after the forward: every sequence whose range reached the last layer took its rows.
  virtual void commit() = 0;
};

// A KvBatch over plain caches: each appends and attends on its own.
class CacheBatch : public KvBatch {
 public:
  // caches[s] takes counts[s] rows (the arrays outlive the batch) and asks for the logits of
  // its last min(n_logits, counts[s]) rows.
  CacheBatch(KvCache* const* caches, const size_t* counts, size_t n, size_t n_logits = 1)
      : caches_(caches), counts_(counts), n_(n), n_logits_(n_logits) {}
  size_t size() const override { return n_; }
  size_t tokens(size_t s) const override { return counts_[s]; }
  size_t next_position(size_t s) const override { return caches_[s]->next_position(); }
  size_t logit_rows(size_t s) const override { return std::min(n_logits_, counts_[s]); }
  void append_and_attend(size_t layer, const float* q, size_t q_stride, const float* k,
                         const float* v, size_t kv_stride, float* out, size_t out_stride) override;
  void commit() override;

 private:
  KvCache* const* caches_;
  const size_t* counts_;
  size_t n_;
  size_t n_logits_;
};

}  // namespace adakv::model

#include "model/llama.h"

#include <algorithm>
#include <cmath>
#include <span>
#include <stdexcept>
#include <string>

#include "kernels/ops.h"
#include "model/gguf/dequant.h"
#include "model/gguf/gguf.h"
#include "model/model_file.h"

namespace adakv::model {

namespace k = adakv::kernels;

LlamaModel::LlamaModel(ModelConfig config, Weights weights, ShardLayout shard,
                       comm::DeviceGroup* tp, kernels::Backend& backend, PipelineStage stage)
    : config_(std::move(config)),
      local_(shard.local(config_)),
      shard_(shard),
      stage_(stage),
      weights_(std::move(weights)),
      tp_(tp && tp->size() > 1 ? tp : nullptr),
      backend_(&backend),
      rope_(kernels::rope_frequencies(config_.rope_theta, config_.rope_dim, config_.rope_scaling)),
      workspace_(backend) {
  if (shard_.tp_size > 1 &&
      (!tp_ || size_t(tp_->size()) != shard_.tp_size || size_t(tp_->rank()) != shard_.tp_rank)) {
    throw std::invalid_argument(
        "LlamaModel: the shard's tensor-parallel rank and size must be "
        "those of the communicator");
  }
  if (stage_.end(config_.n_layers) > config_.n_layers ||
      stage_.layer_begin >= stage_.end(config_.n_layers) || (stage_.count > 1 && !stage_.channel)) {
    throw std::invalid_argument(
        "LlamaModel: pipeline stage " + std::to_string(stage_.index) + " of " +
        std::to_string(stage_.count) + " has layers [" + std::to_string(stage_.layer_begin) + ", " +
        std::to_string(stage_.end(config_.n_layers)) + ") of " + std::to_string(config_.n_layers) +
        (stage_.channel ? "" : " and no channel"));
  }
  weights_.upload(*backend_);
  output_projection_ = std::make_shared<const OutputProjection>(local_, weights_, *backend_);
  publish_output_projection(output_projection_);
}

LlamaModel LlamaModel::load(const std::string& path, kernels::Backend& backend) {
  auto file = open_model_file(path, ModelParts::kWeights);
  auto config = ModelConfig::from_gguf(*file);
  auto shard = ShardLayout::single(config);
  auto weights = Weights::load(file, config, shard, backend);
  return LlamaModel(std::move(config), std::move(weights), shard, nullptr, backend);
}

bool LlamaModel::computes_logits() const {
  return stage_.last() && (shard_.tp_rank == 0 || shard_.lm_head == LmHeadMode::kVocabParallel);
}

Logits LlamaModel::forward(const int32_t* tokens, size_t n, KvCache& cache, size_t n_logits) const {
  if (n == 0 || n_logits == 0 || n_logits > n) {
    throw std::invalid_argument("forward: need 1 <= n_logits <= n tokens");
  }
  KvCache* const caches[] = {&cache};
  CacheBatch batch(caches, &n, 1, n_logits);
  return run(tokens, n, batch);
}

Logits LlamaModel::forward_batch(const int32_t* tokens, KvCache* const* caches, size_t B) const {
  if (B == 0) throw std::invalid_argument("forward_batch: no sequence");
  const std::vector<size_t> ones(B, 1);
  CacheBatch batch(caches, ones.data(), B);
  return run(tokens, B, batch);
}

Logits LlamaModel::forward_ragged(const int32_t* tokens, KvBatch& batch) const {
  if (batch.size() == 0) throw std::invalid_argument("forward_ragged: no sequence");
  size_t n = 0;
  for (size_t s = 0; s < batch.size(); ++s) n += batch.tokens(s);
  return run(tokens, n, batch);
}

void LlamaModel::download_logits(const Logits& logits, size_t first, size_t count,
                                 float* dst) const {
  if (first + count > logits.rows) {
    throw std::out_of_range("download_logits: rows [" + std::to_string(first) + ", " +
                            std::to_string(first + count) + ") of " + std::to_string(logits.rows));
  }
  if (count == 0) return;
  backend_->download(dst, logits.data + first * logits.vocab, count * logits.vocab * sizeof(float));
}

std::vector<float> LlamaModel::logits_to_host(const Logits& logits) const {
  std::vector<float> host(logits.rows * logits.vocab);
  download_logits(logits, 0, logits.rows, host.data());
  return host;
}

namespace {

// Consecutive activation rows that take one kernel path (kernels/quant.h), chosen by the rows'
// role (KvBatch::is_prompt): decode rows take the decode row dots (int16 activations by default,
// float32 when asked: decode_dots_path), a prompt chunk the float32 GEMM, one GEMM per chunk
// (`groups`), whose
// products stay those of the dequantized model (as the oracle computes them) up to float32
// rounding. The choice depends only on the sequence's own rows, so a sequence computes the same
// numbers alone or in any batch.
struct RowRun {
  size_t begin, count;
  k::MatmulPath path;
  std::vector<uint32_t> groups;  // the GEMM's row groups: one per prompt chunk
};

// The runs of sequences [s_begin, s_end) of `batch`, whose rows start at packed row row_begin.
std::vector<RowRun> row_runs(const KvBatch& batch, size_t s_begin, size_t s_end, size_t row_begin,
                             k::MatmulPath decode_path) {
  std::vector<RowRun> runs;
  for (size_t s = s_begin, row = row_begin; s < s_end; ++s) {
    const size_t count = batch.tokens(s);
    const auto path = batch.is_prompt(s) ? k::MatmulPath::kFloatGemm : decode_path;
    if (runs.empty() || runs.back().path != path) runs.push_back({row, 0, path, {}});
    runs.back().count += count;
    if (path == k::MatmulPath::kFloatGemm) {
      runs.back().groups.push_back(static_cast<uint32_t>(count));
    }
    row += count;
  }
  return runs;
}

// y[rows][ldy] (+)= x[rows][w.in_features()] W^T, each run on its path.
void apply(k::Backend& backend, const Linear& w, const std::vector<RowRun>& runs, const float* x,
           float* y, size_t ldy, bool accumulate = false) {
  for (const RowRun& r : runs) {
    k::MatmulOptions options{ldy, accumulate, r.path};
    if (r.groups.size() > 1) {
      options.row_groups = r.groups.data();
      options.n_row_groups = r.groups.size();
    }
    w.forward(backend, y + r.begin * ldy, x + r.begin * w.in_features(), r.count, options);
  }
}

// A slice of the rows that the row-wise parts of a layer (the norms, projections and the
// feed-forward block) run at once, with its runs (row numbers relative to the slice's first row).
struct RowSlice {
  size_t begin, count;
  std::vector<RowRun> runs;
};

// `runs` cut into slices of at most max_rows rows, so that the per-slice buffers stay bounded
// however long a prompt is. Slices take whole GEMM groups where they fit; a group
// longer than max_rows is cut every max_rows rows from its own first row, so where a prompt is
// cut never depends on its batch. Decode rows are independent and cut anywhere.
std::vector<RowSlice> row_slices(const std::vector<RowRun>& runs, size_t max_rows) {
  struct Piece {
    size_t begin, count;
    k::MatmulPath path;
  };
  std::vector<Piece> pieces;
  for (const RowRun& r : runs) {
    if (r.path != k::MatmulPath::kFloatGemm) {
      for (size_t i = 0; i < r.count; i += max_rows) {
        pieces.push_back({r.begin + i, std::min(max_rows, r.count - i), r.path});
      }
      continue;
    }
    size_t row = r.begin;
    for (const uint32_t g : r.groups) {
      for (size_t i = 0; i < g; i += max_rows) {
        pieces.push_back({row + i, std::min<size_t>(max_rows, g - i), r.path});
      }
      row += g;
    }
  }
  std::vector<RowSlice> slices;
  for (const Piece& p : pieces) {
    if (slices.empty() || slices.back().count + p.count > max_rows) {
      slices.push_back({p.begin, 0, {}});
    }
    RowSlice& s = slices.back();
    const size_t rel = p.begin - s.begin;
    if (s.runs.empty() || s.runs.back().path != p.path) s.runs.push_back({rel, 0, p.path, {}});
    s.runs.back().count += p.count;
    if (p.path == k::MatmulPath::kFloatGemm) {
      s.runs.back().groups.push_back(static_cast<uint32_t>(p.count));
    }
    s.count += p.count;
  }
  return slices;
}

// Rows of a slice: its buffers (h [rows][D], gate_up [rows][2F], act [rows][F], F the ffn
// columns of one rank) within `bytes` (Backend::slice_bytes). The same on every rank, whose
// collectives go slice by slice.
size_t slice_rows(size_t d_model, size_t ffn_dim, size_t tp_size, size_t bytes) {
  const size_t local_ffn = (ffn_dim + tp_size - 1) / tp_size;
  const size_t row_bytes = (d_model + 3 * local_ffn) * sizeof(float);
  return std::max<size_t>(64, bytes / row_bytes / 64 * 64);
}

}  // namespace

// Workspace slots of a forward.
enum Slot : size_t {
  kX,
  kH,
  kQkv,
  kAttn,
  kGateUp,
  kAct,
  kLogitsLocal,
  kGathered,
  kLogits,
  kTokens,
  kPositions
};

Logits LlamaModel::run(const int32_t* host_tokens, size_t n, KvBatch& batch) const {
  const auto& c = local_;
  const size_t D = c.d_model, F = c.ffn_dim, QW = c.q_width(), KW = c.kv_width();
  const size_t qkv_width = QW + 2 * KW;
  // A sequence that runs only layers [tail_begin, tail_end) is the batch's last: its `tail`
  // rows end the packing, so every layer runs on a prefix of the rows (all, or all but those).
  const size_t S = batch.size(), L = c.n_layers;
  size_t tail = 0, tail_begin = 0, tail_end = L;
  for (size_t s = 0; s < S; ++s) {
    const size_t b = batch.layer_begin(s), e = std::min(batch.layer_end(s), L);
    if (b == 0 && e == L) continue;
    if (s + 1 != S || b >= e) {
      throw std::invalid_argument("forward: sequence " + std::to_string(s) + " of " +
                                  std::to_string(S) + " runs layers [" + std::to_string(b) + ", " +
                                  std::to_string(e) +
                                  "); only the last may run a part of the layers");
    }
    tail = batch.tokens(s);
    tail_begin = b;
    tail_end = e;
  }
  float* tail_x = tail > 0 ? batch.residual(S - 1) : nullptr;
  if (tail > 0 && tail_x == nullptr) {
    throw std::invalid_argument("forward: a sequence runs a part of the layers without a residual");
  }
  const size_t head_rows = n - tail;
  const size_t max_rows =
      slice_rows(config_.d_model, config_.ffn_dim, shard_.tp_size, backend_->slice_bytes());
  // Activations, token-major: the residual stream x [n][D], whose head rows live in the
  // workspace and whose tail rows are the tail sequence's own residual, updated in place (a long
  // prompt's stream is held once); qkv [n][QW | KW | KW] and attn [n][QW] for attention; per
  // slice of r <= max_rows rows, h [r][D] (the norms' output, then under tensor parallelism the
  // rank's share of a RowParallel output), gate_up [r][2F] and act [r][F].
  k::Workspace& ws = workspace_;
  float* x = ws.floats(kX, head_rows * D);
  const auto x_row = [&](size_t t) {
    return t < head_rows ? x + t * D : tail_x + (t - head_rows) * D;
  };
  float* h = ws.floats(kH, std::min(n, max_rows) * D);
  float* qkv = ws.floats(kQkv, n * qkv_width);
  float* attn = ws.floats(kAttn, n * QW);
  float* gate_up = ws.floats(kGateUp, std::min(n, max_rows) * 2 * F);
  float* act = ws.floats(kAct, std::min(n, max_rows) * F);
  k::Backend& be = *backend_;
  // Slices never straddle the head and the tail, so each slice's rows are contiguous; the head's
  // slices come first, and a layer that leaves the tail out runs only those.
  const size_t head_seqs = tail > 0 ? S - 1 : S;
  std::vector<RowSlice> slices =
      row_slices(row_runs(batch, 0, head_seqs, 0, be.decode_path()), max_rows);
  const size_t n_head_slices = slices.size();
  if (tail > 0) {
    for (RowSlice& sl :
         row_slices(row_runs(batch, S - 1, S, head_rows, be.decode_path()), max_rows)) {
      slices.push_back(std::move(sl));
    }
  }
  // Positions of the packed rows, and the rows whose logits are wanted (none for a sequence
  // whose range stops before the last layer) with the path of each run of them: the float32
  // GEMM for a sequence that scores several rows, else the decode row dots, so that a
  // sequence's logits do not depend on its batch.
  std::vector<int32_t> host_positions(n);
  std::vector<size_t> logit_rows;
  std::vector<std::pair<size_t, k::MatmulPath>> logit_runs;  // (rows, path), in row order
  for (size_t s = 0, t = 0; s < S; ++s) {
    const size_t count = batch.tokens(s), p0 = batch.next_position(s);
    for (size_t i = 0; i < count; ++i) host_positions[t + i] = static_cast<int32_t>(p0 + i);
    t += count;
    const size_t wanted = std::min(batch.logit_rows(s), count);
    if (wanted == 0 || (s + 1 == S && tail_end != L)) continue;
    for (size_t r = t - wanted; r < t; ++r) logit_rows.push_back(r);
    const auto path = wanted > 1 ? k::MatmulPath::kFloatGemm : be.decode_path();
    if (logit_runs.empty() || logit_runs.back().second != path) logit_runs.push_back({0, path});
    logit_runs.back().first += wanted;
  }
  int32_t* tokens = ws.ints(kTokens, n);
  int32_t* positions = ws.ints(kPositions, n);
  be.upload(tokens, host_tokens, n * sizeof(int32_t));
  be.upload(positions, host_positions.data(), n * sizeof(int32_t));

  // The token embedding of the head rows, and of the tail's when it starts at the first layer.
  const auto embed = [&](float* out, const int32_t* ids, size_t count) {
    if (count == 0) return;
    if (shard_.vocab_rows < config_.vocab_size) {
      // Vocab-parallel embedding: each rank looks up the tokens of its own rows (zeros for the
      // rest) and the sum joins them; one nonzero term per element, so the sum is exact.
      be.embed_shard_rows(out, weights_.token_embd.weights(), weights_.token_embd.format(),
                          weights_.token_embd.layout(), ids, count, shard_.vocab_begin,
                          shard_.vocab_rows, config_.vocab_size, D);
      tp_->all_reduce(out, count * D);
    } else {
      be.embed_rows(out, weights_.token_embd.weights(), weights_.token_embd.format(),
                    weights_.token_embd.layout(), ids, count, config_.vocab_size, D);
    }
  };
  // Pipeline stages. Every sequence but the tail runs every layer, so its rows cross every
  // stage. The tail's residual goes with it through the stages its range [tail_begin, tail_end)
  // touches and stays, after the step, on the stage that holds its next layer: a stage takes
  // part when tail_begin < its end and tail_end >= its begin, receives when the range began on
  // an earlier stage, and sends when the range reaches its end (the next stage then keeps the
  // residual even if it runs none of its layers in this step).
  const size_t stage_begin = stage_.layer_begin, stage_end = stage_.end(L);
  const bool tail_here = tail > 0 && tail_begin < stage_end && tail_end >= stage_begin;
  const bool tail_in = tail_here && !stage_.first() && tail_begin < stage_begin;
  const bool tail_out = tail_here && !stage_.last() && tail_end >= stage_end;
  if (stage_.first()) {
    embed(x, tokens, head_rows);
    if (tail > 0 && tail_begin == 0) embed(tail_x, tokens + head_rows, tail);
  } else {
    stage_.channel->recv_prev(x, head_rows * D);
    if (tail_in) stage_.channel->recv_prev(tail_x, tail * D);
  }

  // x rows of slice `sl` += the slice's RowParallel output: accumulated in place on one rank,
  // else each rank's share in h, summed over the ranks.
  const auto add_row_parallel = [&](const Linear& w, const RowSlice& sl, const float* in) {
    float* xs = x_row(sl.begin);
    if (!tp_) {
      apply(be, w, sl.runs, in, xs, D, /*accumulate=*/true);
      return;
    }
    apply(be, w, sl.runs, in, h, D);
    tp_->all_reduce(h, sl.count * D);
    be.add(xs, xs, h, sl.count * D);
  };

  for (size_t l = stage_begin; l < stage_end; ++l) {
    const auto& w = weights_.layers[l];
    const bool all = tail == 0 || (l >= tail_begin && l < tail_end);
    const size_t m = all ? n : head_rows;  // the rows this layer runs
    if (m == 0) continue;
    const std::span<const RowSlice> layer_slices(slices.data(),
                                                 all ? slices.size() : n_head_slices);
    float* q = qkv;
    float* kk = q + QW;
    float* v = kk + KW;
    for (const RowSlice& sl : layer_slices) {
      be.rmsnorm(h, x_row(sl.begin), w.attn_norm.data(), sl.count, D, c.rms_eps);
      const size_t offset = sl.begin * qkv_width;
      if (!w.wqkv.empty()) {
        apply(be, w.wqkv, sl.runs, h, q + offset, qkv_width);
      } else {
        apply(be, w.wq, sl.runs, h, q + offset, qkv_width);
        apply(be, w.wk, sl.runs, h, kk + offset, qkv_width);
        apply(be, w.wv, sl.runs, h, v + offset, qkv_width);
      }
    }
    if (w.qkv_bias.size() > 0) be.add_bias(qkv, w.qkv_bias.data(), m, qkv_width, qkv_width);
    // k's heads follow q's in each row: one pass rotates both.
    be.rope_adjacent(q, positions, m, c.n_heads + c.n_kv_heads, c.head_dim, qkv_width, rope_);
    batch.append_and_attend(l, q, qkv_width, kk, v, qkv_width, attn, QW);
    for (const RowSlice& sl : layer_slices) add_row_parallel(w.wo, sl, attn + sl.begin * QW);

    for (const RowSlice& sl : layer_slices) {
      be.rmsnorm(h, x_row(sl.begin), w.ffn_norm.data(), sl.count, D, c.rms_eps);
      if (!w.w_gate_up.empty()) {
        apply(be, w.w_gate_up, sl.runs, h, gate_up, 2 * F);
      } else {
        apply(be, w.w_gate, sl.runs, h, gate_up, 2 * F);
        apply(be, w.w_up, sl.runs, h, gate_up + F, 2 * F);
      }
      be.swiglu(act, gate_up, sl.count, F);
      add_row_parallel(w.w_down, sl, act);
    }
  }
  if (!stage_.last()) {
    stage_.channel->send_next(x, head_rows * D);
    if (tail_out) stage_.channel->send_next(tail_x, tail * D);
  }
  batch.commit();
  const size_t n_logits = logit_rows.size();
  if (!computes_logits() || n_logits == 0) return {};
  // The wanted rows, gathered (they are consecutive for one sequence: no copy then).
  h = ws.floats(kH, n_logits * D);
  const float* last = x_row(logit_rows.front());
  const bool one_segment = logit_rows.front() >= head_rows || logit_rows.back() < head_rows;
  if (logit_rows.back() - logit_rows.front() + 1 != n_logits || !one_segment) {
    for (size_t i = 0; i < n_logits; ++i) {
      be.copy(h + i * D, x_row(logit_rows[i]), D * sizeof(float));
    }
    last = h;
  }
  be.rmsnorm(h, last, weights_.output_norm.data(), n_logits, D, c.rms_eps);
  const size_t V = config_.vocab_size, rows = shard_.vocab_rows;
  // out[n_logits][width] = the LM head (or this rank's rows of it) on h, run by run.
  const auto lm_head = [&](float* out, size_t width) {
    for (size_t r = 0, row = 0; r < logit_runs.size(); row += logit_runs[r].first, ++r) {
      weights_.lm_head.forward(be, out + row * width, h + row * D, logit_runs[r].first,
                               {width, false, logit_runs[r].second});
    }
  };
  float* logits = ws.floats(kLogits, n_logits * V);
  const Logits result{logits, n_logits, V};
  if (shard_.lm_head == LmHeadMode::kReplicated) {
    lm_head(logits, V);
    return result;
  }
  // Vocab-parallel: each rank's [n_logits][V / tp] block, gathered rank-major, then
  // interleaved back to [n_logits][V].
  float* local = ws.floats(kLogitsLocal, n_logits * rows);
  float* gathered = ws.floats(kGathered, shard_.tp_size * n_logits * rows);
  lm_head(local, rows);
  tp_->all_gather(local, n_logits * rows, gathered);
  be.interleave_shards(logits, gathered, shard_.tp_size, n_logits, rows);
  return result;
}

void CacheBatch::append_and_attend(size_t layer, const float* q, size_t q_stride, const float* k,
                                   const float* v, size_t kv_stride, float* out,
                                   size_t out_stride) {
  for (size_t s = 0, row = 0; s < n_; row += counts_[s], ++s) {
    caches_[s]->append_and_attend(layer, q + row * q_stride, q_stride, k + row * kv_stride,
                                  v + row * kv_stride, kv_stride, counts_[s],
                                  out + row * out_stride);
  }
}

void CacheBatch::commit() {
  for (size_t s = 0; s < n_; ++s) caches_[s]->commit(counts_[s]);
}

}  // namespace adakv::model

#include "model/llama.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "kernels/ops.h"
#include "model/gguf/dequant.h"
#include "model/gguf/gguf.h"

namespace adakv::model {

namespace k = adakv::kernels;

LlamaModel::LlamaModel(ModelConfig config, Weights weights, ShardLayout shard,
                       comm::Communicator* tp)
    : config_(std::move(config)),
      local_(shard.local(config_)),
      shard_(shard),
      weights_(std::move(weights)),
      tp_(tp && tp->size() > 1 ? tp : nullptr) {
  if (shard_.tp_size > 1 &&
      (!tp_ || size_t(tp_->size()) != shard_.tp_size || size_t(tp_->rank()) != shard_.tp_rank)) {
    throw std::invalid_argument(
        "LlamaModel: the shard's tensor-parallel rank and size must be "
        "those of the communicator");
  }
}

LlamaModel::LlamaModel(ModelConfig config, Weights weights)
    : LlamaModel(config, std::move(weights), ShardLayout::single(config), nullptr) {}

LlamaModel LlamaModel::load(const std::string& path) {
  auto file = std::make_shared<const gguf::GgufFile>(gguf::GgufFile::open(path));
  auto config = ModelConfig::from_gguf(*file);
  auto weights = Weights::load(file, config, ShardLayout::single(config));
  return LlamaModel(std::move(config), std::move(weights));
}

bool LlamaModel::computes_logits() const {
  return shard_.tp_rank == 0 || shard_.lm_head == LmHeadMode::kVocabParallel;
}

void LlamaModel::add_row_parallel(float* x, float* partial, size_t count) const {
  tp_->all_reduce(partial, count);
  for (size_t i = 0; i < count; ++i) x[i] += partial[i];
}

void LlamaModel::forward(const int32_t* tokens, size_t n, KvCache& cache,
                         std::vector<float>& logits, size_t n_logits) const {
  if (n == 0 || n_logits == 0 || n_logits > n) {
    throw std::invalid_argument("forward: need 1 <= n_logits <= n tokens");
  }
  KvCache* const caches[] = {&cache};
  CacheBatch batch(caches, &n, 1);
  run(tokens, n, batch, logits, n_logits);
}

void LlamaModel::forward_batch(const int32_t* tokens, KvCache* const* caches, size_t B,
                               std::vector<float>& logits) const {
  if (B == 0) throw std::invalid_argument("forward_batch: no sequence");
  const std::vector<size_t> ones(B, 1);
  CacheBatch batch(caches, ones.data(), B);
  run(tokens, B, batch, logits, 1);
}

void LlamaModel::forward_ragged(const int32_t* tokens, KvBatch& batch,
                                std::vector<float>& logits) const {
  if (batch.size() == 0) throw std::invalid_argument("forward_ragged: no sequence");
  size_t n = 0;
  for (size_t s = 0; s < batch.size(); ++s) n += batch.tokens(s);
  run(tokens, n, batch, logits, 1);
}

namespace {

// Consecutive activation rows that take one kernel path (kernels/quant.h): a sequence's single
// decode row takes the float32 row dots, a prompt chunk the float32 GEMM; activations are never
// rounded to 8 bits, so the products stay those of the dequantized model (as the oracle
// computes them) up to float32 rounding. The choice depends only on
// the sequence's own rows, so a sequence computes the same numbers alone or in any batch.
struct RowRun {
  size_t begin, count;
  k::MatmulPath path;
};

std::vector<RowRun> row_runs(const KvBatch& batch) {
  std::vector<RowRun> runs;
  for (size_t s = 0, row = 0; s < batch.size(); ++s) {
    const size_t count = batch.tokens(s);
    const auto path = count == 1 ? k::MatmulPath::kFloatDots : k::MatmulPath::kFloatGemm;
    if (!runs.empty() && runs.back().path == path) {
      runs.back().count += count;
    } else {
      runs.push_back({row, count, path});
    }
    row += count;
  }
  return runs;
}

// y[rows][ldy] (+)= x[rows][w.in_features()] W^T, each run on its path.
void apply(const Linear& w, const std::vector<RowRun>& runs, const float* x, float* y, size_t ldy,
           bool accumulate = false) {
  for (const RowRun& r : runs) {
    w.forward(y + r.begin * ldy, x + r.begin * w.in_features(), r.count, {ldy, accumulate, r.path});
  }
}

}  // namespace

void LlamaModel::embed(const int32_t* tokens, size_t n, float* x) const {
  const size_t D = config_.d_model;
  const auto type = static_cast<gguf::GgmlType>(weights_.token_embd.format());
  for (size_t t = 0; t < n; ++t) {
    if (tokens[t] < 0 || static_cast<size_t>(tokens[t]) >= config_.vocab_size) {
      throw std::invalid_argument("embed: token id " + std::to_string(tokens[t]) +
                                  " is outside the vocabulary of " +
                                  std::to_string(config_.vocab_size));
    }
    gguf::dequantize(type, weights_.token_embd.row(static_cast<size_t>(tokens[t])), x + t * D, D);
  }
}

void LlamaModel::run(const int32_t* tokens, size_t n, KvBatch& batch, std::vector<float>& logits,
                     size_t n_logits) const {
  const auto& c = local_;
  const size_t D = c.d_model, F = c.ffn_dim, QW = c.q_width(), KW = c.kv_width();
  const size_t qkv_width = QW + 2 * KW;
  // Activations, token-major: x, h [n][D]; qkv [n][QW | KW | KW]; attn [n][QW];
  // gate_up [n][2F]; act [n][F].
  // With tensor parallelism, partial [n][D] takes the rank's share of a RowParallel output.
  std::vector<float> x(n * D), h(n * D), qkv(n * qkv_width), attn(n * QW), gate_up(n * 2 * F),
      act(n * F), partial(tp_ ? n * D : 0);
  // One rank: the RowParallel matmuls accumulate straight into x.
  float* row_out = tp_ ? partial.data() : x.data();
  const bool accumulate = tp_ == nullptr;
  const std::vector<RowRun> runs = row_runs(batch);
  // Positions of the packed rows, and the rows whose logits are wanted.
  std::vector<int32_t> positions(n);
  std::vector<size_t> logit_rows;
  for (size_t s = 0, t = 0; s < batch.size(); ++s) {
    const size_t count = batch.tokens(s), p0 = batch.next_position(s);
    for (size_t i = 0; i < count; ++i) positions[t + i] = static_cast<int32_t>(p0 + i);
    t += count;
    if (batch.size() > 1 && batch.wants_logits(s)) logit_rows.push_back(t - 1);
  }
  if (batch.size() == 1) {
    for (size_t t = n - n_logits; t < n; ++t) logit_rows.push_back(t);
  }

  embed(tokens, n, x.data());

  for (size_t l = 0; l < c.n_layers; ++l) {
    const auto& w = weights_.layers[l];
    k::check(k::rmsnorm(h.data(), x.data(), w.attn_norm.data(), n, D, c.rms_eps), "rmsnorm");
    float* q = qkv.data();
    float* kk = q + QW;
    float* v = kk + KW;
    apply(w.wq, runs, h.data(), q, qkv_width);
    apply(w.wk, runs, h.data(), kk, qkv_width);
    apply(w.wv, runs, h.data(), v, qkv_width);
    k::check(k::rope_adjacent(q, positions.data(), n, c.n_heads, c.head_dim, c.rope_dim, qkv_width,
                              c.rope_theta),
             "rope");
    k::check(k::rope_adjacent(kk, positions.data(), n, c.n_kv_heads, c.head_dim, c.rope_dim,
                              qkv_width, c.rope_theta),
             "rope");
    batch.append_and_attend(l, q, qkv_width, kk, v, qkv_width, attn.data(), QW);
    apply(w.wo, runs, attn.data(), row_out, D, accumulate);
    if (tp_) add_row_parallel(x.data(), partial.data(), n * D);

    k::check(k::rmsnorm(h.data(), x.data(), w.ffn_norm.data(), n, D, c.rms_eps), "rmsnorm");
    apply(w.w_gate, runs, h.data(), gate_up.data(), 2 * F);
    apply(w.w_up, runs, h.data(), gate_up.data() + F, 2 * F);
    k::check(k::swiglu(act.data(), gate_up.data(), n, F), "swiglu");
    apply(w.w_down, runs, act.data(), row_out, D, accumulate);
    if (tp_) add_row_parallel(x.data(), partial.data(), n * D);
  }
  batch.commit();
  if (!computes_logits()) {
    logits.clear();
    return;
  }
  n_logits = logit_rows.size();
  if (n_logits == 0) {
    logits.clear();
    return;
  }
  // The wanted rows, gathered (they are consecutive for one sequence: no copy then).
  const float* last = x.data() + logit_rows.front() * D;
  if (logit_rows.back() - logit_rows.front() + 1 != n_logits) {
    for (size_t i = 0; i < n_logits; ++i) {
      std::copy_n(x.data() + logit_rows[i] * D, D, h.data() + i * D);
    }
    last = h.data();
  }
  k::check(k::rmsnorm(h.data(), last, weights_.output_norm.data(), n_logits, D, c.rms_eps),
           "rmsnorm");
  // The float32 GEMM when one sequence asks for the logits of several rows (scoring a text),
  // else row dots: a sequence's logits do not depend on its batch.
  const k::MatmulPath lm_path =
      batch.size() == 1 && n_logits > 1 ? k::MatmulPath::kFloatGemm : k::MatmulPath::kFloatDots;
  const size_t V = config_.vocab_size, rows = shard_.vocab_rows;
  logits.resize(n_logits * V);
  if (shard_.lm_head == LmHeadMode::kReplicated) {
    weights_.lm_head.forward(logits.data(), h.data(), n_logits, {V, false, lm_path});
    return;
  }
  // Vocab-parallel: each rank's [n_logits][V / tp] block, gathered rank-major, then
  // interleaved back to [n_logits][V].
  std::vector<float> local(n_logits * rows), gathered(shard_.tp_size * n_logits * rows);
  weights_.lm_head.forward(local.data(), h.data(), n_logits, {rows, false, lm_path});
  tp_->all_gather(local.data(), local.size(), gathered.data());
  for (size_t r = 0; r < shard_.tp_size; ++r) {
    for (size_t t = 0; t < n_logits; ++t) {
      std::copy_n(&gathered[(r * n_logits + t) * rows], rows, &logits[t * V + r * rows]);
    }
  }
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

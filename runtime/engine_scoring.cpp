// The teacher-forced side of the engine: a known continuation or answer pushed through each
// policy's compressed cache and scored token by token (eval ppl; the answer likelihood of eval
// passkey / niah). Collective like the rest of the engine: every rank runs the forwards, rank 0
// computes the numbers.
#include <algorithm>
#include <chrono>
#include <cmath>

#include "runtime/engine.h"
#include "runtime/kv/block_pool.h"

namespace adakv::runtime {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// log_softmax of one row of logits, in double.
void log_softmax(const float* row, size_t n, std::vector<double>& out) {
  out.resize(n);
  const double max = *std::max_element(row, row + n);
  double sum = 0;
  for (size_t i = 0; i < n; ++i) sum += std::exp(double(row[i]) - max);
  const double log_sum = max + std::log(sum);
  for (size_t i = 0; i < n; ++i) out[i] = double(row[i]) - log_sum;
}

}  // namespace

std::vector<double> Engine::reference_nll(PagedKvCache& cache, const std::vector<int32_t>& tokens,
                                          const std::vector<float>& prefill_logits) const {
  const size_t vocab = model_.config().vocab_size, n = tokens.size();
  const std::vector<float> logits = host_logits(model_.forward(tokens.data(), n, cache, n));
  if (!is_root() || logits.empty()) return {};
  // Token 0 follows the prompt (the prefill's last row), token i the row of token i - 1.
  std::vector<double> nll(n), lp;
  for (size_t i = 0; i < n; ++i) {
    const float* row = i == 0 ? prefill_logits.data() + prefill_logits.size() - vocab
                              : logits.data() + (i - 1) * vocab;
    log_softmax(row, vocab, lp);
    nll[i] = -lp[size_t(tokens[i])];
  }
  return nll;
}

std::vector<ContinuationScore> Engine::run_score_continuation(
    const GenerateRequest& req, const std::vector<int32_t>& continuation,
    const std::vector<compression::CompressionConfig>& policies) const {
  const auto& cfg = model_.local_config();
  const size_t n_prompt = req.prompt.size(), C = continuation.size();
  const size_t vocab = model_.config().vocab_size;
  size_t steps = 0;
  for (const auto& p : policies) steps = std::max(steps, lookahead_steps(p, n_prompt));
  // The recording cache, every policy's copy, and the continuation in each.
  BlockPool pool = make_pool(req, std::max(C, steps), policies.size() + 1);
  PagedKvCache source(pool, cfg, policies.front(), head_group(), /*record_scores=*/true);

  const auto t0 = std::chrono::steady_clock::now();
  look_ahead(source, host_logits(model_.forward(req.prompt.data(), n_prompt, source)), steps);
  const double prefill_s = seconds_since(t0);

  std::vector<std::unique_ptr<PagedKvCache>> copies;
  std::vector<size_t> kept_bytes, full_bytes;
  for (const auto& p : policies) {
    copies.push_back(source.compressed_copy(p));
    kept_bytes.push_back(copies.back()->held_bytes());
    full_bytes.push_back(copies.back()->full_bytes());
  }
  if (tp_size() > 1) {
    // Every rank's bytes, summed.
    std::vector<int64_t> bytes;
    for (const auto* v : {&kept_bytes, &full_bytes}) {
      for (size_t b : *v) bytes.push_back(static_cast<int64_t>(b));
    }
    control_.comm().all_reduce(bytes.data(), bytes.size());
    size_t i = 0;
    for (auto* v : {&kept_bytes, &full_bytes}) {
      for (size_t& b : *v) b = static_cast<size_t>(bytes[i++]);
    }
  }
  // The reference: the uncompressed prompt, continued. Rows 0..C-2 predict tokens 1..C-1.
  std::vector<float> full_logits = host_logits(model_.forward(continuation.data(), C, source, C));
  std::vector<std::vector<double>> reference;  // log-probabilities, root only
  std::vector<size_t> reference_top;
  if (model_.computes_logits() && is_root()) {
    reference.resize(C - 1);
    for (size_t i = 0; i + 1 < C; ++i) {
      const float* row = full_logits.data() + i * vocab;
      log_softmax(row, vocab, reference[i]);
      reference_top.push_back(size_t(std::max_element(row, row + vocab) - row));
    }
  }
  full_logits = {};

  std::vector<ContinuationScore> scores(policies.size());
  std::vector<double> lp;
  for (size_t p = 0; p < policies.size(); ++p) {
    const auto t1 = std::chrono::steady_clock::now();
    const std::vector<float> logits =
        host_logits(model_.forward(continuation.data(), C, *copies[p], C));
    ContinuationScore& s = scores[p];
    s.kv_after_prefill_bytes = kept_bytes[p];
    s.kv_full_after_prefill_bytes = full_bytes[p];
    s.prefill_s = prefill_s;
    if (!reference.empty()) {
      for (size_t i = 0; i + 1 < C; ++i) {
        const float* row = logits.data() + i * vocab;
        log_softmax(row, vocab, lp);
        double kl = 0;
        for (size_t v = 0; v < vocab; ++v) {
          kl += std::exp(reference[i][v]) * (reference[i][v] - lp[v]);
        }
        s.nll.push_back(-lp[size_t(continuation[i + 1])]);
        s.kl.push_back(std::max(kl, 0.0));
        s.agrees.push_back(size_t(std::max_element(row, row + vocab) - row) == reference_top[i]);
      }
    }
    copies[p].reset();  // its blocks go back before the next policy's forward
    s.forward_s = seconds_since(t1);
  }
  return is_root() ? scores : std::vector<ContinuationScore>{};
}

}  // namespace adakv::runtime

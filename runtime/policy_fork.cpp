#include "runtime/policy_fork.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>
#include <string>

#include "runtime/sampler.h"

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

void check_policies(const std::vector<compression::CompressionConfig>& policies) {
  if (policies.empty()) throw std::invalid_argument("no compression policy given");
  for (const auto& p : policies) {
    p.validate();
    if (!p.same_scoring(policies.front())) {
      throw std::invalid_argument(
          "policies forked from one prefill must share its window, pooling (kernel, sink, "
          "shift), GQA aggregation and look-ahead");
    }
  }
}

// The recording sequence of one prompt on the engine's steps, and the forks made from it.
class ForkedPrompt {
 public:
  // Configures the engine's pool for `copies` caches besides the recording, each of the prompt
  // plus `room` tokens (so that no step can run out of blocks).
  // `repeat`: the pieces that follow the prompt when the policies score by reconstruction
  // (required then, else ignored): their queries are observed, then rolled back.
  ForkedPrompt(Worker& engine, const GenerateRequest& req,
               const std::vector<compression::CompressionConfig>& policies, size_t room,
               size_t copies, const compression::RepeatPieces& repeat = {})
      : engine_(engine), req_(req), scoring_(policies.front()) {
    for (const auto& p : policies) {
      lookahead_ = std::max(lookahead_, engine.lookahead_steps(p, req.prompt.size()));
    }
    if (scoring_.scoring == compression::Scoring::kReconstruct) {
      if (repeat.empty()) {
        throw std::invalid_argument(
            "scoring reconstruct needs the context to repeat after the prompt (adakv eval "
            "passkey-multi)");
      }
      repeat_ = repeat;
    }
    const auto& cfg = engine.model().local_config();
    const size_t n = req.prompt.size();
    const size_t blocks_per_head =
        (n + std::max({room, lookahead_, repeat_.longest}) + req.block_tokens - 1) /
        req.block_tokens;
    ServingConfig config;
    config.block_tokens = req.block_tokens;
    config.kv_dtype = req.kv_dtype;
    config.kv_pool_blocks = (copies + 1) * blocks_per_head * cfg.n_layers * cfg.n_kv_heads;
    config.max_num_seqs = copies + 1;
    config.max_num_batched_tokens = std::max(n, repeat_.longest);
    config.prefill_chunk = n;
    engine.reset_stats();
    engine.configure_steps(config);
  }

  // The prompt in one entry, then its greedy look-ahead (EOS ends it early) and its scoring:
  // the recording is ready to fork.
  void prefill() {
    const auto t0 = std::chrono::steady_clock::now();
    const size_t vocab = engine_.model().config().vocab_size;
    StepPlan plan;
    SequenceStart start;
    start.id = kSource;
    start.prompt_tokens = static_cast<uint32_t>(req_.prompt.size());
    start.lookahead = static_cast<uint32_t>(lookahead_);
    start.record_scores = true;
    start.compression = scoring_;
    start.repeat_piece = static_cast<uint32_t>(repeat_.piece_tokens);
    start.repeat_offset = static_cast<uint32_t>(repeat_.text_offset);
    plan.start = {start};
    plan.entries = {StepEntry{kSource, req_.prompt, true}};
    prefill_logits_ = engine_.execute_step(plan).logits;
    const auto t1 = std::chrono::steady_clock::now();
    // Each piece of the repeat in one entry; the cache rolls back between pieces.
    for (size_t i = 0, begin = 0; i < repeat_.ends.size(); begin = repeat_.ends[i++]) {
      StepPlan piece;
      if (i > 0) piece.rewind_lookahead = {kSource};
      const auto first = repeat_.tokens.begin();
      piece.entries = {
          StepEntry{kSource, {first + long(begin), first + long(repeat_.ends[i])}, false}};
      engine_.execute_step(piece);
    }
    std::vector<float> logits = prefill_logits_;
    for (size_t step = 0; step < lookahead_; ++step) {
      const int32_t next = argmax(logits.data(), vocab);
      if (engine_.tokenizer().is_stop(next)) break;
      StepPlan look;
      look.entries = {StepEntry{kSource, {next}, true}};
      logits = engine_.execute_step(look).logits;
    }
    StepPlan end;
    end.end_lookahead = {kSource};
    engine_.execute_step(end);
    lookahead_s_ = seconds_since(t1);
    prefill_s_ = seconds_since(t0);
  }

  // A plan that forks the recording under `policies`, whose new sequence ids go to `ids`.
  StepPlan fork_plan(const std::vector<compression::CompressionConfig>& policies,
                     std::vector<uint64_t>& ids) {
    StepPlan plan;
    ids.clear();
    for (const auto& p : policies) {
      ids.push_back(next_id_++);
      plan.fork.push_back(SequenceFork{ids.back(), kSource, p});
    }
    return plan;
  }

  static constexpr uint64_t kSource = 1;
  Worker& engine_;
  const GenerateRequest& req_;
  compression::CompressionConfig scoring_;
  size_t lookahead_ = 0;
  compression::RepeatPieces repeat_;
  std::vector<float> prefill_logits_;  // [vocab]: the prompt's last row
  double prefill_s_ = 0, lookahead_s_ = 0;
  uint64_t next_id_ = kSource + 1;
};

// An entry of a known text: every row's logits, prompt-row numerics.
StepEntry scored_text(uint64_t id, const std::vector<int32_t>& tokens) {
  StepEntry e{id, tokens, true};
  e.scored_text = true;
  return e;
}

// Decodes the forks `ids` (prompts[b]: what fork b's sampler counts as its prompt) from
// `logits`, fork b from its row row[b], one step for all still running, up to max_new tokens
// each: fills tokens, text and finish_reason of results[b]. Returns the seconds it took.
double decode_forks(Worker& engine, const GenerateRequest& req, const std::vector<uint64_t>& ids,
                    const std::vector<std::vector<int32_t>>& prompts, std::vector<float> logits,
                    std::vector<size_t> row, size_t max_new, std::vector<GenerateResult>& results) {
  const size_t B = ids.size(), vocab = engine.model().config().vocab_size;
  const tokenizer::Tokenizer& tok = engine.tokenizer();
  const std::vector<int32_t> stop_at_eos =
      req.stop_at_eos ? tok.stop_ids() : std::vector<int32_t>{};
  std::vector<Sampler> samplers;
  for (size_t b = 0; b < B; ++b) samplers.emplace_back(req.sampling, prompts[b], stop_at_eos);
  const auto& stop_ids = req.sampling.stop_token_ids;
  std::vector<tokenizer::StreamDecoder> streams(B, tokenizer::StreamDecoder(tok));
  std::vector<size_t> running(B);
  for (size_t b = 0; b < B; ++b) running[b] = b;
  for (auto& r : results) r.finish_reason = "length";
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t step = 0; step < max_new && !running.empty(); ++step) {
    StepPlan plan;
    std::vector<size_t> next_running;
    for (size_t b : running) {
      GenerateResult& result = results[b];
      const int32_t next = samplers[b].sample(logits.data() + row[b] * vocab, vocab);
      result.tokens.push_back(next);
      if ((req.stop_at_eos && tok.is_stop(next)) ||
          std::find(stop_ids.begin(), stop_ids.end(), next) != stop_ids.end()) {
        result.finish_reason = "stop";
        continue;
      }
      result.text += streams[b].push(next);
      // The last token needs no forward: nothing will read its logits.
      if (step + 1 < max_new) {
        row[b] = next_running.size();
        plan.entries.push_back(StepEntry{ids[b], {next}, true});
        next_running.push_back(b);
      }
    }
    running = std::move(next_running);
    if (!running.empty()) logits = engine.execute_step(plan).logits;
  }
  for (size_t b = 0; b < B; ++b) results[b].text += streams[b].flush();
  return seconds_since(t0);
}

}  // namespace

std::vector<GenerateResult> generate_policies(
    Worker& engine, const GenerateRequest& req,
    const std::vector<compression::CompressionConfig>& policies) {
  if (!engine.is_root()) throw std::logic_error("generate_policies() runs on rank 0");
  check_policies(policies);
  const size_t max_new = engine.check_request(req), n_prompt = req.prompt.size();
  const size_t vocab = engine.model().config().vocab_size;
  // Every policy's fork at once, then (with a reference) one more fork at a time.
  ForkedPrompt job(engine, req, policies, std::max(max_new, req.reference.size()),
                   policies.size() + (req.reference.empty() ? 0 : 1));
  job.prefill();
  std::vector<uint64_t> ids;
  engine.execute_step(job.fork_plan(policies, ids));

  // Every policy decodes from the prefill's logits.
  const size_t B = policies.size();
  std::vector<GenerateResult> results(B);
  const double decode_s =
      decode_forks(engine, req, ids, std::vector<std::vector<int32_t>>(B, req.prompt),
                   job.prefill_logits_, std::vector<size_t>(B, 0), max_new, results);

  // The forks' KV reports (collective), and the recording's for its scoring time.
  StepPlan report;
  report.report = ids;
  report.report.push_back(ForkedPrompt::kSource);
  report.release = ids;
  StepResult reported = engine.execute_step(report);
  const CompressionReport& recording = reported.reports.back().compression;
  for (size_t b = 0; b < B; ++b) {
    GenerateResult& r = results[b];
    GenerateResult& kv = reported.reports[b];
    kv.tokens = std::move(r.tokens);
    kv.text = std::move(r.text);
    kv.finish_reason = r.finish_reason;
    kv.prefill_s = job.prefill_s_;
    kv.decode_s = decode_s;
    kv.compression.score_s = recording.score_s;
    if (engine.lookahead_steps(policies[b], n_prompt) > 0) {  // full and streaming use no scores
      kv.compression.lookahead_s = job.lookahead_s_;
      kv.compression.lookahead_tokens = recording.lookahead_tokens;
    }
    r = std::move(kv);
  }

  // The reference answer through a fresh fork of each policy; token 0 follows the prompt (the
  // prefill's logits), token i the row of token i - 1.
  if (!req.reference.empty()) {
    const size_t n = req.reference.size();
    std::vector<double> lp;
    std::vector<uint64_t> last;
    for (size_t b = 0; b < B; ++b) {
      std::vector<uint64_t> fork;
      StepPlan plan = job.fork_plan({policies[b]}, fork);
      plan.release = last;
      plan.entries = {scored_text(fork[0], req.reference)};
      const std::vector<float> ref = engine.execute_step(plan).logits;
      last = fork;
      auto& nll = results[b].reference_nll;
      nll.resize(n);
      for (size_t i = 0; i < n; ++i) {
        const float* r = i == 0 ? job.prefill_logits_.data() : ref.data() + (i - 1) * vocab;
        log_softmax(r, vocab, lp);
        nll[i] = -lp[size_t(req.reference[i])];
      }
    }
  }
  return results;
}

std::vector<ContinuationScore> score_continuation(
    Worker& engine, const GenerateRequest& req, const std::vector<int32_t>& continuation,
    const std::vector<compression::CompressionConfig>& policies) {
  if (!engine.is_root()) throw std::logic_error("score_continuation() runs on rank 0");
  check_policies(policies);
  engine.check_request(req);
  const size_t context = engine.context_length(), vocab = engine.model().config().vocab_size;
  const size_t C = continuation.size();
  if (C < 2) throw std::invalid_argument("the continuation to score needs at least 2 tokens");
  if (req.prompt.size() + C > context) {
    throw std::invalid_argument("prompt (" + std::to_string(req.prompt.size()) +
                                " tokens) plus continuation (" + std::to_string(C) +
                                ") do not fit the model's context of " + std::to_string(context));
  }
  for (int32_t id : continuation) {
    if (id < 0 || size_t(id) >= vocab) {
      throw std::invalid_argument("continuation token id " + std::to_string(id) +
                                  " is outside the vocabulary of " + std::to_string(vocab));
    }
  }
  ForkedPrompt job(engine, req, policies, C, policies.size());
  job.prefill();
  std::vector<uint64_t> ids;
  engine.execute_step(job.fork_plan(policies, ids));

  // The reference: the uncompressed prompt, continued (rows 0..C-2 predict tokens 1..C-1);
  // and every fork's bytes right after its fork, summed over the ranks.
  StepPlan plan;
  plan.report = ids;
  plan.entries = {scored_text(ForkedPrompt::kSource, continuation)};
  StepResult full = engine.execute_step(plan);
  std::vector<std::vector<double>> reference(C - 1);
  std::vector<size_t> reference_top;
  for (size_t i = 0; i + 1 < C; ++i) {
    const float* row = full.logits.data() + i * vocab;
    log_softmax(row, vocab, reference[i]);
    reference_top.push_back(size_t(argmax(row, vocab)));
  }
  full.logits = {};

  std::vector<ContinuationScore> scores(policies.size());
  std::vector<double> lp;
  for (size_t p = 0; p < policies.size(); ++p) {
    const auto t1 = std::chrono::steady_clock::now();
    StepPlan step;
    if (p > 0) step.release = {ids[p - 1]};  // its blocks go back before this forward
    step.entries = {scored_text(ids[p], continuation)};
    const std::vector<float> logits = engine.execute_step(step).logits;
    ContinuationScore& s = scores[p];
    s.kv_after_prefill_bytes = full.reports[p].kv_after_prefill_bytes;
    s.kv_full_after_prefill_bytes = full.reports[p].kv_full_after_prefill_bytes;
    s.prefill_s = job.prefill_s_;
    for (size_t i = 0; i + 1 < C; ++i) {
      const float* row = logits.data() + i * vocab;
      log_softmax(row, vocab, lp);
      double kl = 0;
      for (size_t v = 0; v < vocab; ++v) {
        kl += std::exp(reference[i][v]) * (reference[i][v] - lp[v]);
      }
      s.nll.push_back(-lp[size_t(continuation[i + 1])]);
      s.kl.push_back(std::max(kl, 0.0));
      s.agrees.push_back(size_t(argmax(row, vocab)) == reference_top[i]);
    }
    s.forward_s = seconds_since(t1);
  }
  return scores;
}

std::vector<std::vector<GenerateResult>> answer_questions(
    Worker& engine, const GenerateRequest& req, const std::vector<std::vector<int32_t>>& questions,
    const std::vector<compression::CompressionConfig>& policies,
    const compression::RepeatPieces& repeat, std::vector<std::vector<float>>* scores) {
  if (!engine.is_root()) throw std::logic_error("answer_questions() runs on rank 0");
  check_policies(policies);
  if (questions.empty()) throw std::invalid_argument("no question to answer");
  const size_t max_new = engine.check_request(req), n_context = req.prompt.size();
  size_t longest = 0;
  for (const auto& q : questions) {
    if (q.empty()) throw std::invalid_argument("a question has no tokens");
    longest = std::max(longest, q.size());
  }
  if (n_context + longest + max_new > engine.context_length()) {
    throw std::invalid_argument("context (" + std::to_string(n_context) + " tokens), question (" +
                                std::to_string(longest) + ") and " + std::to_string(max_new) +
                                " new tokens do not fit the model's context of " +
                                std::to_string(engine.context_length()));
  }
  if (policies.front().scoring == compression::Scoring::kReconstruct &&
      n_context + repeat.longest > engine.context_length()) {
    throw std::invalid_argument(
        "context (" + std::to_string(n_context) + " tokens) and a piece of its reconstruction (" +
        std::to_string(repeat.longest) + ") do not fit the model's context of " +
        std::to_string(engine.context_length()));
  }
  // One policy at a time holds a fork per question.
  const size_t Q = questions.size();
  ForkedPrompt job(engine, req, policies, longest + max_new, Q, repeat);
  job.prefill();
  std::vector<std::vector<int32_t>> prompts;
  for (const auto& q : questions) {
    prompts.push_back(req.prompt);
    prompts.back().insert(prompts.back().end(), q.begin(), q.end());
  }
  std::vector<size_t> rows(Q);
  for (size_t i = 0; i < Q; ++i) rows[i] = i;
  std::vector<std::vector<GenerateResult>> results(policies.size());
  for (size_t p = 0; p < policies.size(); ++p) {
    // The forks, each with its question appended uncompressed in the same step (prompt rows:
    // the question's numerics are those of a prompt that holds it).
    std::vector<uint64_t> ids;
    StepPlan plan = job.fork_plan(std::vector<compression::CompressionConfig>(Q, policies[p]), ids);
    for (size_t i = 0; i < Q; ++i) plan.entries.push_back(StepEntry{ids[i], questions[i], true});
    if (scores && p == 0) plan.gather_scores = {ForkedPrompt::kSource};
    const auto t0 = std::chrono::steady_clock::now();
    StepResult step = engine.execute_step(plan);
    if (scores && p == 0) *scores = std::move(step.scores.at(ForkedPrompt::kSource));
    std::vector<float> logits = std::move(step.logits);
    const double question_s = seconds_since(t0);
    std::vector<GenerateResult> answers(Q);
    const double decode_s =
        decode_forks(engine, req, ids, prompts, std::move(logits), rows, max_new, answers);
    StepPlan report;
    report.report = ids;
    report.release = ids;
    StepResult reported = engine.execute_step(report);
    for (size_t i = 0; i < Q; ++i) {
      GenerateResult& kv = reported.reports[i];
      kv.tokens = std::move(answers[i].tokens);
      kv.text = std::move(answers[i].text);
      kv.finish_reason = answers[i].finish_reason;
      kv.prompt_tokens = prompts[i].size();
      kv.prefill_s = job.prefill_s_;
      kv.compression.lookahead_s = job.lookahead_s_;
      kv.decode_s = question_s + decode_s;
      results[p].push_back(std::move(kv));
    }
  }
  return results;
}

RecordedPrompt record_prompt(Worker& engine, const GenerateRequest& req) {
  if (!engine.is_root()) throw std::logic_error("record_prompt() runs on rank 0");
  engine.check_request(req);
  ForkedPrompt job(engine, req, {req.compression}, 0, 1);
  job.prefill();
  std::vector<uint64_t> ids;
  StepPlan plan = job.fork_plan({req.compression}, ids);
  plan.gather_scores = {ForkedPrompt::kSource};
  RecordedPrompt rec;
  rec.scores = std::move(engine.execute_step(plan).scores.at(ForkedPrompt::kSource));
  StepPlan report;
  report.report = ids;
  rec.kept = std::move(engine.execute_step(report).reports.at(0).compression.kept);
  rec.prefill_s = job.prefill_s_;
  return rec;
}

}  // namespace adakv::runtime

#include "runtime/engine.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>

#include "runtime/compression/reconstruction.h"

namespace adakv::runtime {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

Engine::Engine(Worker& engine, const ServingConfig& config)
    : engine_(engine),
      scheduler_(config, engine.model().config(), engine.tp_size(), engine.model().shard().lm_head,
                 size_t(engine.world().pp_size)),
      depth_(size_t(std::max(engine.world().pp_size, 1))),
      repeat_instruction_(engine.encode_prompt(compression::kRepeatInstruction, /*chat=*/false)),
      repeat_piece_limit_(config.context_repeat_piece) {
  engine_.configure_steps(config);
}

std::shared_ptr<ScheduledSeq> Engine::checked_sequence(const Request& request) const {
  const GenerateRequest& req = request.generate;
  const size_t max_new = engine_.check_request(req);
  for (const auto& s : request.stop) {
    if (s.empty()) throw std::invalid_argument("a stop string is empty");
  }
  auto seq = std::make_shared<ScheduledSeq>();
  seq->prompt = req.prompt;
  seq->compression = req.compression;
  seq->max_new = max_new;
  seq->lookahead = engine_.lookahead_steps(req.compression, req.prompt.size());
  if (req.context_tokens > 0) {
    const size_t c = req.context_tokens, n = req.prompt.size();
    if (c >= n) {
      throw std::invalid_argument("the context (" + std::to_string(c) +
                                  " tokens) must be shorter than the prompt (" + std::to_string(n) +
                                  "): what follows it is the question");
    }
    if (req.prompt_logprobs) {
      throw std::invalid_argument(
          "prompt logprobs need every prompt row computed; a compressed context's are not");
    }
    // Under policy full the prompt is kept whole: prefix caching reuses it as it is.
    if (req.compression.policy != compression::Policy::kFull) {
      seq->context_tokens = c;
      seq->lookahead = 0;  // the context's scoring observes no generated token
      seq->compression.policy = req.compression.context_allocation();
      seq->compression.scoring = context_scoring(seq->compression, c);
      if (seq->compression.scoring == compression::Scoring::kReconstruct) {
        seq->repeat_instruction = repeat_instruction_;
        seq->repeat_piece = compression::repeat_piece_tokens(
            c, c, repeat_instruction_.size(), engine_.model().config().context_length);
        if (repeat_piece_limit_ > 0) {
          seq->repeat_piece = std::min(seq->repeat_piece, repeat_piece_limit_);
        }
      }
    }
  }
  return seq;
}

compression::Scoring Engine::context_scoring(const compression::CompressionConfig& c,
                                             size_t n_context) const {
  if (c.context_scoring != compression::Scoring::kReconstruct) return c.context_scoring;
  // Nothing to score, or no room for a piece of the repeat: the window scores it.
  const bool evicts = !c.keeps_everything(n_context) && n_context > c.window &&
                      c.policy != compression::Policy::kStreaming;
  const size_t piece = compression::repeat_piece_tokens(
      n_context, n_context, repeat_instruction_.size(), engine_.model().config().context_length);
  return evicts && piece > 0 ? compression::Scoring::kReconstruct : compression::Scoring::kWindow;
}

void Engine::check(const Request& request) const {
  scheduler_.check_fits_alone(*checked_sequence(request));
}

uint64_t Engine::add(Request request) {
  const GenerateRequest& req = request.generate;
  const size_t n_prompt = req.prompt.size();
  auto seq = checked_sequence(request);
  const uint64_t id = next_id_++;
  seq->id = id;
  seq->stop_ids = engine_.tokenizer().stop_ids();
  seq->prompt_logits = req.prompt_logprobs;
  seq->cache_prefix = true;  // the scheduler takes it when the prompt is kept whole
  scheduler_.add(seq);       // throws when the pool can never hold it

  Active a(seq, std::move(request), engine_.tokenizer());
  for (const auto& s : a.request.stop) a.held_back = std::max(a.held_back, s.size() - 1);
  a.result.prompt_tokens = n_prompt;
  a.result.finish_reason = "length";
  a.added_at = now_s();
  stats_.prompt_tokens += n_prompt;
  active_.emplace(id, std::move(a));
  return id;
}

std::vector<uint64_t> Engine::add_samples(std::vector<Request> samples) {
  if (samples.empty()) throw std::invalid_argument("no sample requested");
  const GenerateRequest& first = samples.front().generate;
  for (const Request& r : samples) {
    if (r.generate.prompt != first.prompt || r.generate.max_tokens != first.max_tokens) {
      throw std::invalid_argument(
          "the samples of one request must share the prompt and max_tokens");
    }
    engine_.check_request(r.generate);
    for (const auto& s : r.stop) {
      if (s.empty()) throw std::invalid_argument("a stop string is empty");
    }
  }
  if (first.context_tokens > 0) {
    // Each sample forks from the cached context and appends the question itself.
    std::vector<uint64_t> ids;
    for (auto& r : samples) ids.push_back(add(std::move(r)));
    return ids;
  }
  std::vector<uint64_t> ids{add(std::move(samples.front()))};
  ScheduledSeq& source = *active_.at(ids[0]).seq;
  for (size_t i = 1; i < samples.size(); ++i) {
    const uint64_t id = next_id_++;
    auto seq = std::make_shared<ScheduledSeq>();
    seq->id = id;
    seq->prompt = source.prompt;
    seq->compression = source.compression;
    seq->max_new = source.max_new;
    seq->lookahead = source.lookahead;
    seq->stop_ids = source.stop_ids;
    seq->cache_prefix = source.cache_prefix;  // for a sample that prefills alone
    seq->sample_of = ids[0];
    scheduler_.add_sample(seq);
    Active a(seq, std::move(samples[i]), engine_.tokenizer());
    for (const auto& s : a.request.stop) a.held_back = std::max(a.held_back, s.size() - 1);
    a.result.prompt_tokens = source.prompt.size();
    a.result.finish_reason = "length";
    a.added_at = now_s();
    active_.emplace(id, std::move(a));
    ids.push_back(id);
  }
  return ids;
}

void Engine::abort(uint64_t id) {
  const auto it = active_.find(id);
  if (it == active_.end() || it->second.done) return;
  end(it->second, "abort");
}

size_t Engine::free_blocks() const {
  const BlockPool* pool = engine_.step_pool();
  return pool ? pool->free_blocks() : 0;
}

void Engine::run_until_done() {
  while (has_work()) step();
}

void Engine::emit(Active& a, bool final) {
  const std::string& t = a.text;
  size_t limit = final ? t.size() : (t.size() > a.held_back ? t.size() - a.held_back : 0);
  // Never split a UTF-8 character.
  while (limit > a.emitted && limit < t.size() && (uint8_t(t[limit]) & 0xC0) == 0x80) --limit;
  if (limit <= a.emitted) return;
  if (a.request.on_text)
    a.request.on_text(std::string_view(t).substr(a.emitted, limit - a.emitted));
  a.emitted = limit;
}

void Engine::end(Active& a, const std::string& reason) {
  if (reason != "abort" && a.seq->phase == SeqPhase::kLookahead) {
    a.ending = reason;
    a.result.finish_reason = reason;
    emit(a, true);
    return;
  }
  a.done = true;
  a.result.finish_reason = reason;
  a.result.decode_s = now_s() - (a.compressed_at > 0 ? a.compressed_at : a.added_at);
  emit(a, true);
  if (!scheduler_.finish(a.seq->id, /*report=*/true)) {
    // It never held a cache: the result is complete now.
    const uint64_t id = a.seq->id;
    if (a.request.on_done) a.request.on_done(std::move(a.result));
    active_.erase(id);
  }
}

void Engine::on_token(Active& a, int32_t token) {
  ScheduledSeq& s = *a.seq;
  s.output.push_back(token);
  a.result.tokens.push_back(token);
  ++stats_.generated_tokens;
  if (s.output.size() == 1) a.first_token_at = now_s();
  if (a.request.on_token) a.request.on_token(token);
  const auto& req = a.request.generate;
  const auto& extra_stops = req.sampling.stop_token_ids;
  if ((req.stop_at_eos && engine_.tokenizer().is_stop(token)) ||
      std::find(extra_stops.begin(), extra_stops.end(), token) != extra_stops.end()) {
    a.text += a.stream.flush();
    a.result.text = a.text;
    return end(a, "stop");
  }
  const size_t before = a.text.size();
  a.text += a.stream.push(token);
  // The earliest stop string that the new text completes.
  size_t cut = std::string::npos;
  const size_t from = before > a.held_back ? before - a.held_back : 0;
  if (s.output.size() >= req.sampling.min_tokens) {
    for (const auto& stop : a.request.stop) cut = std::min(cut, a.text.find(stop, from));
  }
  if (cut != std::string::npos) {
    a.text.resize(cut);
    a.result.text = a.text;
    return end(a, "stop");
  }
  if (s.output.size() >= s.max_new) {
    a.text += a.stream.flush();
    a.result.text = a.text;
    return end(a, "length");
  }
  a.result.text = a.text;
  emit(a, false);
}

void Engine::prompt_logprobs(Active& a, const StepEntry& e, const float* rows) {
  const ScheduledSeq& s = *a.seq;
  const size_t vocab = engine_.model().config().vocab_size, n = s.prompt.size();
  const size_t start = s.prefilled - e.tokens.size();  // the entry's first position
  auto& out = a.result.prompt_logprobs;
  // Row j predicts prompt[start + j + 1]; rows already taken (a recompute) are skipped.
  const size_t from = std::max(out.size(), start), to = std::min(s.prefilled, n - 1);
  if (from < to) {
    out.resize(to);
    const size_t top_n = size_t(std::max(a.request.generate.logprobs, 0));
#pragma omp parallel for schedule(dynamic, 8)
    for (size_t p = from; p < to; ++p) {
      out[p] = token_logprob(rows + (p - start) * vocab, vocab, s.prompt[p + 1], top_n);
    }
  }
  if (s.prefilled == n && a.request.on_prompt_logprobs) a.request.on_prompt_logprobs(out);
}

void Engine::step() {
  if (!has_work()) return;
  // The first plan goes out even when it has nothing to run (the loop still counts a step);
  // later ones only with work, and only while a stage would otherwise idle.
  if (in_flight_.empty()) {
    launch();
  }
  while (in_flight_.size() < depth_ && scheduler_.has_work() && launch()) {
  }
  InFlight f = std::move(in_flight_.front());
  in_flight_.pop_front();
  land(f);
}

bool Engine::launch() {
  InFlight f;
  f.plan = scheduler_.schedule(f.kinds);
  if (f.plan.empty() && !in_flight_.empty()) return false;
  f.launched_at = now_s();
  engine_.launch_step(f.plan);
  const bool forward = !f.plan.entries.empty();
  in_flight_.push_back(std::move(f));
  return forward;
}

void Engine::land(InFlight& f) {
  const StepPlan& plan = f.plan;
  const std::vector<EntryKind>& kinds = f.kinds;
  const double waits_from = now_s();
  StepResult result = engine_.finish_step();
  scheduler_.landed(plan);
  const std::vector<float>& sampled = result.logits;
  const double landed_at = now_s();
  // The time this plan alone accounts for: since it launched or the last plan landed,
  // whichever is later (plans in flight together overlap).
  const double own_s = landed_at - std::max(f.launched_at, last_landed_at_);
  // The last stage's input wait during this plan (from its running total; the first landing
  // only sets the base).
  double last_wait = 0;
  if (result.last_stage_wait_s > 0) {
    if (last_stage_wait_s_ >= 0) last_wait = result.last_stage_wait_s - last_stage_wait_s_;
    last_stage_wait_s_ = result.last_stage_wait_s;
  }
  stats_.wait_s += landed_at - waits_from;
  stats_.last_wait_s += last_wait;
  stats_.busy_s += own_s;
  if (!plan.entries.empty() && std::all_of(kinds.begin(), kinds.end(),
                                           [](EntryKind k) { return k == EntryKind::kDecode; })) {
    stats_.decode_only_s += own_s;
    stats_.decode_only_wait_s += landed_at - waits_from;
    stats_.decode_only_last_wait_s += last_wait;
    stats_.decode_only_tokens += plan.entries.size();
  }
  last_landed_at_ = landed_at;
  ++stats_.steps;
  stats_.preemptions = scheduler_.stats().preemptions;
  stats_.peak_running = std::max(stats_.peak_running, scheduler_.num_running());
  stats_.running_sum += double(scheduler_.num_running());

  // Finished sequences' KV reports: their results are whole now.
  for (size_t i = 0; i < plan.report.size(); ++i) {
    const auto it = active_.find(plan.report[i]);
    if (it == active_.end()) continue;
    Active& a = it->second;
    GenerateResult& r = a.result;
    GenerateResult& kv = result.reports[i];
    r.kv_full_bytes = kv.kv_full_bytes;
    r.kv_kept_bytes = kv.kv_kept_bytes;
    r.kv_after_prefill_bytes = kv.kv_after_prefill_bytes;
    r.kv_full_after_prefill_bytes = kv.kv_full_after_prefill_bytes;
    r.pool_free_after_prefill_bytes = kv.pool_free_after_prefill_bytes;
    r.pool_bytes = kv.pool_bytes;
    r.compression = std::move(kv.compression);
    r.rank_kv_kept_bytes = std::move(kv.rank_kv_kept_bytes);
    r.budgets_agree_across_ranks = kv.budgets_agree_across_ranks;
    r.all_reduce_s = kv.all_reduce_s;
    r.budget_exchange_s = kv.budget_exchange_s;
    r.preemptions = a.seq->preemptions;
    r.cached_tokens = a.seq->cached_tokens;
    r.ttft_s = a.first_token_at > 0 ? a.first_token_at - a.added_at : 0;
    r.prefill_s = a.compressed_at > 0 ? a.compressed_at - a.added_at : 0;
    if (r.compression.lookahead_tokens > 0) {
      r.compression.lookahead_s = a.compressed_at - a.prefilled_at;
    }
    if (a.request.on_done) a.request.on_done(std::move(r));
    active_.erase(it);
  }

  const size_t vocab = engine_.model().config().vocab_size;
  auto compressed = [&](Active& a) {
    const auto kept = result.kept.find(a.seq->id);
    if (kept == result.kept.end()) {
      throw std::logic_error("sequence " + std::to_string(a.seq->id) +
                             " ended its prompt without a budget vector in the step's result");
    }
    scheduler_.set_kept(*a.seq, kept->second);
    a.compressed_at = now_s();
  };
  for (uint64_t id : plan.end_lookahead) {
    if (scheduler_.is_context(id)) {
      scheduler_.context_compressed(id, result.kept.at(id));  // scored by its repeat
      continue;
    }
    Active& a = active_.at(id);
    compressed(a);
    if (!a.ending.empty()) end(a, a.ending);
  }
  // The rows to sample, found in plan order; sampled side by side (each sequence has its own
  // sampler, and a row's token depends only on its logits and that sampler); then delivered in
  // plan order.
  struct Draw {
    Active* a;
    const float* logits;
    int32_t token;
  };
  std::vector<Draw> draws;
  size_t row = 0;
  for (size_t i = 0; i < plan.entries.size(); ++i) {
    const StepEntry& e = plan.entries[i];
    if (scheduler_.is_context(e.id)) {
      // A context sequence (no request, no logits): cached once compressed.
      if (kinds[i] == EntryKind::kLastPrefillChunk && !scheduler_.context_repeats(e.id)) {
        scheduler_.context_compressed(e.id, result.kept.at(e.id));
      }
      continue;
    }
    Active& a = active_.at(e.id);
    ScheduledSeq& s = *a.seq;
    if (kinds[i] == EntryKind::kLastPrefillChunk) {
      a.prefilled_at = now_s();
      if (s.lookahead == 0) compressed(a);
    }
    if (!e.logits) continue;
    // One row, or every row of an entry that asks for them (a prompt's, for its logprobs).
    const size_t rows = e.scored_text ? e.tokens.size() : 1;
    const float* first = sampled.data() + row * vocab;
    row += rows;
    const float* lg = first + (rows - 1) * vocab;
    if (a.done) continue;
    if (e.scored_text &&
        (kinds[i] == EntryKind::kPrefillChunk || kinds[i] == EntryKind::kLastPrefillChunk)) {
      prompt_logprobs(a, e, first);
    }
    auto sample = [&] {
      if (a.request.on_logits) a.request.on_logits(lg, vocab);
      draws.push_back({&a, lg, 0});
    };
    switch (kinds[i]) {
      case EntryKind::kLastPrefillChunk:
        if (s.lookahead > 0) s.lookahead_next = argmax(lg, vocab);
        if (s.output.empty()) sample();
        // The request's other samples waiting to fork from this prompt: their first tokens.
        for (auto& [id, other] : active_) {
          if (other.seq->sample_of != s.id || other.done || !other.seq->output.empty() ||
              other.seq->phase != SeqPhase::kWaiting) {
            continue;
          }
          if (other.request.on_logits) other.request.on_logits(lg, vocab);
          draws.push_back({&other, lg, 0});
        }
        break;
      case EntryKind::kLookahead:
        s.lookahead_next = argmax(lg, vocab);
        break;
      case EntryKind::kDecode:
        sample();
        break;
      case EntryKind::kPrefillChunk:
        break;
    }
  }
  std::vector<TokenLogprob> logprobs(draws.size());  // of the requests that want them
#pragma omp parallel for schedule(dynamic, 1) if (draws.size() > 1)
  for (size_t i = 0; i < draws.size(); ++i) {
    Draw& d = draws[i];
    d.token = d.a->sampler.sample(d.logits, vocab);
    const int top_n = d.a->request.generate.logprobs;
    if (top_n >= 0) logprobs[i] = d.a->sampler.last_logprob(d.token, size_t(top_n));
  }
  for (size_t i = 0; i < draws.size(); ++i) {
    Active& a = *draws[i].a;
    if (a.request.generate.logprobs >= 0) {
      if (a.request.on_logprob) a.request.on_logprob(logprobs[i]);
      a.result.logprobs.push_back(std::move(logprobs[i]));
    }
    on_token(a, draws[i].token);
  }
}

GenerateResult generate(Worker& worker, const GenerateRequest& req,
                        const std::function<void(std::string_view)>& on_text,
                        const LogitsObserver& on_logits) {
  if (!worker.is_root()) throw std::logic_error("generate() runs on rank 0; other ranks follow()");
  const size_t max_new = worker.check_request(req), n_prompt = req.prompt.size();
  // A pool for this sequence uncompressed, its prompt in one forward (as a lone request in
  // the serving loop with a pool of its own).
  const auto& cfg = worker.model().local_config();
  const size_t tokens =
      n_prompt + std::max(max_new, worker.lookahead_steps(req.compression, n_prompt));
  ServingConfig config;
  config.block_tokens = req.block_tokens;
  config.kv_dtype = req.kv_dtype;
  config.kv_pool_blocks =
      (tokens + req.block_tokens - 1) / req.block_tokens * cfg.n_layers * cfg.n_kv_heads;
  config.max_num_seqs = 1;
  config.max_num_batched_tokens = n_prompt;
  config.prefill_chunk = n_prompt;
  worker.reset_stats();
  Engine loop(worker, config);
  GenerateResult result;
  Request request;
  request.generate = req;
  request.on_text = on_text;
  request.on_logits = on_logits;
  request.on_done = [&](GenerateResult&& r) { result = std::move(r); };
  loop.add(std::move(request));
  loop.run_until_done();
  return result;
}

}  // namespace adakv::runtime

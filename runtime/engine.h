// The engine on rank 0: requests in, tokens out, one step at a time over the workers' block
// pools (the CLI's generate and batch, and the HTTP server, all run through it).
//
// Each step(): the Scheduler plans, the Worker executes the plan on every rank (one ragged
// forward), then this class samples each sequence's next token with its own sampler, streams
// its text, applies its stop conditions and ends it (stop, length or abort). A finished
// sequence's KV report (budgets, bytes, every rank's) arrives one step later, with its result.
//
// Under pipeline stages a step launches plans until one per stage is in flight (or nothing
// more can run before a result comes back), then lands the oldest: while the last stage runs
// one plan, the first already runs the next.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/scheduler.h"
#include "runtime/worker.h"

namespace adakv::runtime {

struct Request {
  GenerateRequest generate;       // prompt, max_tokens, sampling, stop_at_eos, compression
  std::vector<std::string> stop;  // stop strings: generation ends before them (not in text)
  std::function<void(std::string_view)> on_text;  // text as it is decided
  LogitsObserver on_logits;                       // each sampled row's logits
  std::function<void(GenerateResult&&)> on_done;  // the whole result, once
  std::function<void(int32_t)> on_token;          // each sampled token, as it is sampled
  // With generate.logprobs >= 0: each sampled token's log probabilities, before its on_token.
  std::function<void(const TokenLogprob&)> on_logprob;
  // With generate.prompt_logprobs: the prompt's (GenerateResult::prompt_logprobs), once, when
  // its prefill is done (before the first token).
  std::function<void(const std::vector<TokenLogprob>&)> on_prompt_logprobs;
};

struct LoopStats {
  size_t steps = 0, preemptions = 0;
  size_t peak_running = 0;
  double running_sum = 0;  // sum over steps of resident sequences (mean = sum / steps)
  size_t generated_tokens = 0, prompt_tokens = 0;
  // Steps whose forward held only decode tokens: their wall time and tokens (batched decode
  // speed, free of prefill).
  double decode_only_s = 0;
  size_t decode_only_tokens = 0;
  // Of decode_only_s: the time rank 0 waited for a plan's results from the last pipeline stage
  // (its stage idle; 0 without stages).
  double decode_only_wait_s = 0;
  // Of decode_only_s: the time the last stage waited for its input (its stage idle).
  double decode_only_last_wait_s = 0;
  // Every step: the same waits, and the wall time the steps took (plans in flight together
  // counted once).
  double wait_s = 0, last_wait_s = 0, busy_s = 0;
};

class Engine {
 public:
  // Root only: (re)configures the engine's serving loop (every rank's pool) with `config`.
  Engine(Worker& engine, const ServingConfig& config);

  // Queues a request; returns its id. Throws std::invalid_argument naming what is wrong (empty
  // prompt, one the context or the pool can never hold, bad sampling or compression values).
  uint64_t add(Request request);
  // Queues n samples of one prompt (requests equal but for sampling, stop strings and
  // callbacks; n >= 1): the first prefills and compresses the prompt under its compression,
  // the others fork from its compressed cache (Scheduler::add_sample) and draw their first
  // token from the same logits. Returns their ids in order. Throws like add(), or
  // std::invalid_argument when the prompts or max_tokens differ.
  std::vector<uint64_t> add_samples(std::vector<Request> samples);
  // Throws what add() would throw for `request`, and queues nothing. Any thread: it reads the
  // configuration only (a server answers 400 before it starts a response).
  void check(const Request& request) const;
  // Ends a request (finish_reason "abort"); its blocks go back at the next step.
  void abort(uint64_t id);
  bool has_work() const { return scheduler_.has_work() || !in_flight_.empty(); }
  // One step of the loop (no-op without work).
  void step();
  // Steps until every request has ended.
  void run_until_done();

  const Scheduler& scheduler() const { return scheduler_; }
  const LoopStats& stats() const { return stats_; }
  // Blocks free in the pool of rank 0 (every rank's pool is accounted by the scheduler).
  size_t free_blocks() const;
  // Blocks of rank 0's pool that cached prompt spans hold and no sequence references: the pool
  // takes them back when it needs them (free + these = the pool, once every request ended).
  size_t cached_free_blocks() const { return scheduler_.cached_blocks(0, true); }

 private:
  // The sequence `request` becomes (no id yet), once the worker accepts it; throws like add().
  std::shared_ptr<ScheduledSeq> checked_sequence(const Request& request) const;
  // How a compressed context of n_context tokens under `c` is scored: c.context_scoring, or the
  // window where reconstruction has nothing to score or no room in the model's context.
  compression::Scoring context_scoring(const compression::CompressionConfig& c,
                                       size_t n_context) const;
  struct Active {
    Active(std::shared_ptr<ScheduledSeq> s, Request r, const tokenizer::Tokenizer& tok)
        : seq(std::move(s)),
          request(std::move(r)),
          sampler(request.generate.sampling, request.generate.prompt,
                  request.generate.stop_at_eos ? tok.stop_ids() : std::vector<int32_t>{}),
          stream(tok) {}
    std::shared_ptr<ScheduledSeq> seq;
    Request request;
    Sampler sampler;
    tokenizer::StreamDecoder stream;
    std::string text;      // decided text (stop strings cut)
    size_t emitted = 0;    // bytes of text handed to on_text
    size_t held_back = 0;  // longest stop string - 1: bytes kept until decided
    GenerateResult result;
    double added_at = 0, first_token_at = 0, prefilled_at = 0, compressed_at = 0;
    bool done = false;
    // Ended while its look-ahead was still running: the reason, applied once it is compressed
    // (its report then holds the compressed cache, as for every other request).
    std::string ending;
  };

  // A token sampled for `a`: appended, streamed, checked against its stop conditions.
  void on_token(Active& a, int32_t token);
  void end(Active& a, const std::string& reason);
  void emit(Active& a, bool final);
  // The log probabilities of the prompt tokens that the rows [rows][vocab] of a's prompt
  // entry `e` predict; when the last arrives, hands them to on_prompt_logprobs.
  void prompt_logprobs(Active& a, const StepEntry& e, const float* rows);

  // A plan launched on the workers and not landed yet.
  struct InFlight {
    StepPlan plan;
    std::vector<EntryKind> kinds;
    double launched_at = 0;
  };
  // Schedules and launches the next plan; false when there is nothing to launch.
  bool launch();
  // The oldest plan's results: reports, compressions, sampling.
  void land(InFlight& f);

  Worker& engine_;
  Scheduler scheduler_;
  std::map<uint64_t, Active> active_;
  uint64_t next_id_ = 1;
  LoopStats stats_;
  size_t depth_;                             // plans in flight at most: one per pipeline stage
  std::vector<int32_t> repeat_instruction_;  // compression::kRepeatInstruction, tokenized
  size_t repeat_piece_limit_;                // ServingConfig::context_repeat_piece
  std::deque<InFlight> in_flight_;
  double last_landed_at_ = 0;
  double last_stage_wait_s_ = -1;  // the last stage's input wait at the last landing
};

// Root only: one request through an engine of its own, on a pool sized for it (its prompt in
// one forward). Throws std::invalid_argument when the prompt is empty or does not fit the
// context. on_text receives decoded text as it becomes available (whole UTF-8 characters).
GenerateResult generate(Worker& worker, const GenerateRequest& request,
                        const std::function<void(std::string_view)>& on_text = {},
                        const LogitsObserver& on_logits = {});

}  // namespace adakv::runtime

// Rank 0's scheduler of the serving loop: which sequences run in the next step, within one
// block pool shared by all of them (vLLM's design, with Ada-KV's compressed sequences).
//
// Each step it writes a StepPlan: first one token for every running sequence (decodes, the
// look-ahead of a sequence about to be compressed, the replay of a recomputed one), then
// prompt chunks within max_num_batched_tokens, admitting waiting sequences FCFS while the pool
// can hold what their prefill reserves.
//
// A long prompt is prefilled over several steps. In chunks of tokens, every chunk's K/V stays
// whole until the last chunk scores the prompt, so the pool holds the whole prompt meanwhile.
// A prompt whose policy compresses each layer on its own (scope layer, no look-ahead) is
// prefilled layer by layer instead: each step runs the whole prompt through a range of layers,
// each layer is scored and compressed as soon as it ran, and only its kept rows reach the
// pool; the residual stream waits between steps. Its numbers are the one-forward prefill's
// whatever the ranges, so a range takes what is left of the step's token budget (a layer is
// worth the prompt's rows over the number of layers). One such prompt at a time, as the step's
// last entry.
//
// When the next decode tokens do not fit, the most recently admitted sequence is preempted: its
// blocks are freed and it waits again at the front of the queue; readmitted, it prefills its prompt
// again (the same chunks, so the same scores and budgets), compresses it, and replays the tokens it
// had generated one step each, so its output continues as if nothing happened.
//
// Under pipeline stages several plans are in flight at once, one per stage, so that every stage
// works (vLLM's virtual engines): each plan takes the sequences that do not wait for the result
// of a plan in flight (a prompt's next chunk of tokens does not) and at most its share of the
// decoding ones, and the engine reports each plan's landing (landed()). When the newest
// sequence is in flight and decodes lack blocks, they wait for it to land: only the newest is
// ever preempted, as with one plan at a time.
//
// The samples of one request (n > 1) share its prompt: one sequence prefills and compresses it;
// each other sample waits aside (not in the queue) with the first token the engine drew for it
// from the same prefill's logits, and once the prompt is compressed it forks from that
// sequence (SequenceFork::share): the compressed prompt's full blocks are referenced by every
// sample and counted once, each sample's partial last blocks and generated tokens are its own.
// A prompt kept whole takes and leaves cached spans as any other; at the fork they pass to the
// shared prompt, which references them in the cache until its last sample leaves.
// A sample preempted, or whose source ended before the fork, prefills its prompt alone.
//
// Prefix caching (ServingConfig::prefix_caching; runtime/prefix_cache.h): a prompt kept whole
// starts from the cached spans of an earlier prompt with the same beginning, referenced rather
// than computed (its first chunk starts after them; at least its last token is computed), and
// its own full spans become cached with its last chunk. Cached spans nobody references stay
// until the pool needs their room: admissions and decodes short of blocks evict them, least
// recently used first, before anything is preempted. They are accounted like a sequence's
// blocks, once, on every rank.
//
// Compressed contexts (ScheduledSeq::context_tokens, "compress once, ask many"): a request's
// context is compressed by a sequence of its own (its prompt the context, scored by the
// context's own last tokens, never decoding), which stays cached once compressed; the request
// then forks from it (SequenceFork::share) and appends the rest of its prompt uncompressed, in
// one entry. A later request whose context starts with a cached one and goes on for at most
// ServingConfig::context_tail tokens more forks from it too, its extra context appended with its
// question (a chat's next turn); otherwise its context is compressed anew. A cached context is
// evicted, least recently used first, when the pool needs room and no request references it.
// Without prefix caching a context still serves the requests that wait for it while it is
// compressed, and goes once none holds it.
//
// The pool is accounted for every rank: each sequence's tokens per [layer][model KV head]
// (until it is compressed, the peak its prefill reaches: the whole prompt when it spans several
// chunks of tokens or waits for look-ahead, else what its policy keeps; then its kept tokens
// plus the generated ones), summed into blocks over the heads and layers each rank holds (its
// tensor-parallel shard's heads, its pipeline stage's layers). That is exactly what
// each rank's pool holds after the step, so a shortage is found before it happens, never by a
// failed append.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/shard.h"
#include "runtime/compression/reconstruction.h"
#include "runtime/prefix_cache.h"
#include "runtime/step_plan.h"

namespace adakv::runtime {

// The full blocks of a compressed prompt that several samples reference (ScheduledSeq::shared).
struct SharedPrompt {
  std::vector<uint32_t> kept;  // [layer * model kv heads]: the prompt's kept tokens
  size_t holders = 0;          // resident sequences referencing them
  // The leading full blocks that are cached spans (a prompt kept whole that took or left them):
  // the cache's blocks, referenced in it while any holder is resident, not counted here.
  std::vector<uint64_t> prefix;
};

enum class SeqPhase {
  kWaiting,     // queued (new or preempted)
  kPrefilling,  // admitted; prompt chunks to go
  kLookahead,   // prompt done; greedy look-ahead steps before compression
  kRunning,     // compressed; decoding (or replaying its earlier tokens after a recompute)
  kFinished,
};

// The scheduling state of one sequence (rank 0). The engine fills `output` as it samples.
struct ScheduledSeq {
  uint64_t id = 0;
  std::vector<int32_t> prompt;
  compression::CompressionConfig compression;
  size_t max_new = 0;             // tokens it may generate
  size_t lookahead = 0;           // look-ahead steps planned
  std::vector<int32_t> stop_ids;  // look-ahead stops at any (Tokenizer::stop_ids, ascending)
  // The logits of every prompt row (echo's prompt logprobs): its prompt entries ask for all
  // their rows (StepEntry::scored_text) until its first token is sampled.
  bool prompt_logits = false;

  SeqPhase phase = SeqPhase::kWaiting;
  std::vector<int32_t> output;  // generated tokens, kept across preemption
  bool finished = false;        // set by the engine: no more decodes
  // Progress of the current admission:
  size_t prefilled = 0;         // prompt tokens in the cache
  size_t layers_done = 0;       // layers its prompt went through (prefilled layer by layer)
  size_t lookahead_done = 0;    // look-ahead tokens in the cache
  int32_t lookahead_next = -1;  // greedy token the next look-ahead step feeds
  size_t appended = 0;          // generated tokens in the cache (after compression)
  std::vector<uint32_t> kept;   // [layer * model kv heads]: tokens kept by compression
  size_t admitted_at = 0;       // admission order (preemption picks the latest)
  size_t preemptions = 0;
  // Another sample of sequence `sample_of`'s request (0: none); see add_sample().
  uint64_t sample_of = 0;
  // The compressed prompt blocks it references with the other samples (null: its own only).
  std::shared_ptr<SharedPrompt> shared;
  // Prefix caching: whether its prompt may start from cached spans and leave its own (the engine
  // decides; the scheduler then takes only a prompt kept whole, without prompt logprobs or
  // look-ahead). A request's later samples fork from its first and hold its spans through the
  // shared prompt; only one that prefills alone (preempted, or its source gone) takes them.
  bool cache_prefix = false;
  std::vector<uint64_t> prefix;  // keys of the cached spans its cache starts with, in order
  size_t cached_tokens = 0;      // prompt tokens its first admission found cached
  // Compressed context: the first context_tokens prompt tokens (0: none; see above).
  size_t context_tokens = 0;
  bool is_context = false;    // the sequence of a cached context: never decodes
  bool made_context = false;  // its own admission had its context compressed (none cached)
  size_t suffix = 0;          // tokens appended after the cached context it forked from
  // Reconstruct scoring of its context (compression::kReconstruct): the repeat instruction's
  // tokens, and the most context tokens one piece of the repeat holds (the engine's choice,
  // within the model's context); its context sequence is built with them.
  std::vector<int32_t> repeat_instruction;
  size_t repeat_piece = 0;
  // A context sequence scored by reconstruction: the pieces fed after its prompt, each in
  // chunks as prompt chunks are, as its look-ahead (lookahead: the longest piece); their
  // queries score the context, and the cache rolls back after each (rewind_lookahead, then
  // end_lookahead after the last).
  compression::RepeatPieces repeat;
  // Plans in flight with an entry of it (pipeline stages: Scheduler::landed). Until they land
  // it gets no entry that needs their results, and it is not preempted.
  size_t in_flight = 0;
};

// What one planned entry does for its sequence (the engine processes the logits by it).
enum class EntryKind { kPrefillChunk, kLastPrefillChunk, kLookahead, kDecode };

struct SchedulerStats {
  size_t preemptions = 0;
  size_t steps = 0;
};

class Scheduler {
 public:
  // `model`: the whole model; `tp_size` ranks with the shard layout of each (their KV heads)
  // in each of `pp_size` pipeline stages (their layers: comm::stage_layers). Ranks are numbered
  // as the job's: stage * tp_size + tp rank.
  Scheduler(const ServingConfig& config, const model::ModelConfig& model, size_t tp_size,
            model::LmHeadMode lm_head, size_t pp_size = 1);

  // Queues a sequence (phase waiting). Throws std::invalid_argument when its prompt could never
  // fit the pool, even alone.
  void add(std::shared_ptr<ScheduledSeq> seq);
  // Queues another sample of seq->sample_of's request (same prompt and compression): it waits
  // aside until that sequence is compressed with nothing appended and seq->output holds the
  // first token drawn for it, then forks from it. Throws like add().
  void add_sample(std::shared_ptr<ScheduledSeq> seq);
  // The next step's plan; kinds[i] says what plan.entries[i] is. Sequences marked finished or
  // aborted since the last call are released (and reported first when report_finished).
  StepPlan schedule(std::vector<EntryKind>& kinds);
  // `plan`'s results are in (its sequences may be planned again on them).
  void landed(const StepPlan& plan);
  // A context sequence (is_context) was compressed in a step that landed (at its last prompt
  // chunk, or at the end of its repeat when it is scored by reconstruction): it keeps `kept`
  // tokens per [layer][model KV head] and becomes a cached context.
  void context_compressed(uint64_t id, const std::vector<std::vector<size_t>>& kept);
  // Whether resident context sequence `id` is scored by its repeat (not at its last chunk).
  bool context_repeats(uint64_t id) const;
  bool is_context(uint64_t id) const { return id >= kFirstContextId; }
  size_t cached_contexts() const { return contexts_.size(); }
  // After the step ran: a sequence compressed in it takes its kept token counts (rank 0's
  // cache: model_kept_tokens()).
  void set_kept(ScheduledSeq& seq, const std::vector<std::vector<size_t>>& kept);
  // Removes a sequence (finished or aborted): its cache is released next step, and reported
  // first when `report`. Returns false when it had no cache (it was waiting): no report comes.
  bool finish(uint64_t id, bool report);

  // Throws std::invalid_argument when s could never fit the pool, even alone (what add()
  // refuses). Any thread: it reads the configuration only.
  void check_fits_alone(const ScheduledSeq& s) const;

  size_t num_waiting() const { return waiting_.size() + samples_.size(); }
  size_t num_running() const { return resident_.size(); }
  bool has_work() const;
  const SchedulerStats& stats() const { return stats_; }
  // Blocks the resident sequences hold on `rank`, or reserve there until they are compressed
  // (prompt and look-ahead, uncompressed). Blocks of sequences that ended are not counted: they
  // are released first thing next step.
  size_t used_blocks(size_t rank) const;
  // Blocks the compressed resident sequences would hold on `rank` uncompressed (prompt and
  // generated tokens), next to what they hold (used_blocks counts both kinds): the saving.
  size_t uncompressed_blocks(size_t rank) const;
  size_t compressed_blocks(size_t rank) const;
  // True when used_blocks() is exactly what every rank's pool holds now: nothing waits for its
  // release and every resident sequence is compressed.
  bool accounts_exactly() const;
  bool releases_pending() const { return !to_release_.empty(); }
  // Blocks of cached prompt spans and compressed contexts on `rank` (all of them, or only those
  // no request references; a context referenced by a request counts its own blocks only when
  // all are asked for).
  size_t cached_blocks(size_t rank, bool unreferenced_only) const;
  // Prefix cache lookups and hits (zero when prefix caching is off).
  PrefixCacheStats prefix_stats() const;
  size_t capacity_blocks() const { return config_.kv_pool_blocks; }
  const ServingConfig& config() const { return config_; }

 private:
  // Blocks s holds (or reserves) on `rank` on its own: a sample's shared prompt blocks are
  // counted once, by shared_blocks().
  size_t blocks(size_t rank, const ScheduledSeq& s) const;
  // Full blocks of the resident samples' shared prompts on `rank`, each prompt once.
  size_t shared_blocks(size_t rank) const;
  size_t shared_blocks(size_t rank, const SharedPrompt& p) const;
  // What `rank` gets back when s leaves the pool: its own blocks, and its shared prompt's when
  // it is the last holder.
  size_t freed_by(size_t rank, const ScheduledSeq& s) const;
  // s no longer references its shared prompt (it left the pool).
  void drop_share(ScheduledSeq& s);
  // Forks the waiting samples whose source is ready, as far as the pool and max_num_seqs allow.
  void fork_samples(StepPlan& plan, std::vector<size_t>& used);
  // Blocks per layer `rank` reserves for s from admission until it is compressed: the peak its
  // prefill really reaches there.
  size_t reserved_per_layer(size_t rank, const ScheduledSeq& s) const;
  // Blocks on `rank` that one more token of s opens (heads whose last block is full).
  size_t growth(size_t rank, const ScheduledSeq& s) const;
  // End of the prompt chunk that starts at `start`.
  size_t chunk_end(const ScheduledSeq& s, size_t start) const;
  // True when s's prompt is prefilled layer by layer rather than in chunks of tokens.
  bool layered(const ScheduledSeq& s) const;
  // Layers of s's prompt that fit `tokens` of the step's budget (at least one), and the prompt
  // tokens a number of layers is worth: its rows times their share of the layers.
  size_t layers_within(const ScheduledSeq& s, size_t tokens) const;
  size_t layers_cost(const ScheduledSeq& s, size_t layers) const;
  void preempt(ScheduledSeq& s, StepPlan& plan);
  // Layers `rank` holds (its pipeline stage's).
  size_t layers(size_t rank) const;
  // Blocks one cached span takes on `rank`: one per layer and KV head it holds.
  size_t span_blocks(size_t rank) const { return layers(rank) * rank_heads_[rank].size(); }
  // Evicts the cached span to go first into `plan`, giving its blocks back in `used`; false when
  // every cached span is referenced.
  bool evict_span(StepPlan& plan, std::vector<size_t>& used);
  // s no longer references its cached spans (it left the pool).
  void drop_prefix(ScheduledSeq& s);
  // True when s's prompt may start from cached spans and leave its own: prefix caching is on,
  // the engine allows it, and the prompt is kept whole.
  bool prefix_eligible(const ScheduledSeq& s) const;
  // Looks up s's prompt at admission: its cached spans, referenced, and where its prefill starts.
  void attach_prefix(ScheduledSeq& s);
  // s's last prompt chunk is planned: its full spans not cached yet become cached after it runs.
  void cache_spans(ScheduledSeq& s, StepPlan& plan);
  // True when the cached context `context` can serve s: s's context starts with it, adds at most
  // the tail, and s asks for the same compression.
  bool serves(const ScheduledSeq& context, const ScheduledSeq& s) const;
  // Evicts the least recently used cached context that no request references; false when none.
  bool evict_context(StepPlan& plan, std::vector<size_t>& used);
  // Evicts a cached span, else a cached context; false when nothing cached is unreferenced.
  bool evict_cached(StepPlan& plan, std::vector<size_t>& used) {
    return evict_span(plan, used) || evict_context(plan, used);
  }
  enum class Admission { kAdmitted, kFrontChanged, kWait };
  // Admits s, the front of the queue, whose context is compressed on its own: it forks from its
  // cached context and appends the rest of its prompt; or its context's sequence goes in front
  // of it (kFrontChanged); or it waits (its context is being compressed, or no room).
  Admission admit_with_context(ScheduledSeq& s, StepPlan& plan, std::vector<EntryKind>& kinds,
                               std::vector<size_t>& used, const std::vector<size_t>& extra,
                               size_t& prefill_tokens);
  bool fits(const std::vector<size_t>& used, const std::vector<size_t>& extra) const;

  ServingConfig config_;
  size_t n_layers_, n_kv_heads_;
  size_t depth_;                                 // plans in flight at once: one per pipeline stage
  std::vector<std::vector<size_t>> rank_heads_;  // [rank] -> model KV heads it holds
  std::vector<std::pair<size_t, size_t>> rank_layers_;  // [rank] -> its stage's layers [first, end)
  std::deque<std::shared_ptr<ScheduledSeq>> waiting_;
  std::vector<std::shared_ptr<ScheduledSeq>> samples_;   // waiting to fork (add_sample)
  std::vector<std::shared_ptr<ScheduledSeq>> resident_;  // admission order
  std::vector<uint64_t> to_report_, to_release_;
  size_t admissions_ = 0;
  SchedulerStats stats_;
  std::unique_ptr<PrefixCache> prefix_;  // null: prefix caching off
  struct CachedContext {
    std::shared_ptr<ScheduledSeq> seq;  // compressed (kept, shared); not in resident_
    uint64_t last_used = 0;
    bool served = false;  // a request forked from it (without caching, it goes once unused)
  };
  std::vector<CachedContext> contexts_;
  // Context sequences take ids of their own, above any request's.
  static constexpr uint64_t kFirstContextId = uint64_t(1) << 62;
  uint64_t next_context_id_ = kFirstContextId;
  PrefixCacheStats context_stats_;  // context tokens looked up and found compressed
  uint64_t tick_ = 0;               // schedule() calls: the cache's clock
};

}  // namespace adakv::runtime

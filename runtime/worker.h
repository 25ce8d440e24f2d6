// What every rank runs: one loaded model (this rank's shard), its tokenizer, the backend it
// runs on, the block pool and the caches of the sequences in flight, and the execution of step
// plans (execute_step: one ragged forward over the plan's entries, after the caches it starts,
// forks, compresses or releases).
//
// Tensor parallelism: every rank of the group builds a Worker on the same model with the
// group's communicator; each loads only its shard. Pipeline parallelism (comm/groups.h): each
// stage's ranks load only the stage's layers (model/pipeline_stage.h); every rank of every
// stage follows the same plans, the residual crosses the stages inside the forward, and the last
// stage's logits come back to rank 0. Rank 0 (the root) is the one callers use:
// execute_step() broadcasts the plan as a command over the control plane (the host group),
// then every rank runs it in lock step; the layers' all-reduces go over the device group, the
// Ada-KV gain exchange over a communicator of its own. The other ranks call follow() and stay
// there until the root's Worker is destroyed (or shutdown() is called). An error in the middle
// of a command ends every rank of the job (the ranks could no longer agree on what comes next).
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "comm/control_plane.h"
#include "comm/device_group.h"
#include "comm/groups.h"
#include "comm/pipeline_channel.h"
#include "comm/world.h"
#include "kernels/backend.h"
#include "kernels/ops.h"
#include "model/llama.h"
#include "model/tokenizer/tokenizer.h"
#include "runtime/compression/config.h"
#include "runtime/kv/paged_kv_cache.h"
#include "runtime/sampler.h"
#include "runtime/step_plan.h"

namespace adakv::gguf {
class GgufFile;
}

namespace adakv::runtime {

struct GenerateRequest {
  std::vector<int32_t> prompt;
  size_t max_tokens = 256;
  SamplingParams sampling;
  bool stop_at_eos = true;  // end at any of Tokenizer::stop_ids(); false: ignore_eos
  compression::CompressionConfig compression;  // policy full: no compression
  kernels::KvDtype kv_dtype = kernels::KvDtype::kF32;
  size_t block_tokens = 16;
  // Log probabilities (runtime/logprobs.h) of each generated token with this many most likely
  // alternatives (0-20); -1: none.
  int logprobs = -1;
  // Also of the prompt's tokens after the first (completions' echo), with `logprobs`
  // alternatives: the prefill computes the logits of every prompt row.
  bool prompt_logprobs = false;
  // Serving loop: the first context_tokens prompt tokens are a context, compressed on their own
  // (scored without the rest), kept for later requests with the same context and compression,
  // and the rest of the prompt is appended uncompressed (0: the whole prompt is compressed as
  // usual). Must be smaller than the prompt.
  size_t context_tokens = 0;
  // generate_policies (runtime/policy_fork.h) only: a known answer, teacher-forced after the
  // prompt in each policy's cache (see GenerateResult::reference_nll). Empty: none.
  std::vector<int32_t> reference;
};

struct GenerateResult {
  std::vector<int32_t> tokens;  // generated ids (the stop token included when it stopped there)
  std::string text;             // decoded generated text (the stop token excluded)
  std::string finish_reason;    // "stop" (a stop token or string), "length" or "abort"
  size_t prompt_tokens = 0;
  double prefill_s = 0;  // until the prompt was compressed (look-ahead included)
  double decode_s = 0;
  double ttft_s = 0;         // serving loop: from the request's arrival to its first token
  size_t preemptions = 0;    // serving loop: times it was preempted and recomputed
  size_t cached_tokens = 0;  // serving loop: prompt tokens found cached, not computed
  // KV memory at the end of generation, in the pool's dtype, block rounding included:
  size_t kv_full_bytes = 0;                // what the uncompressed cache would hold
  size_t kv_kept_bytes = 0;                // what the sequence holds
  size_t kv_after_prefill_bytes = 0;       // held right after prefill (and compaction)
  size_t kv_full_after_prefill_bytes = 0;  // uncompressed, right after prefill
  size_t pool_free_after_prefill_bytes = 0;
  size_t pool_bytes = 0;
  CompressionReport compression;  // budgets per layer and head, scoring/allocation time
  // Tensor parallelism (one entry on one rank): KV bytes each rank holds at the end, and
  // whether every rank computed the same budget vector (compression.budgets).
  std::vector<size_t> rank_kv_kept_bytes;
  bool budgets_agree_across_ranks = true;
  double all_reduce_s = 0;       // this rank's time in the layers' all_reduce
  double budget_exchange_s = 0;  // time in the Ada-KV gain-matrix exchange
  // -log p (natural log) of each request.reference token given the prompt (compressed by this
  // result's policy) and the reference tokens before it; empty without a reference.
  std::vector<double> reference_nll;
  // With request.logprobs >= 0: one per generated token (of the distribution it was sampled
  // from, after penalties and biases, at temperature 1).
  std::vector<TokenLogprob> logprobs;
  // With request.prompt_logprobs: one per prompt token after the first, [i] for prompt[i + 1]
  // (of the raw logits of the prompt row before it).
  std::vector<TokenLogprob> prompt_logprobs;
};

// What one step of the serving loop gives back, on rank 0.
struct StepResult {
  // The logits of the plan's entries that want them, [rows][vocab] in entry order: the only
  // rows downloaded from the backend.
  std::vector<float> logits;
  std::vector<GenerateResult> reports;  // parallel to plan.report
  // Tokens each [layer][model kv head] holds, for every sequence compressed in this step (its
  // prompt and look-ahead done) or forked in it: the budget vector every rank computed.
  std::map<uint64_t, std::vector<std::vector<size_t>>> kept;
  // The window scores of plan.gather_scores' recording sequences, for the whole model:
  // [layer] -> [model kv head][prefix] (empty for a layer that was not scored).
  std::map<uint64_t, std::vector<std::vector<float>>> scores;
  // Pipeline stages: the seconds the last stage had waited for its input (the residual from
  // the stage before) by the end of this step, since the job started.
  double last_stage_wait_s = 0;
};

// Called on rank 0 with each decode step's logits [vocab] before sampling (tests, logprobs).
using LogitsObserver = std::function<void(const float* logits, size_t vocab)>;

class Worker {
 public:
  // Loads the model at `path` (resolve names with resolve_model first). `tp` (not owned,
  // outliving the engine) is the tensor-parallel group; null or one rank: no parallelism.
  // `world` is this process's place in the job (built once at start-up: launcher/job.h); its
  // tensor-parallel rank and size must be tp's (throws std::invalid_argument otherwise).
  explicit Worker(const std::string& path, comm::Communicator* tp = nullptr,
                  const comm::World& world = comm::World::single());
  explicit Worker(std::shared_ptr<const gguf::GgufFile> file, comm::Communicator* tp = nullptr,
                  const comm::World& world = comm::World::single());
  // Pipeline stages: `groups` (not owned, outliving the engine) as launcher/job.h builds them;
  // world's tp and pp places must be the groups' (throws std::invalid_argument otherwise).
  Worker(const std::string& path, const comm::Groups& groups, const comm::World& world);
  Worker(std::shared_ptr<const gguf::GgufFile> file, const comm::Groups& groups,
         const comm::World& world);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  bool is_root() const { return control_.is_root(); }
  const comm::World& world() const { return world_; }
  // Ranks of this rank's tensor-parallel group (one pipeline stage).
  size_t tp_size() const { return tp_ ? size_t(tp_->size()) : 1; }
  // Ranks of the job (every stage): the control plane's.
  size_t job_size() const { return size_t(control_.size()); }
  // Non-root ranks: runs the root's commands until it shuts down; returns 0.
  int follow();
  // Root: tells the other ranks to leave follow() (the destructor does it too).
  void shutdown();

  const model::LlamaModel& model() const { return model_; }
  const tokenizer::Tokenizer& tokenizer() const { return tokenizer_; }
  tokenizer::Tokenizer& tokenizer() { return tokenizer_; }  // --chat-template sets its template

  // Tokenizes a prompt; `chat` wraps it as one user turn of the model's chat template.
  std::vector<int32_t> encode_prompt(const std::string& text, bool chat) const;

  // Validates a request (throws std::invalid_argument naming the problem); returns how many
  // tokens it may generate.
  size_t check_request(const GenerateRequest& request) const;

  // ---- The steps (runtime/engine.h and runtime/policy_fork.h drive them from rank 0) ----
  // Root: every rank (re)creates the block pool of `config`, dropping the caches of an earlier
  // loop.
  void configure_steps(const ServingConfig& config);
  // Root: every rank executes `plan` (see StepPlan); the result comes back on rank 0.
  StepResult execute_step(const StepPlan& plan);
  // Root: execute_step() in two halves, so that several plans are in flight at once under
  // pipeline stages. launch_step() sends `plan` to every rank and runs rank 0's share of it
  // (the first stage's layers) without waiting for the last stage's logits; finish_step()
  // returns the result of the oldest step launched and not yet finished, once its logits have
  // come back. Without stages launch_step() runs the whole step. Every launched step is
  // finished, in launch order, before the next configure_steps().
  void launch_step(const StepPlan& plan);
  StepResult finish_step();
  size_t steps_in_flight() const { return launched_.size(); }
  // Rank 0's pool of the serving loop.
  const BlockPool* step_pool() const { return step_pool_.get(); }
  // Largest prompt plus generation one request may ask for (the model's context).
  size_t context_length() const { return model_.config().context_length; }

  // Look-ahead tokens a prefill of an n_prompt-token prompt decodes for policy c: c.lookahead
  // capped by the context, 0 when c keeps everything or scores nothing.
  size_t lookahead_steps(const compression::CompressionConfig& c, size_t n_prompt) const;
  // Root: zeroes the time counters that reports carry (layer all-reduces, gain exchange).
  void reset_stats();

 private:
  // Collective: the rows of every model KV head from each rank's rows of its own heads
  // ([own heads][width] per rank; replicas after the first are skipped).
  // Under pipeline stages, `layer`'s rows come from the ranks of the stage holding it (every
  // rank calls it for every layer).
  std::vector<float> gather_heads(const std::vector<float>& own, size_t width,
                                  size_t layer = 0) const;
  // Collective under pipeline stages: the [layer][model kv head] tokens of `cache` for the whole
  // model (each stage fills its own layers). Without stages: the cache's own.
  std::vector<std::vector<size_t>> whole_model_kept(const PagedKvCache& cache) const;
  // The placement (tp rank, stage) of job rank r, and whether it holds `layer`.
  bool rank_holds(size_t r, size_t layer) const;
  // The cache's head group: this rank's KV heads among the model's, and the gain exchange.
  HeadGroup head_group() const;
  // Collective: fills the whole-model budgets, per-rank bytes and comm times of `result`.
  void gather_report(const PagedKvCache& cache, GenerateResult& result) const;
  // Root: sends `command` to the other ranks, then runs `body` (this rank's share of it). A
  // command that fails midway ends the job.
  template <class Body>
  auto drive(const struct EngineCommand& command, Body&& body) const -> decltype(body());
  [[noreturn]] void fail_job(const std::exception& e) const;

  // Every rank's share of a step (reports are collective); the result is rank 0's. With
  // `logits_pending` (rank 0 under pipeline stages), the last stage's logits are left to
  // receive (last_stage_logits) and *logits_pending says whether any come.
  StepResult run_step(const StepPlan& plan, bool* logits_pending = nullptr);
  // Rank 0: `logits` in host memory; empty elsewhere. Under pipeline stages the last stage
  // posts its rows to rank 0, which receives them here unless `receive` is false.
  std::vector<float> host_logits(const model::Logits& logits, bool receive = true) const;
  // Rank 0 under pipeline stages: the rows the last stage posted for the oldest step, and its
  // input wait so far (StepResult::last_stage_wait_s).
  std::vector<float> last_stage_logits(double& wait_s) const;
  void run_configure_steps(const ServingConfig& config);

  // A serving sequence's cache, and what it held right after compression (for its report).
  struct StepSequence {
    std::unique_ptr<PagedKvCache> cache;
    size_t prompt_tokens = 0;
    bool compressed = false;
    // [prompt tokens][d_model] in backend memory: the residual stream of a prompt prefilled
    // layer by layer, between its steps.
    kernels::Buffer residual;
    size_t after_prefill_bytes = 0, full_after_prefill_bytes = 0, pool_free_after_prefill = 0;
  };

  comm::World world_;
  std::unique_ptr<comm::Communicator> single_;  // when no group is given
  comm::ControlPlane control_;
  comm::Communicator* tp_ = nullptr;  // this stage's tensor-parallel group; null on one rank
  std::unique_ptr<kernels::Backend> backend_;  // what the model and the KV pools run on
  // The layers' collectives (a communicator of their own); null on one rank.
  std::unique_ptr<comm::DeviceGroup> device_group_;
  // The host group's Ada-KV gain exchange (a communicator of its own, so that its collectives
  // never interleave with the control plane's); null on one rank.
  std::unique_ptr<comm::Communicator> exchange_group_;
  // Pipeline stages: scope global's gain exchange over every rank of every stage, the residual
  // channel, and the host messages of the pipeline (the last stage's logits to rank 0).
  std::unique_ptr<comm::Communicator> global_exchange_;
  std::unique_ptr<comm::PipelineChannel> pipeline_;
  std::unique_ptr<comm::Communicator> pipe_host_;
  model::LlamaModel model_;
  tokenizer::Tokenizer tokenizer_;
  bool shut_down_ = false;
  std::unique_ptr<BlockPool> step_pool_;
  std::map<uint64_t, StepSequence> step_seqs_;
  // Cached prompt spans (runtime/prefix_cache.h) by key: their blocks in the step pool
  // (PagedKvCache::span_blocks), one reference each held here.
  std::map<uint64_t, std::vector<int32_t>> cached_spans_;
  // Forgets one cached span (every one), giving its blocks back.
  void drop_cached_span(std::map<uint64_t, std::vector<int32_t>>::iterator it);
  void drop_cached_spans();
  // Rank 0: the steps launched and not finished, oldest first.
  struct LaunchedStep {
    StepResult result;
    bool logits_pending = false;
  };
  std::deque<LaunchedStep> launched_;
};

}  // namespace adakv::runtime

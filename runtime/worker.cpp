#include "runtime/worker.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <stdexcept>
#include <string>

#include "comm/parallel_layout.h"
#include "model/gguf/gguf.h"
#include "model/model_file.h"
#ifdef ADAKV_HAVE_NCCL
#include "comm/nccl/nccl_communicator.h"
#endif
#include "runtime/engine_command.h"
#include "runtime/kv/block_pool.h"
#include "runtime/kv/paged_batch.h"

namespace adakv::runtime {
namespace {

EngineCommand make_command(EngineOp op) {
  EngineCommand c;
  c.op = op;
  return c;
}

// `world`'s pipeline stage of the model: its layers (comm::stage_layers), over `channel`.
model::LlamaModel load_model(std::shared_ptr<const gguf::GgufFile> file, comm::DeviceGroup* tp,
                             kernels::Backend& backend, const comm::World& world,
                             comm::PipelineChannel* channel) {
  auto config = model::ModelConfig::from_gguf(*file);
  const size_t rank = tp ? tp->rank() : 0, size = tp ? tp->size() : 1;
  const auto shard = model::ShardLayout::make(config, rank, size, model::lm_head_mode_from_env());
  model::PipelineStage stage;
  if (world.pp_size > 1) {
    const auto range =
        comm::stage_layers(static_cast<int>(config.n_layers), world.pp_size, world.pp_rank);
    stage = {size_t(world.pp_rank), size_t(world.pp_size), size_t(range.begin), size_t(range.end),
             channel};
  }
  auto weights = model::Weights::load(file, config, shard, backend, stage);
  return model::LlamaModel(std::move(config), std::move(weights), shard, tp, backend, stage);
}

// The backend named by ADAKV_BACKEND (the cluster config's `backend:`, which `adakv launch`
// passes to every rank); cpu when unset. A CUDA backend takes the GPU of the rank's local rank.
std::unique_ptr<kernels::Backend> backend_from_env(const comm::World& world) {
  const char* name = std::getenv("ADAKV_BACKEND");
  return kernels::make_backend(kernels::backend_kind_from_string(name && *name ? name : "cpu"),
                               world.local_rank);
}

// The device group of a tensor-parallel rank (null on one rank). A backend without a stream (the
// CPU's) takes MPI over a duplicate of the host group, inside run_on_host. A device backend
// takes NCCL on its stream when every rank of the group has a GPU of its own, else MPI staged
// through host memory (several ranks on one GPU, which NCCL refuses); ADAKV_DEVICE_GROUP=nccl
// or =staged forces the choice. Every rank of the group decides the same (a collective on tp).
std::unique_ptr<comm::DeviceGroup> make_device_group(comm::Communicator* tp,
                                                     const comm::World& world,
                                                     kernels::Backend& backend) {
  if (!tp || tp->size() == 1) return nullptr;
  void* stream = backend.native_stream();
  if (!stream) return std::make_unique<comm::DeviceGroup>(tp->duplicate(), backend);
  const char* env = std::getenv("ADAKV_DEVICE_GROUP");
  const std::string choice = env ? env : "";
  if (!choice.empty() && choice != "nccl" && choice != "staged") {
    throw std::invalid_argument("ADAKV_DEVICE_GROUP is '" + choice + "', not nccl or staged");
  }
#ifdef ADAKV_HAVE_NCCL
  const int devices = kernels::device_count(backend.kind());
  float shared = world.local_rank >= devices ? 1.0f : 0.0f;
  tp->all_reduce(&shared, 1, comm::ReduceOp::kMax);
  if (choice == "nccl" || (choice.empty() && shared == 0.0f)) {
    comm::World placed = world;
    placed.device = devices > 0 ? world.local_rank % devices : 0;
    return std::make_unique<comm::DeviceGroup>(
        comm::make_nccl_communicator(*tp, placed, stream, comm::NcclCompletion::kEnqueue), backend);
  }
#else
  (void)world;
  if (choice == "nccl") {
    throw std::runtime_error("ADAKV_DEVICE_GROUP=nccl: this build of adakv has no NCCL");
  }
#endif
  return std::make_unique<comm::DeviceGroup>(tp->duplicate(), backend,
                                             comm::DeviceGroup::Path::kStaged);
}

// `world` when its tensor-parallel place is tp's and its pipeline place pipe's.
comm::World checked_world(const comm::World& world, const comm::Groups& groups) {
  const comm::Communicator* tp = groups.tp;
  const int rank = tp ? tp->rank() : 0, size = tp ? tp->size() : 1;
  if (world.tp_rank != rank || world.tp_size != size) {
    throw std::invalid_argument("the job's world says tensor-parallel rank " +
                                std::to_string(world.tp_rank) + " of " +
                                std::to_string(world.tp_size) + ", the group rank " +
                                std::to_string(rank) + " of " + std::to_string(size));
  }
  const comm::Communicator* pipe = groups.pipe;
  const int stage = pipe ? pipe->rank() : 0, stages = pipe ? pipe->size() : 1;
  if (world.pp_rank != stage || world.pp_size != stages) {
    throw std::invalid_argument("the job's world says pipeline stage " +
                                std::to_string(world.pp_rank) + " of " +
                                std::to_string(world.pp_size) + ", the pipeline group rank " +
                                std::to_string(stage) + " of " + std::to_string(stages));
  }
  if (stages > 1 && (!groups.job || groups.job->size() != stages * size)) {
    throw std::invalid_argument("pipeline stages need the job group of every stage's ranks");
  }
  return world;
}

}  // namespace

Worker::Worker(const std::string& path, comm::Communicator* tp, const comm::World& world)
    : Worker(model::open_model_file(path), comm::Groups{tp, tp, nullptr}, world) {}

Worker::Worker(std::shared_ptr<const gguf::GgufFile> file, comm::Communicator* tp,
               const comm::World& world)
    : Worker(std::move(file), comm::Groups{tp, tp, nullptr}, world) {}

Worker::Worker(const std::string& path, const comm::Groups& groups, const comm::World& world)
    : Worker(model::open_model_file(path), groups, world) {}

Worker::Worker(std::shared_ptr<const gguf::GgufFile> file, const comm::Groups& groups,
               const comm::World& world)
    : world_(checked_world(world, groups)),
      single_(groups.job ? nullptr : comm::make_single_communicator()),
      control_(groups.job ? *groups.job : *single_),
      tp_(groups.tp),
      backend_(backend_from_env(world_)),
      device_group_(make_device_group(groups.tp, world_, *backend_)),
      exchange_group_(tp_ && tp_->size() > 1 ? tp_->duplicate() : nullptr),
      global_exchange_(world_.pp_size > 1 ? groups.job->duplicate() : nullptr),
      pipeline_(world_.pp_size > 1
                    ? std::make_unique<comm::PipelineChannel>(groups.pipe->duplicate(), *backend_)
                    : nullptr),
      pipe_host_(world_.pp_size > 1 ? groups.pipe->duplicate() : nullptr),
      model_(load_model(file, device_group_.get(), *backend_, world_, pipeline_.get())),
      tokenizer_(tokenizer::vocab_from_gguf(*file)) {}

Worker::~Worker() {
  try {
    shutdown();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "adakv: could not stop the other ranks: %s\n", e.what());
  }
}

void Worker::shutdown() {
  if (!is_root() || shut_down_ || job_size() == 1) return;
  shut_down_ = true;
  control_.broadcast(encode_command(EngineCommand{}));
  control_.flush();
}

void Worker::reset_stats() {
  control_.comm().reset_stats();
  if (exchange_group_) exchange_group_->reset_stats();
  if (global_exchange_) global_exchange_->reset_stats();
  if (pipeline_) pipeline_->reset_stats();
  if (device_group_) device_group_->reset_stats();
}

void Worker::fail_job(const std::exception& e) const {
  // The other ranks wait inside a collective of this command: no message can reach them any
  // more. Exiting without MPI_Finalize makes mpirun end the whole job.
  std::fprintf(stderr, "adakv rank %d: error: %s (stopping every rank of the job)\n",
               control_.comm().rank(), e.what());
  std::fflush(stderr);
  std::_Exit(1);
}

int Worker::follow() {
  if (is_root()) throw std::logic_error("follow() is for the ranks other than 0");
  for (;;) {
    const auto command = decode_command(control_.broadcast({}));
    try {
      switch (command.op) {
        case EngineOp::kShutdown:
          return 0;
        case EngineOp::kConfigureSteps:
          run_configure_steps(command.serving);
          break;
        case EngineOp::kStep:
          run_step(command.plan);
          break;
      }
    } catch (const std::exception& e) {
      fail_job(e);
    }
  }
}

template <class Body>
auto Worker::drive(const EngineCommand& command, Body&& body) const -> decltype(body()) {
  if (job_size() == 1) return body();
  control_.broadcast(encode_command(command));
  try {
    return body();
  } catch (const std::exception& e) {
    fail_job(e);
  }
}

std::vector<float> Worker::host_logits(const model::Logits& logits, bool receive) const {
  if (!pipeline_) return is_root() ? model_.logits_to_host(logits) : std::vector<float>{};
  // Pipeline stages: the last stage's tensor-parallel rank 0 holds the whole rows; it posts
  // their count, then the rows, to rank 0 (stage 0 of the same pipeline), and goes on with the
  // next step without waiting for rank 0 to take them.
  if (world_.is_last_stage() && world_.tp_rank == 0) {
    const std::vector<float> host = model_.logits_to_host(logits);
    const uint64_t count = host.size();
    const double wait_s = pipeline_->stats().recv_s;
    pipe_host_->post(&count, sizeof count, 0);
    pipe_host_->post(host.data(), count * sizeof(float), 0);
    pipe_host_->post(&wait_s, sizeof wait_s, 0);
    return {};
  }
  double wait_s = 0;
  return is_root() && receive ? last_stage_logits(wait_s) : std::vector<float>{};
}

std::vector<float> Worker::last_stage_logits(double& wait_s) const {
  uint64_t count = 0;
  const int last = world_.pp_size - 1;
  pipe_host_->recv(&count, sizeof count, last);
  std::vector<float> host(count);
  pipe_host_->recv(host.data(), count * sizeof(float), last);
  pipe_host_->recv(&wait_s, sizeof wait_s, last);
  return host;
}

void Worker::configure_steps(const ServingConfig& config) {
  if (!is_root()) throw std::logic_error("configure_steps() runs on rank 0");
  config.validate();
  EngineCommand command = make_command(EngineOp::kConfigureSteps);
  command.serving = config;
  drive(command, [&] { run_configure_steps(config); });
}

void Worker::drop_cached_span(std::map<uint64_t, std::vector<int32_t>>::iterator it) {
  for (int32_t id : it->second) step_pool_->release(id);
  cached_spans_.erase(it);
}

void Worker::drop_cached_spans() {
  while (!cached_spans_.empty()) drop_cached_span(cached_spans_.begin());
}

void Worker::run_configure_steps(const ServingConfig& config) {
  if (!launched_.empty()) {
    throw std::logic_error("configure_steps() while steps launched are not finished");
  }
  step_seqs_.clear();
  drop_cached_spans();
  step_pool_.reset();
  const kernels::KvBlockLayout layout{config.block_tokens, model_.local_config().head_dim,
                                      config.kv_dtype};
  step_pool_ = std::make_unique<BlockPool>(layout, config.kv_pool_blocks, *backend_);
}

StepResult Worker::execute_step(const StepPlan& plan) {
  launch_step(plan);
  return finish_step();
}

void Worker::launch_step(const StepPlan& plan) {
  if (!is_root()) throw std::logic_error("launch_step() runs on rank 0");
  if (!step_pool_) throw std::logic_error("launch_step() before configure_steps()");
  EngineCommand command = make_command(EngineOp::kStep);
  command.plan = plan;
  drive(command, [&] {
    LaunchedStep step;
    step.result = run_step(plan, &step.logits_pending);
    launched_.push_back(std::move(step));
  });
}

StepResult Worker::finish_step() {
  if (launched_.empty()) throw std::logic_error("finish_step() without a step launched");
  LaunchedStep step = std::move(launched_.front());
  launched_.pop_front();
  if (step.logits_pending) {
    try {
      step.result.logits = last_stage_logits(step.result.last_stage_wait_s);
    } catch (const std::exception& e) {
      fail_job(e);
    }
  }
  return std::move(step.result);
}

StepResult Worker::run_step(const StepPlan& plan, bool* logits_pending) {
  StepResult result;
  auto seq = [&](uint64_t id) -> StepSequence& {
    const auto it = step_seqs_.find(id);
    if (it == step_seqs_.end()) {
      throw std::logic_error("step plan names sequence " + std::to_string(id) +
                             ", which has no cache");
    }
    return it->second;
  };
  // A sequence whose prompt (and look-ahead) is done: what it holds now is its compressed size.
  auto note_compressed = [&](uint64_t id, StepSequence& s) {
    const PagedKvCache& c = *s.cache;
    if (s.compressed || c.awaiting_lookahead() || c.next_position() < s.prompt_tokens) return;
    s.compressed = true;
    result.kept[id] = whole_model_kept(c);
    s.after_prefill_bytes = c.held_bytes();
    s.full_after_prefill_bytes = c.full_bytes();
    s.pool_free_after_prefill = step_pool_->free_bytes();
  };
  for (uint64_t id : plan.report) {
    StepSequence& s = seq(id);
    GenerateResult r;
    r.prompt_tokens = s.cache->report().prompt_tokens;
    r.kv_after_prefill_bytes = s.after_prefill_bytes;
    r.kv_full_after_prefill_bytes = s.full_after_prefill_bytes;
    r.pool_free_after_prefill_bytes = s.pool_free_after_prefill;
    r.pool_bytes = step_pool_->capacity() * step_pool_->block_bytes();
    r.compression = s.cache->report();
    gather_report(*s.cache, r);
    result.reports.push_back(std::move(r));
  }
  for (uint64_t id : plan.release) step_seqs_.erase(id);
  for (uint64_t key : plan.prefix_evict) {
    const auto it = cached_spans_.find(key);
    if (it == cached_spans_.end()) throw std::logic_error("step plan evicts a span not cached");
    drop_cached_span(it);
  }
  for (const auto& start : plan.start) {
    StepSequence s;
    s.cache = std::make_unique<PagedKvCache>(*step_pool_, model_.local_config(), start.compression,
                                             head_group(), start.record_scores);
    s.cache->begin_prompt(start.prompt_tokens, start.lookahead > 0);
    if (start.repeat_piece > 0) s.cache->expect_repeat(start.repeat_piece, start.repeat_offset);
    s.prompt_tokens = start.prompt_tokens;
    step_seqs_[start.id] = std::move(s);
  }
  // Each new cache's cached spans, in order (the links of one sequence are consecutive).
  for (size_t i = 0; i < plan.prefix_attach.size();) {
    const uint64_t id = plan.prefix_attach[i].id;
    std::vector<const std::vector<int32_t>*> spans;
    for (; i < plan.prefix_attach.size() && plan.prefix_attach[i].id == id; ++i) {
      const auto it = cached_spans_.find(plan.prefix_attach[i].key);
      if (it == cached_spans_.end() || plan.prefix_attach[i].index != spans.size()) {
        throw std::logic_error("step plan attaches a span not cached, or out of order");
      }
      spans.push_back(&it->second);
    }
    seq(id).cache->attach_spans(spans);
  }
  for (uint64_t id : plan.rewind_lookahead) seq(id).cache->rewind_lookahead();
  for (uint64_t id : plan.end_lookahead) {
    StepSequence& s = seq(id);
    s.cache->compress_after_lookahead();
    note_compressed(id, s);
  }
  for (const auto& fork : plan.fork) {
    StepSequence s;
    const PagedKvCache& source = *seq(fork.source).cache;
    s.cache = fork.share ? source.shared_copy() : source.compressed_copy(fork.compression);
    s.prompt_tokens = s.cache->report().prompt_tokens;
    step_seqs_[fork.id] = std::move(s);
    note_compressed(fork.id, step_seqs_[fork.id]);
  }
  // The pool after every fork of the step, the same for all of them.
  for (const auto& fork : plan.fork) {
    step_seqs_[fork.id].pool_free_after_prefill = step_pool_->free_bytes();
  }
  for (uint64_t id : plan.gather_scores) {
    const PagedKvCache& c = *seq(id).cache;
    const size_t n = c.report().prompt_tokens, window = c.config().window;
    const size_t prefix = n > window ? n - window : 0;
    auto& scores = result.scores[id];
    if (pipeline_) {
      // Which layers were scored, from the stages holding them; the others send zeros.
      const size_t L = model_.config().n_layers;
      std::vector<int64_t> scored(L, 0);
      for (size_t l = 0; l < L; ++l) scored[l] = !c.scores()[l].empty();
      control_.comm().all_reduce(scored.data(), L, comm::ReduceOp::kMax);
      const size_t own = model_.local_config().n_kv_heads * prefix;
      for (size_t l = 0; l < L; ++l) {
        if (!scored[l]) {
          scores.emplace_back();
          continue;
        }
        const auto& layer = c.scores()[l];
        scores.push_back(
            gather_heads(layer.empty() ? std::vector<float>(own, 0.0f) : layer, prefix, l));
      }
      continue;
    }
    for (const auto& layer : c.scores()) {
      scores.push_back(layer.empty() ? layer : gather_heads(layer, prefix));
    }
  }
  if (plan.entries.empty()) return result;
  std::vector<PagedBatch::Entry> entries;
  std::vector<int32_t> tokens;
  const size_t L = model_.config().n_layers, D = model_.config().d_model;
  for (const auto& e : plan.entries) {
    StepSequence& s = seq(e.id);
    PagedBatch::Entry entry{s.cache.get(), e.tokens.size(), e.logits, e.scored_text};
    if (e.layer_begin > 0 || e.layer_end < L) {
      entry.layer_begin = e.layer_begin;
      entry.layer_end = e.layer_end;
      const size_t bytes = e.tokens.size() * D * sizeof(float);
      if (s.residual.bytes() != bytes) s.residual = backend_->allocate(bytes);
      entry.residual = s.residual.as<float>();
    }
    entries.push_back(entry);
    tokens.insert(tokens.end(), e.tokens.begin(), e.tokens.end());
  }
  PagedBatch batch(*step_pool_, model_.local_config(), std::move(entries));
  const bool defer = logits_pending && pipeline_ && is_root();
  result.logits = host_logits(model_.forward_ragged(tokens.data(), batch), !defer);
  if (defer) *logits_pending = true;
  // Scope global on pipeline stages: every stage has scored its layers now.
  for (const auto& e : plan.entries) seq(e.id).cache->finish_step();
  for (const auto& e : plan.entries) {
    StepSequence& s = seq(e.id);
    if (e.layer_end >= L) s.residual.reset();
    note_compressed(e.id, s);
  }
  for (const auto& link : plan.prefix_insert) {
    std::vector<int32_t> ids = seq(link.id).cache->span_blocks(link.index);
    for (int32_t id : ids) step_pool_->share(id);
    if (!cached_spans_.emplace(link.key, std::move(ids)).second) {
      throw std::logic_error("step plan caches a span twice");
    }
  }
  return result;
}

std::vector<int32_t> Worker::encode_prompt(const std::string& text, bool chat) const {
  if (!chat) return tokenizer_.encode(text, /*parse_special=*/false);
  return tokenizer_.encode_chat({{"user", text}});
}

size_t Worker::check_request(const GenerateRequest& req) const {
  const auto& cfg = model_.config();
  const size_t n_prompt = req.prompt.size();
  if (n_prompt == 0) throw std::invalid_argument("the prompt is empty");
  if (n_prompt >= cfg.context_length) {
    throw std::invalid_argument(
        "the prompt has " + std::to_string(n_prompt) + " tokens; the model's context holds " +
        std::to_string(cfg.context_length) + " (prompt plus at least one generated token)");
  }
  for (int32_t id : req.prompt) {
    if (id < 0 || size_t(id) >= cfg.vocab_size) {
      throw std::invalid_argument("prompt token id " + std::to_string(id) +
                                  " is outside the vocabulary of " +
                                  std::to_string(cfg.vocab_size));
    }
  }
  if (n_prompt + req.reference.size() > cfg.context_length) {
    throw std::invalid_argument(
        "the prompt (" + std::to_string(n_prompt) + " tokens) and the reference answer (" +
        std::to_string(req.reference.size()) + ") do not fit the model's context of " +
        std::to_string(cfg.context_length));
  }
  for (int32_t id : req.reference) {
    if (id < 0 || size_t(id) >= cfg.vocab_size) {
      throw std::invalid_argument("reference token id " + std::to_string(id) +
                                  " is outside the vocabulary of " +
                                  std::to_string(cfg.vocab_size));
    }
  }
  req.sampling.validate(cfg.vocab_size);
  if (req.logprobs < -1 || req.logprobs > 20) {
    throw std::invalid_argument("logprobs must be in [0, 20], got " + std::to_string(req.logprobs));
  }
  // A prompt no longer than the window is kept whole (nothing to score); the window-vs-prompt
  // check of validate(n) is for windows a user asked for (the CLI applies it).
  req.compression.validate();
  return std::min(req.max_tokens, cfg.context_length - n_prompt);
}

size_t Worker::lookahead_steps(const compression::CompressionConfig& c, size_t n_prompt) const {
  const bool scores =
      c.policy != compression::Policy::kFull && c.policy != compression::Policy::kStreaming;
  if (c.lookahead == 0 || !scores || c.keeps_everything(n_prompt) || n_prompt <= c.window) {
    return 0;
  }
  return std::min(c.lookahead, model_.config().context_length - n_prompt);
}

HeadGroup Worker::head_group() const {
  HeadGroup g;
  const auto& shard = model_.shard();
  g.model_kv_heads = model_.config().n_kv_heads;
  g.first_kv_head = shard.kv_head_begin;
  g.contributes = shard.owns_kv_heads();
  g.kv_replicas = shard.kv_replicas;
  g.exchange = exchange_group_.get();
  if (pipeline_) {
    g.layer_begin = model_.stage().layer_begin;
    g.layer_end = model_.stage().end(model_.config().n_layers);
    g.global_exchange = global_exchange_.get();
  }
  return g;
}

void Worker::gather_report(const PagedKvCache& cache, GenerateResult& result) const {
  result.kv_full_bytes = cache.full_bytes();
  result.kv_kept_bytes = cache.held_bytes();
  result.rank_kv_kept_bytes = {result.kv_kept_bytes};
  result.budget_exchange_s = exchange_group_ ? exchange_group_->stats().all_reduce_s : 0.0;
  result.all_reduce_s = device_group_ ? device_group_->stats().all_reduce_s : 0.0;
  const size_t P = job_size();
  if (P == 1) return;
  auto& comm = control_.comm();
  const auto& cfg = model_.config();
  const size_t L = cfg.n_layers, Hm = cfg.n_kv_heads;
  // Every rank's int64 values [n], rank-major.
  std::vector<int64_t> mine, all;
  auto gather = [&] {
    all.resize(P * mine.size());
    comm.all_gather_bytes(mine.data(), mine.size() * sizeof(int64_t), all.data());
  };
  // Byte counts summed over the ranks (replicated KV heads count on every rank holding them).
  size_t* sums[] = {&result.kv_full_bytes,
                    &result.kv_kept_bytes,
                    &result.kv_after_prefill_bytes,
                    &result.kv_full_after_prefill_bytes,
                    &result.pool_free_after_prefill_bytes,
                    &result.pool_bytes};
  const size_t S = std::size(sums);
  mine.clear();
  for (size_t* b : sums) mine.push_back(static_cast<int64_t>(*b));
  gather();
  for (size_t* b : sums) *b = 0;
  result.rank_kv_kept_bytes.assign(P, 0);
  for (size_t r = 0; r < P; ++r) {
    for (size_t i = 0; i < S; ++i) {
      const auto b = static_cast<size_t>(all[r * S + i]);
      *sums[i] += b;
      if (sums[i] == &result.kv_kept_bytes) result.rank_kv_kept_bytes[r] = b;
    }
  }

  // Kept tokens of every model head, from the first rank holding it.
  auto& kept = result.compression.kept;
  if (!kept.empty()) {
    for (size_t l = 0; l < L; ++l) {
      std::vector<float> own(kept[l].begin(), kept[l].end());
      const auto whole = gather_heads(own, 1, l);
      kept[l].assign(whole.begin(), whole.end());
    }
  }

  // The budget vector of every rank, compared with the first rank holding each layer's (rank
  // 0's without pipeline stages; scope global gives every stage every layer's budgets).
  auto& budgets = result.compression.budgets;
  mine.assign(L * Hm, -1);
  for (size_t l = 0; l < budgets.size(); ++l) {
    for (size_t h = 0; h < Hm; ++h) mine[l * Hm + h] = static_cast<int64_t>(budgets[l][h]);
  }
  gather();
  result.budgets_agree_across_ranks = true;
  for (size_t l = 0; l < L; ++l) {
    size_t first = P;
    for (size_t r = 0; r < P; ++r) {
      if (!rank_holds(r, l)) continue;
      if (first == P) {
        first = r;
        continue;
      }
      for (size_t h = 0; h < Hm; ++h) {
        if (all[(r * L + l) * Hm + h] != all[(first * L + l) * Hm + h]) {
          result.budgets_agree_across_ranks = false;
        }
      }
    }
    if (pipeline_ && l < budgets.size()) {
      for (size_t h = 0; h < Hm; ++h) {
        budgets[l][h] = static_cast<size_t>(std::max<int64_t>(all[(first * L + l) * Hm + h], 0));
      }
    }
  }
}

bool Worker::rank_holds(size_t r, size_t layer) const {
  if (!pipeline_) return true;
  const int L = static_cast<int>(model_.config().n_layers);
  const int stage = static_cast<int>(r / tp_size()) % world_.pp_size;
  const auto range = comm::stage_layers(L, world_.pp_size, stage);
  return static_cast<int>(layer) >= range.begin && static_cast<int>(layer) < range.end;
}

std::vector<std::vector<size_t>> Worker::whole_model_kept(const PagedKvCache& cache) const {
  const size_t Hm = model_.config().n_kv_heads;
  auto kept = cache.model_kept_tokens(Hm);
  if (!pipeline_) return kept;
  // Each stage's own layers, zero elsewhere; the max over the job joins them (the ranks of a
  // stage agree on its layers' budgets).
  const size_t L = model_.config().n_layers;
  std::vector<int64_t> all(L * Hm, 0);
  for (size_t l = 0; l < L && l < kept.size(); ++l) {
    if (!model_.stage().holds(l, L)) continue;
    for (size_t h = 0; h < Hm; ++h) all[l * Hm + h] = static_cast<int64_t>(kept[l][h]);
  }
  control_.comm().all_reduce(all.data(), all.size(), comm::ReduceOp::kMax);
  kept.assign(L, std::vector<size_t>(Hm));
  for (size_t l = 0; l < L; ++l) {
    for (size_t h = 0; h < Hm; ++h) kept[l][h] = static_cast<size_t>(all[l * Hm + h]);
  }
  return kept;
}

std::vector<float> Worker::gather_heads(const std::vector<float>& own, size_t width,
                                        size_t layer) const {
  const size_t P = job_size(), T = tp_size();
  if (P == 1) return own;
  const auto& cfg = model_.config();
  std::vector<float> all(P * own.size()), out(cfg.n_kv_heads * width);
  control_.comm().all_gather(own.data(), own.size(), all.data());
  for (size_t r = 0; r < P; ++r) {
    if (!rank_holds(r, layer)) continue;
    const auto shard = model::ShardLayout::make(cfg, r % T, T, model_.shard().lm_head);
    if (!shard.owns_kv_heads()) continue;
    std::copy_n(all.begin() + r * own.size(), own.size(),
                out.begin() + shard.kv_head_begin * width);
  }
  return out;
}

}  // namespace adakv::runtime

#include "runtime/engine.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <stdexcept>

#include "model/gguf/gguf.h"
#include "runtime/engine_command.h"
#include "runtime/kv/block_pool.h"
#include "runtime/kv/paged_batch.h"
#include "runtime/llm_engine.h"

namespace adakv::runtime {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

EngineCommand make_command(EngineOp op, const GenerateRequest& request = {},
                           const std::vector<compression::CompressionConfig>& policies = {},
                           const std::vector<int32_t>& continuation = {}) {
  EngineCommand c;
  c.op = op;
  c.request = request;
  c.policies = policies;
  c.continuation = continuation;
  return c;
}

model::LlamaModel load_model(std::shared_ptr<const gguf::GgufFile> file, comm::DeviceGroup* tp,
                             kernels::Backend& backend) {
  auto config = model::ModelConfig::from_gguf(*file);
  const size_t rank = tp ? tp->rank() : 0, size = tp ? tp->size() : 1;
  const auto shard = model::ShardLayout::make(config, rank, size, model::lm_head_mode_from_env());
  auto weights = model::Weights::load(file, config, shard, backend);
  return model::LlamaModel(std::move(config), std::move(weights), shard, tp, backend);
}

// The backend named by ADAKV_BACKEND (the cluster config's `backend:`, which `adakv launch`
// passes to every rank); cpu when unset.
std::unique_ptr<kernels::Backend> backend_from_env() {
  const char* name = std::getenv("ADAKV_BACKEND");
  return kernels::make_backend(kernels::backend_kind_from_string(name && *name ? name : "cpu"));
}

}  // namespace

Engine::Engine(const std::string& path, comm::Communicator* tp)
    : Engine(std::make_shared<const gguf::GgufFile>(gguf::GgufFile::open(path)), tp) {}

Engine::Engine(std::shared_ptr<const gguf::GgufFile> file, comm::Communicator* tp)
    : single_(tp ? nullptr : comm::make_single_communicator()),
      control_(tp ? *tp : *single_),
      backend_(backend_from_env()),
      device_group_(tp && tp->size() > 1
                        ? std::make_unique<comm::DeviceGroup>(tp->duplicate(), *backend_)
                        : nullptr),
      model_(load_model(file, device_group_.get(), *backend_)),
      tokenizer_(tokenizer::vocab_from_gguf(*file)) {}

Engine::~Engine() {
  try {
    shutdown();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "adakv: could not stop the other ranks: %s\n", e.what());
  }
}

void Engine::shutdown() {
  if (!is_root() || shut_down_ || tp_size() == 1) return;
  shut_down_ = true;
  control_.broadcast(encode_command(EngineCommand{}));
}

void Engine::reset_comm_stats() const {
  control_.comm().reset_stats();
  if (device_group_) device_group_->reset_stats();
}

void Engine::fail_job(const std::exception& e) const {
  // The other ranks wait inside a collective of this command: no message can reach them any
  // more. Exiting without MPI_Finalize makes mpirun end the whole job.
  std::fprintf(stderr, "adakv rank %d: error: %s (stopping every rank of the job)\n",
               control_.comm().rank(), e.what());
  std::fflush(stderr);
  std::_Exit(1);
}

int Engine::follow() {
  if (is_root()) throw std::logic_error("follow() is for the ranks other than 0");
  for (;;) {
    const auto command = decode_command(control_.broadcast({}));
    try {
      switch (command.op) {
        case EngineOp::kShutdown:
          return 0;
        case EngineOp::kGeneratePolicies:
          run_generate_policies(command.request, command.policies);
          break;
        case EngineOp::kRecordPrompt:
          run_record_prompt(command.request);
          break;
        case EngineOp::kScoreContinuation:
          run_score_continuation(command.request, command.continuation, command.policies);
          break;
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
auto Engine::drive(const EngineCommand& command, Body&& body) const -> decltype(body()) {
  if (tp_size() == 1) return body();
  control_.broadcast(encode_command(command));
  try {
    return body();
  } catch (const std::exception& e) {
    fail_job(e);
  }
}

std::vector<float> Engine::host_logits(const model::Logits& logits) const {
  return is_root() ? model_.logits_to_host(logits) : std::vector<float>{};
}

BlockPool Engine::make_pool(const GenerateRequest& req, size_t max_new, size_t copies) const {
  const auto& cfg = model_.local_config();
  const kernels::KvBlockLayout layout{req.block_tokens, cfg.head_dim, req.kv_dtype};
  const size_t tokens = req.prompt.size() + max_new;
  const size_t blocks_per_head = (tokens + req.block_tokens - 1) / req.block_tokens;
  return BlockPool(layout, copies * blocks_per_head * cfg.n_layers * cfg.n_kv_heads, *backend_);
}

void Engine::configure_steps(const ServingConfig& config) {
  if (!is_root()) throw std::logic_error("configure_steps() runs on rank 0");
  config.validate();
  EngineCommand command = make_command(EngineOp::kConfigureSteps);
  command.serving = config;
  drive(command, [&] { run_configure_steps(config); });
}

void Engine::run_configure_steps(const ServingConfig& config) {
  step_seqs_.clear();
  step_pool_.reset();
  const kernels::KvBlockLayout layout{config.block_tokens, model_.local_config().head_dim,
                                      config.kv_dtype};
  step_pool_ = std::make_unique<BlockPool>(layout, config.kv_pool_blocks, *backend_);
}

StepResult Engine::execute_step(const StepPlan& plan) {
  if (!is_root()) throw std::logic_error("execute_step() runs on rank 0");
  if (!step_pool_) throw std::logic_error("execute_step() before configure_steps()");
  EngineCommand command = make_command(EngineOp::kStep);
  command.plan = plan;
  return drive(command, [&] { return run_step(plan); });
}

StepResult Engine::run_step(const StepPlan& plan) {
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
    result.kept[id] = c.model_kept_tokens(model_.config().n_kv_heads);
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
  for (const auto& start : plan.start) {
    StepSequence s;
    s.cache = std::make_unique<PagedKvCache>(*step_pool_, model_.local_config(), start.compression,
                                             head_group());
    s.cache->begin_prompt(start.prompt_tokens, start.lookahead > 0);
    s.prompt_tokens = start.prompt_tokens;
    step_seqs_[start.id] = std::move(s);
  }
  for (uint64_t id : plan.end_lookahead) {
    StepSequence& s = seq(id);
    s.cache->compress_after_lookahead();
    note_compressed(id, s);
  }
  if (plan.entries.empty()) return result;
  std::vector<PagedBatch::Entry> entries;
  std::vector<int32_t> tokens;
  const size_t L = model_.config().n_layers, D = model_.config().d_model;
  for (const auto& e : plan.entries) {
    StepSequence& s = seq(e.id);
    PagedBatch::Entry entry{s.cache.get(), e.tokens.size(), e.logits};
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
  result.logits = host_logits(model_.forward_ragged(tokens.data(), batch));
  for (const auto& e : plan.entries) {
    StepSequence& s = seq(e.id);
    if (e.layer_end >= L) s.residual.reset();
    note_compressed(e.id, s);
  }
  return result;
}

std::vector<int32_t> Engine::encode_prompt(const std::string& text, bool chat) const {
  if (!chat) return tokenizer_.encode(text, /*parse_special=*/false);
  return tokenizer_.encode(tokenizer::apply_chat_template({{"user", text}}),
                           /*parse_special=*/true);
}

size_t Engine::check_request(const GenerateRequest& req) const {
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
  req.sampling.validate();
  // A prompt no longer than the window is kept whole (nothing to score); the window-vs-prompt
  // check of validate(n) is for windows a user asked for (the CLI applies it).
  req.compression.validate();
  return std::min(req.max_tokens, cfg.context_length - n_prompt);
}

size_t Engine::lookahead_steps(const compression::CompressionConfig& c, size_t n_prompt) const {
  const bool scores =
      c.policy != compression::Policy::kFull && c.policy != compression::Policy::kStreaming;
  if (c.lookahead == 0 || !scores || c.keeps_everything(n_prompt) || n_prompt <= c.window) {
    return 0;
  }
  return std::min(c.lookahead, model_.config().context_length - n_prompt);
}

double Engine::look_ahead(PagedKvCache& source, std::vector<float> logits, size_t steps) const {
  const auto t0 = std::chrono::steady_clock::now();
  const size_t vocab = model_.config().vocab_size;
  for (size_t step = 0; step < steps; ++step) {
    int32_t next = 0;
    if (is_root()) {
      const float* row = logits.data() + logits.size() - vocab;
      next = int32_t(std::max_element(row, row + vocab) - row);
    }
    next = control_.broadcast_token(next);
    if (next == tokenizer_.eos_id()) break;
    logits = host_logits(model_.forward(&next, 1, source));
  }
  source.finish_lookahead();
  return seconds_since(t0);
}

HeadGroup Engine::head_group() const {
  HeadGroup g;
  const auto& shard = model_.shard();
  g.model_kv_heads = model_.config().n_kv_heads;
  g.first_kv_head = shard.kv_head_begin;
  g.contributes = shard.owns_kv_heads();
  if (tp_size() > 1) {
    g.exchange = [this](std::vector<float>& matrix) {
      const auto t0 = std::chrono::steady_clock::now();
      control_.comm().all_reduce(matrix.data(), matrix.size());
      exchange_s_ += seconds_since(t0);
    };
  }
  if (shard.kv_replicas > 1) {
    // Row h of a [model kv heads][prefix] matrix, zero elsewhere: the reduction over all ranks
    // combines the replicas of each head (scores are >= 0, so zero is neutral for max too).
    g.merge_replicas = [this, &shard, Hm = g.model_kv_heads](std::vector<float>& scores,
                                                             compression::GqaAggregation gqa) {
      const size_t prefix = scores.size() / shard.n_kv_heads;
      const bool mean = gqa == compression::GqaAggregation::kMean;
      std::vector<float> all(Hm * prefix, 0.0f);
      for (size_t i = 0; i < scores.size(); ++i) {
        all[shard.kv_head_begin * prefix + i] = mean ? scores[i] / shard.kv_replicas : scores[i];
      }
      const auto t0 = std::chrono::steady_clock::now();
      control_.comm().all_reduce(all.data(), all.size(),
                                 mean ? comm::ReduceOp::kSum : comm::ReduceOp::kMax);
      exchange_s_ += seconds_since(t0);
      std::copy_n(all.begin() + shard.kv_head_begin * prefix, scores.size(), scores.begin());
    };
  }
  return g;
}

void Engine::decode(const GenerateRequest& req, size_t max_new,
                    const std::vector<PagedKvCache*>& caches, std::vector<float> logits,
                    const std::function<void(std::string_view)>& on_text,
                    const LogitsObserver& on_logits,
                    const std::vector<GenerateResult*>& results) const {
  const size_t B = caches.size();
  const size_t vocab = model_.config().vocab_size;
  std::vector<Sampler> samplers(B, Sampler(req.sampling));
  std::vector<tokenizer::StreamDecoder> streams(B, tokenizer::StreamDecoder(tokenizer_));
  // Sequences still decoding, and which row of `logits` is theirs: every sequence starts from
  // the prefill's single row; after a batched step, row i belongs to running[i].
  std::vector<size_t> running(B);
  for (size_t b = 0; b < B; ++b) running[b] = b;
  std::vector<size_t> row(B, 0);
  for (auto* r : results) r->finish_reason = "length";
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t step = 0; step < max_new && !running.empty(); ++step) {
    std::vector<int32_t> next_tokens;
    std::vector<model::KvCache*> next_caches;
    std::vector<size_t> next_running;
    for (size_t b : running) {
      GenerateResult& result = *results[b];
      int32_t next = 0;
      if (is_root()) {
        const float* lg = logits.data() + row[b] * vocab;
        if (on_logits) on_logits(lg, vocab);
        next = samplers[b].sample(lg, vocab);
      }
      next = control_.broadcast_token(next);
      result.tokens.push_back(next);
      if (req.stop_at_eos && next == tokenizer_.eos_id()) {
        result.finish_reason = "stop";
        continue;
      }
      const std::string piece = streams[b].push(next);
      result.text += piece;
      if (on_text && !piece.empty()) on_text(piece);
      // The last token needs no forward: nothing will read its logits.
      if (step + 1 < max_new) {
        row[b] = next_running.size();
        next_tokens.push_back(next);
        next_caches.push_back(caches[b]);
        next_running.push_back(b);
      }
    }
    running = std::move(next_running);
    if (!running.empty()) {
      logits = host_logits(
          model_.forward_batch(next_tokens.data(), next_caches.data(), next_caches.size()));
    }
  }
  const double decode_s = seconds_since(t0);
  for (size_t b = 0; b < B; ++b) {
    GenerateResult& result = *results[b];
    const std::string tail = streams[b].flush();
    result.text += tail;
    if (on_text && !tail.empty()) on_text(tail);
    result.decode_s = decode_s;
    result.compression = caches[b]->report();
    gather_report(*caches[b], result);
  }
}

void Engine::gather_report(const PagedKvCache& cache, GenerateResult& result) const {
  result.kv_full_bytes = cache.full_bytes();
  result.kv_kept_bytes = cache.held_bytes();
  result.rank_kv_kept_bytes = {result.kv_kept_bytes};
  result.budget_exchange_s = exchange_s_;
  result.all_reduce_s = device_group_ ? device_group_->stats().all_reduce_s : 0.0;
  const size_t P = tp_size();
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
      const auto whole = gather_heads(own, 1);
      kept[l].assign(whole.begin(), whole.end());
    }
  }

  // The budget vector of every rank, compared with rank 0's.
  const auto& budgets = result.compression.budgets;
  mine.assign(L * Hm, -1);
  for (size_t l = 0; l < budgets.size(); ++l) {
    for (size_t h = 0; h < Hm; ++h) mine[l * Hm + h] = static_cast<int64_t>(budgets[l][h]);
  }
  gather();
  result.budgets_agree_across_ranks = true;
  for (size_t r = 1; r < P; ++r) {
    for (size_t i = 0; i < L * Hm; ++i) {
      if (all[r * L * Hm + i] != all[i]) result.budgets_agree_across_ranks = false;
    }
  }
}

std::vector<float> Engine::gather_heads(const std::vector<float>& own, size_t width) const {
  const size_t P = tp_size();
  if (P == 1) return own;
  const auto& cfg = model_.config();
  std::vector<float> all(P * own.size()), out(cfg.n_kv_heads * width);
  control_.comm().all_gather(own.data(), own.size(), all.data());
  for (size_t r = 0; r < P; ++r) {
    const auto shard = model::ShardLayout::make(cfg, r, P, model_.shard().lm_head);
    if (!shard.owns_kv_heads()) continue;
    std::copy_n(all.begin() + r * own.size(), own.size(),
                out.begin() + shard.kv_head_begin * width);
  }
  return out;
}

RecordedPrompt Engine::record_prompt(const GenerateRequest& req) const {
  if (!is_root()) throw std::logic_error("record_prompt() runs on rank 0");
  check_request(req);
  return drive(make_command(EngineOp::kRecordPrompt, req), [&] { return run_record_prompt(req); });
}

RecordedPrompt Engine::run_record_prompt(const GenerateRequest& req) const {
  const auto& cfg = model_.local_config();
  const size_t n = req.prompt.size(), L = cfg.n_layers;
  // Room for the full recording and for the copy, which never holds more than the recording.
  const size_t steps = lookahead_steps(req.compression, n);
  BlockPool pool = make_pool(req, steps, 2);
  PagedKvCache source(pool, cfg, req.compression, head_group(), /*record_scores=*/true);
  RecordedPrompt rec;
  const auto t0 = std::chrono::steady_clock::now();
  look_ahead(source, host_logits(model_.forward(req.prompt.data(), n, source)), steps);
  rec.prefill_s = seconds_since(t0);
  const auto copy = source.compressed_copy(req.compression);
  const size_t prefix = n > req.compression.window ? n - req.compression.window : 0;
  for (size_t l = 0; l < L; ++l) {
    const auto& s = source.scores()[l];
    rec.scores.push_back(s.empty() ? s : gather_heads(s, prefix));
    const auto& k = copy->report().kept[l];
    const auto kept = gather_heads(std::vector<float>(k.begin(), k.end()), 1);
    rec.kept.emplace_back(kept.begin(), kept.end());
  }
  return rec;
}

GenerateResult Engine::generate(const GenerateRequest& req,
                                const std::function<void(std::string_view)>& on_text,
                                const LogitsObserver& on_logits) {
  if (!is_root()) throw std::logic_error("generate() runs on rank 0; other ranks follow()");
  const size_t max_new = check_request(req), n_prompt = req.prompt.size();
  // A pool for this sequence uncompressed, its prompt in one forward (as a lone request in
  // the serving loop with a pool of its own).
  const auto& cfg = model_.local_config();
  const size_t tokens = n_prompt + std::max(max_new, lookahead_steps(req.compression, n_prompt));
  ServingConfig config;
  config.block_tokens = req.block_tokens;
  config.kv_dtype = req.kv_dtype;
  config.kv_pool_blocks =
      (tokens + req.block_tokens - 1) / req.block_tokens * cfg.n_layers * cfg.n_kv_heads;
  config.max_num_seqs = 1;
  config.max_num_batched_tokens = n_prompt;
  config.prefill_chunk = n_prompt;
  exchange_s_ = 0;
  reset_comm_stats();
  LlmEngine loop(*this, config);
  GenerateResult result;
  loop.add({req, {}, on_text, on_logits, [&](GenerateResult&& r) { result = std::move(r); }});
  loop.run_until_done();
  return result;
}

std::vector<GenerateResult> Engine::generate_policies(
    const GenerateRequest& req, const std::vector<compression::CompressionConfig>& policies) const {
  if (!is_root()) throw std::logic_error("generate_policies() runs on rank 0");
  if (policies.empty()) throw std::invalid_argument("generate_policies: no policy given");
  check_request(req);
  for (const auto& p : policies) p.validate();
  return drive(make_command(EngineOp::kGeneratePolicies, req, policies),
               [&] { return run_generate_policies(req, policies); });
}

std::vector<GenerateResult> Engine::run_generate_policies(
    const GenerateRequest& req, const std::vector<compression::CompressionConfig>& policies) const {
  const auto& cfg = model_.local_config();
  const size_t max_new = check_request(req), n_prompt = req.prompt.size();
  exchange_s_ = 0;
  reset_comm_stats();
  // The recording prefill keeps the full prompt; every policy's copy lives next to it (the
  // pool's pages are touched only as blocks are used, so room for whole copies costs nothing).
  // Look-ahead, when a policy that scores asks for it (all share the first one's scoring).
  size_t steps = 0;
  for (const auto& p : policies) steps = std::max(steps, lookahead_steps(p, n_prompt));
  // With a reference answer, one more copy per policy at a time scores it.
  const size_t room = std::max({max_new, steps, req.reference.size()});
  BlockPool pool = make_pool(req, room, policies.size() + 1 + (req.reference.empty() ? 0 : 1));
  PagedKvCache source(pool, cfg, policies.front(), head_group(), /*record_scores=*/true);

  const auto t0 = std::chrono::steady_clock::now();
  std::vector<float> logits = host_logits(model_.forward(req.prompt.data(), n_prompt, source));
  const double lookahead_s = look_ahead(source, logits, steps);
  const double prefill_s = seconds_since(t0);
  const std::vector<float> prefill_logits = req.reference.empty() ? std::vector<float>{} : logits;

  std::vector<GenerateResult> results(policies.size());
  std::vector<std::unique_ptr<PagedKvCache>> copies;
  std::vector<PagedKvCache*> caches;
  std::vector<GenerateResult*> outs;
  for (size_t i = 0; i < policies.size(); ++i) {
    GenerateResult& r = results[i];
    r.prompt_tokens = n_prompt;
    r.prefill_s = prefill_s;
    copies.push_back(source.compressed_copy(policies[i]));
    r.kv_after_prefill_bytes = copies.back()->held_bytes();
    r.kv_full_after_prefill_bytes = copies.back()->full_bytes();
    r.pool_bytes = pool.capacity() * pool.block_bytes();
    caches.push_back(copies.back().get());
    outs.push_back(&r);
  }
  // All policies decode together: one forward per step for every sequence still running.
  decode(req, max_new, caches, std::move(logits), {}, {}, outs);
  if (!req.reference.empty()) {
    for (size_t i = 0; i < policies.size(); ++i) {
      auto copy = source.compressed_copy(policies[i]);
      results[i].reference_nll = reference_nll(*copy, req.reference, prefill_logits);
    }
  }
  for (size_t i = 0; i < policies.size(); ++i) {
    auto& c = results[i].compression;
    c.score_s = source.report().score_s;
    if (lookahead_steps(policies[i], n_prompt) > 0) {  // full and streaming use no scores
      c.lookahead_s = lookahead_s;
      c.lookahead_tokens = source.report().lookahead_tokens;
    }
  }
  return results;
}

std::vector<ContinuationScore> Engine::score_continuation(
    const GenerateRequest& req, const std::vector<int32_t>& continuation,
    const std::vector<compression::CompressionConfig>& policies) const {
  if (!is_root()) throw std::logic_error("score_continuation() runs on rank 0");
  if (policies.empty()) throw std::invalid_argument("score_continuation: no policy given");
  check_request(req);
  const size_t context = model_.config().context_length, vocab = model_.config().vocab_size;
  if (continuation.size() < 2) {
    throw std::invalid_argument("the continuation to score needs at least 2 tokens");
  }
  if (req.prompt.size() + continuation.size() > context) {
    throw std::invalid_argument("prompt (" + std::to_string(req.prompt.size()) +
                                " tokens) plus continuation (" +
                                std::to_string(continuation.size()) +
                                ") do not fit the model's context of " + std::to_string(context));
  }
  for (int32_t id : continuation) {
    if (id < 0 || size_t(id) >= vocab) {
      throw std::invalid_argument("continuation token id " + std::to_string(id) +
                                  " is outside the vocabulary of " + std::to_string(vocab));
    }
  }
  for (const auto& p : policies) p.validate();
  return drive(make_command(EngineOp::kScoreContinuation, req, policies, continuation),
               [&] { return run_score_continuation(req, continuation, policies); });
}

}  // namespace adakv::runtime

// adakv bench batch: what the serving loop makes of the memory Ada-KV frees, in one run.
//  1. Batching: decode tokens/s of one sequence against N concurrent ones (decode-only steps,
//     median of --repeats runs each).
//     Then the prefill of one long prompt in chunks. Under pipeline stages, also the share of
//     the time the first stage waited for the last one's results and the last stage for its
//     input (their idle time: the bubble).
//  2. A fixed KV pool, long prompts, several policies side by side: sequences in flight (peak
//     and mean), output tokens/s, time to first token, preemptions, each against the full cache.
//     (--batching-only: part 1 alone.)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "kernels/cpu_threads.h"
#include "kernels/ops.h"
#include "launcher/commands.h"
#include "launcher/compression_flags.h"
#include "launcher/generate_output.h"
#include "launcher/job.h"
#include "launcher/parallel_flags.h"
#include "runtime/engine.h"
#include "runtime/model_registry.h"
#include "runtime/worker.h"

namespace adakv::cli {
namespace {

struct BenchBatchOptions {
  std::string model;
  size_t prompt_tokens = 4000;
  size_t requests = 16;
  size_t max_tokens = 128;
  double kv_pool_mb = 0;  // 0: room for `full_fits` full-cache sequences
  size_t full_fits = 2;
  std::vector<std::string> policies = {"full", "snapkv", "adakv"};
  size_t concurrency = 16;
  size_t concurrency_prompt = 512;
  size_t concurrency_tokens = 64;
  size_t repeats = 3;
  bool batching_only = false;
  size_t prefill_chunk = 512;
  size_t max_num_batched_tokens = 2048;
  int threads = 0;
  std::string text_file = "/usr/share/common-licenses/GPL-3";
  CompressionFlags compression;
  ParallelFlags parallel;
};

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(p * (v.size() - 1) + 0.5))];
}

// Prompt i: n tokens of the text (repeated as needed) from a start of its own, so no two
// prompts share a prefix.
std::vector<int32_t> prompt(const std::vector<int32_t>& text, size_t i, size_t n) {
  std::vector<int32_t> ids;
  for (size_t k = 0; ids.size() < n; ++k) ids.push_back(text[(i * 997 + k) % text.size()]);
  return ids;
}

struct LoopRun {
  runtime::LoopStats stats;
  std::vector<runtime::GenerateResult> results;
  double wall_s = 0;
};

LoopRun run_requests(runtime::Worker& engine, const runtime::ServingConfig& config,
                     const std::vector<runtime::GenerateRequest>& reqs) {
  LoopRun run;
  run.results.resize(reqs.size());
  runtime::Engine loop(engine, config);
  const double t0 = now_s();
  for (size_t i = 0; i < reqs.size(); ++i) {
    runtime::Request r;
    r.generate = reqs[i];
    r.on_done = [&run, i](runtime::GenerateResult&& g) { run.results[i] = std::move(g); };
    loop.add(std::move(r));
  }
  loop.run_until_done();
  run.wall_s = now_s() - t0;
  run.stats = loop.stats();
  return run;
}

int run_bench_batch(const BenchBatchOptions& o) {
  kernels::set_num_threads(o.threads);
  const std::string model_path = runtime::resolve_model(o.model);
  const auto job = job_groups(o.parallel.pipeline_stages());
  runtime::Worker engine(model_path, job.groups, job.world);
  if (!engine.is_root()) return engine.follow();
  std::ifstream in(o.text_file);
  if (!in) throw std::runtime_error("cannot read benchmark text " + o.text_file);
  std::stringstream ss;
  ss << in.rdbuf();
  const auto text = engine.tokenizer().encode(ss.str());
  std::string source;
  const auto defaults = o.compression.config(model_names(model_path), &source);
  const auto& local = engine.model().local_config();
  const kernels::KvBlockLayout layout{16, local.head_dim, o.compression.dtype()};
  const size_t heads = local.n_layers * local.n_kv_heads;
  auto blocks_for = [&](size_t tokens) { return (tokens + 15) / 16 * heads; };
  std::printf("model %s, %d threads, KV %s; compression: %s (from %s)\n\n", model_path.c_str(),
              kernels::num_threads(), o.compression.kv_dtype.c_str(),
              compression::describe(defaults).c_str(), source.c_str());

  runtime::ServingConfig base;
  base.kv_dtype = o.compression.dtype();
  base.prefill_chunk = o.prefill_chunk;
  base.max_num_batched_tokens = o.max_num_batched_tokens;
  base.max_num_seqs = std::max(o.requests, o.concurrency);

  // Request i: its own prompt of n tokens, `max_tokens` generated whatever they are.
  auto request = [&](size_t i, size_t n, size_t max_tokens,
                     const compression::CompressionConfig& policy) {
    runtime::GenerateRequest r;
    r.prompt = prompt(text, i, n);
    r.max_tokens = max_tokens;
    r.stop_at_eos = false;
    r.compression = policy;
    r.kv_dtype = base.kv_dtype;
    return r;
  };

  // 1. Batching pays: the same decode, one sequence and N at once.
  {
    auto full = defaults;
    full.policy = compression::Policy::kFull;
    runtime::ServingConfig c = base;
    c.kv_pool_blocks =
        blocks_for(o.concurrency_prompt + o.concurrency_tokens) * (o.concurrency + 1);
    std::vector<runtime::GenerateRequest> many;
    for (size_t i = 0; i < o.concurrency; ++i) {
      many.push_back(request(i, o.concurrency_prompt, o.concurrency_tokens, full));
    }
    auto decode_tps = [](const LoopRun& run) {
      return run.stats.decode_only_tokens / std::max(run.stats.decode_only_s, 1e-9);
    };
    std::vector<double> ones, batches, waits, last_waits;
    for (size_t rep = 0; rep < o.repeats; ++rep) {
      ones.push_back(decode_tps(run_requests(engine, c, {many.front()})));
      const auto batch = run_requests(engine, c, many);
      batches.push_back(decode_tps(batch));
      const double s = std::max(batch.stats.decode_only_s, 1e-9);
      waits.push_back(batch.stats.decode_only_wait_s / s);
      last_waits.push_back(batch.stats.decode_only_last_wait_s / s);
    }
    const double tps1 = percentile(ones, 0.5), tpsn = percentile(batches, 0.5);
    std::printf("batched decode (%zu-token prompts, %zu tokens each, full cache, median of %zu):\n",
                o.concurrency_prompt, o.concurrency_tokens, ones.size());
    std::printf("  1 sequence:   %8.1f tok/s\n", tps1);
    std::printf("  %zu sequences: %8.1f tok/s aggregate  = %.2fx one sequence\n", o.concurrency,
                tpsn, tpsn / std::max(tps1, 1e-9));
    const bool stages = engine.world().pp_size > 1;
    if (stages) {
      std::printf(
          "  %zu sequences: first stage idle %.1f%%, last stage idle %.1f%% of the decode "
          "time (bubble)\n",
          o.concurrency, 100 * percentile(waits, 0.5), 100 * percentile(last_waits, 0.5));
    }
    // One long prompt alone, in chunks (the first token ends its prefill).
    std::vector<double> prefill_tps, prefill_waits, prefill_last_waits;
    for (size_t rep = 0; rep < o.repeats; ++rep) {
      runtime::ServingConfig p = c;
      p.kv_pool_blocks = blocks_for(o.prompt_tokens + 1);
      const auto run = run_requests(engine, p, {request(0, o.prompt_tokens, 1, full)});
      prefill_tps.push_back(o.prompt_tokens / std::max(run.results[0].ttft_s, 1e-9));
      prefill_waits.push_back(run.stats.wait_s / std::max(run.stats.busy_s, 1e-9));
      prefill_last_waits.push_back(run.stats.last_wait_s / std::max(run.stats.busy_s, 1e-9));
    }
    std::printf("prefill of one %zu-token prompt in chunks of %zu: %8.1f tok/s", o.prompt_tokens,
                o.prefill_chunk, percentile(prefill_tps, 0.5));
    if (stages) {
      std::printf(", first stage idle %.1f%%, last stage idle %.1f%% (bubble)",
                  100 * percentile(prefill_waits, 0.5), 100 * percentile(prefill_last_waits, 0.5));
    }
    std::printf("\n\n");
    std::fflush(stdout);
  }
  if (o.batching_only) return 0;

  // 2. A fixed pool, long prompts, each policy.
  runtime::ServingConfig c = base;
  const size_t per_full = blocks_for(o.prompt_tokens + o.max_tokens);
  c.kv_pool_blocks = o.kv_pool_mb > 0 ? size_t(o.kv_pool_mb * 1048576.0 / layout.block_bytes())
                                      : per_full * o.full_fits;
  std::printf(
      "fixed KV pool: %.1f MiB (%zu blocks; %.2f full-cache sequences of %zu + %zu "
      "tokens), %zu requests\n",
      c.kv_pool_blocks * layout.block_bytes() / 1048576.0, c.kv_pool_blocks,
      double(c.kv_pool_blocks) / per_full, o.prompt_tokens, o.max_tokens, o.requests);
  std::printf("%-14s | %8s %8s | %10s %7s | %8s %8s | %6s | %8s\n", "policy", "peak", "mean",
              "out tok/s", "x full", "TTFT p50", "p90", "preempt", "wall s");
  double full_tps = 0;
  double full_peak = 0;
  for (const auto& name : o.policies) {
    auto policy = defaults;
    policy.policy = compression::parse_policy(name);
    const std::string budget = o.compression.budget.empty() ? "0.2" : o.compression.budget;
    compression::parse_budget(budget, policy);
    std::vector<runtime::GenerateRequest> reqs;
    for (size_t i = 0; i < o.requests; ++i) {
      reqs.push_back(request(i, o.prompt_tokens, o.max_tokens, policy));
    }
    const auto run = run_requests(engine, c, reqs);
    std::vector<double> ttft;
    for (const auto& r : run.results) ttft.push_back(r.ttft_s);
    const double tps = run.stats.generated_tokens / run.wall_s;
    const double mean = run.stats.steps ? run.stats.running_sum / run.stats.steps : 0;
    if (policy.policy == compression::Policy::kFull) {
      full_tps = tps;
      full_peak = double(run.stats.peak_running);
    }
    const std::string label =
        policy.policy == compression::Policy::kFull ? name : name + " " + budget;
    std::printf("%-14s | %8zu %8.2f | %10.2f %7.2f | %8.1f %8.1f | %6zu | %8.1f\n", label.c_str(),
                run.stats.peak_running, mean, tps, full_tps > 0 ? tps / full_tps : 0,
                percentile(ttft, 0.5), percentile(ttft, 0.9), run.stats.preemptions, run.wall_s);
    if (full_peak > 0 && policy.policy != compression::Policy::kFull) {
      std::printf("%-14s   in flight %.2fx the full cache's peak\n", "",
                  run.stats.peak_running / full_peak);
    }
    std::fflush(stdout);
  }
  std::printf(
      "\npeak/mean: sequences resident in the pool per step; out tok/s: generated tokens "
      "over the wall time of the whole batch; TTFT in seconds from the batch's start\n");
  return 0;
}

}  // namespace

void add_bench_batch(CLI::App* bench_app, Runner& selected) {
  auto o = std::make_shared<BenchBatchOptions>();
  auto* sub = bench_app->add_subcommand(
      "batch", "Serving loop: batched decode speed-up; sequences in flight at a fixed KV pool");
  sub->add_option("--model", o->model, "Model path or name (default: SmolLM2-135M-Instruct)");
  sub->add_option("--prompt-tokens", o->prompt_tokens, "Tokens of each long prompt (4000)");
  sub->add_option("--requests", o->requests, "Long-prompt requests per policy (16)");
  sub->add_option("--max-tokens", o->max_tokens, "Tokens generated per request (128)");
  sub->add_option("--kv-pool-mb", o->kv_pool_mb,
                  "KV pool per rank in MiB (default: room for --full-fits full-cache sequences)");
  sub->add_option("--full-fits", o->full_fits, "Full-cache sequences the default pool holds (2)");
  sub->add_option("--policies", o->policies, "Policies compared (full,snapkv,adakv)")
      ->delimiter(',');
  sub->add_option("--concurrency", o->concurrency, "Sequences decoding together (16)");
  sub->add_option("--concurrency-prompt", o->concurrency_prompt, "Their prompt tokens (512)");
  sub->add_option("--concurrency-tokens", o->concurrency_tokens, "Their generated tokens (64)");
  sub->add_option("--repeats", o->repeats, "Runs of the batching comparison (3; the median)")
      ->check(CLI::Range(1, 100));
  sub->add_flag("--batching-only", o->batching_only,
                "Only the batched decode and the prefill of one long prompt");
  sub->add_option("--prefill-chunk", o->prefill_chunk, "Prompt chunk per step (512)");
  sub->add_option("--max-num-batched-tokens", o->max_num_batched_tokens, "Tokens per step (2048)");
  sub->add_option("--threads", o->threads, "CPU threads (default: OMP_NUM_THREADS, else all)");
  sub->add_option("--text", o->text_file, "Text the prompts are cut from");
  o->compression.default_min_keep = compression::kGenerateMinKeep;
  o->compression.model_preset = true;
  o->compression.serving = true;
  o->compression.add_to(sub);
  o->parallel.add_to(sub);
  sub->callback([o, &selected] { selected = [o] { return run_bench_batch(*o); }; });
}

}  // namespace adakv::cli

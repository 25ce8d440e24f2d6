// adakv batch FILE.jsonl: many requests through one serving loop, like vLLM's offline batch.
// One JSON object per line (the HTTP API's fields: prompt or messages, max_tokens, temperature,
// top_p, top_k, min_p, seed, the penalties, logit_bias, stop, stop_token_ids, min_tokens,
// ignore_eos, kv_policy, kv_budget, kv_window); results as JSONL in
// input order, each line the object `generate --json` prints plus its "index" (a line that
// cannot run gets {"index", "error"} and the others still run). Progress goes to stderr.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "kernels/cpu_threads.h"
#include "kernels/ops.h"
#include "launcher/chat_template_flag.h"
#include "launcher/commands.h"
#include "launcher/compression_flags.h"
#include "launcher/engine_flags.h"
#include "launcher/generate_output.h"
#include "launcher/job.h"
#include "launcher/parallel_flags.h"
#include "runtime/engine.h"
#include "runtime/model_registry.h"
#include "runtime/request_json.h"
#include "runtime/worker.h"

namespace adakv::cli {
namespace {

struct BatchOptions {
  std::string model;
  std::string input;
  std::string output;  // "" or "-": stdout
  size_t max_tokens = 256;
  int threads = 0;
  bool quiet = false;
  EngineFlags engine;
  CompressionFlags compression;
  ParallelFlags parallel;
  ChatTemplateFlag chat_template;
};

nlohmann::json error_line(size_t index, const std::string& message, const std::string& param) {
  return {{"index", index},
          {"error",
           {{"message", message}, {"param", param.empty() ? nullptr : nlohmann::json(param)}}}};
}

class Progress {
 public:
  Progress(size_t total, bool quiet) : total_(total), quiet_(quiet), t0_(now()) {}
  void update(const runtime::Engine& loop, size_t done, bool final = false) {
    const double t = now();
    if (quiet_ || (!final && t - last_ < 0.2)) return;
    last_ = t;
    const size_t width = 30, filled = total_ ? width * done / total_ : width;
    const auto& st = loop.stats();
    std::fprintf(stderr,
                 "\r[%s%s] %zu/%zu done | %zu running, %zu waiting | %.1f tok/s | %zu preempted",
                 std::string(filled, '#').c_str(), std::string(width - filled, '.').c_str(), done,
                 total_, loop.scheduler().num_running(), loop.scheduler().num_waiting(),
                 st.generated_tokens / std::max(t - t0_, 1e-9), st.preemptions);
    if (final) std::fprintf(stderr, "\n");
    std::fflush(stderr);
  }

 private:
  static double now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  size_t total_;
  bool quiet_;
  double t0_, last_ = 0;
};

int run_batch(const BatchOptions& o) {
  kernels::set_num_threads(o.threads);
  const std::string model_path = runtime::resolve_model(o.model);
  const auto job = job_groups(o.parallel.pipeline_stages());
  runtime::Worker engine(model_path, job.groups, job.world);
  if (!engine.is_root()) return engine.follow();
  o.chat_template.apply(engine, /*renders_chats=*/false);  // only lines with messages need it

  std::ifstream in(o.input);
  if (!in) throw std::runtime_error("cannot read the batch file " + o.input);
  std::ofstream file;
  if (!o.output.empty() && o.output != "-") {
    file.open(o.output);
    if (!file) throw std::runtime_error("cannot write " + o.output);
  }
  std::ostream& out = file.is_open() ? file : std::cout;

  runtime::RequestDefaults defaults;
  std::string source;
  defaults.compression = o.compression.config(model_names(model_path), &source);
  defaults.kv_dtype = o.compression.dtype();
  defaults.max_tokens = o.max_tokens;
  const runtime::ServingConfig serving =
      o.engine.config(engine.model().local_config(), defaults.kv_dtype);
  if (!o.quiet) {
    std::fprintf(stderr, "[adakv] compression: %s; from %s\n",
                 compression::describe(defaults.compression).c_str(), source.c_str());
    std::fprintf(
        stderr, "[adakv] %s\n",
        describe_pool(serving, engine.model().local_config(), o.compression.kv_dtype).c_str());
  }
  runtime::Engine loop(engine, serving);

  // Lines are read and queued up front; results are written in input order as they complete.
  std::map<size_t, nlohmann::json> ready;
  std::vector<compression::CompressionConfig> configs;
  size_t total = 0, next_out = 0, done = 0;
  std::string line;
  auto flush_ready = [&] {
    for (auto it = ready.find(next_out); it != ready.end(); it = ready.find(next_out)) {
      out << it->second.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
      ready.erase(it);
      ++next_out;
    }
    out.flush();
  };
  while (std::getline(in, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank lines
    const size_t index = total++;
    try {
      const auto body = nlohmann::json::parse(line);
      runtime::Request r = runtime::request_from_json(body, engine, defaults);
      const auto policy = r.generate.compression;
      const std::string dtype = o.compression.kv_dtype;
      r.on_done = [&, index, policy, dtype](runtime::GenerateResult&& g) {
        auto j = result_json(g, policy, dtype, source);
        j["index"] = index;
        ready[index] = std::move(j);
        ++done;
      };
      loop.add(std::move(r));
    } catch (const runtime::RequestError& e) {
      ready[index] = error_line(index, e.what(), e.param());
      ++done;
    } catch (const nlohmann::json::exception& e) {
      ready[index] = error_line(index, std::string("line is not valid JSON: ") + e.what(), "");
      ++done;
    } catch (const std::invalid_argument& e) {
      ready[index] = error_line(index, e.what(), "");
      ++done;
    }
  }
  Progress progress(total, o.quiet);
  while (loop.has_work()) {
    loop.step();
    flush_ready();
    progress.update(loop, done);
  }
  flush_ready();
  progress.update(loop, done, true);
  if (!o.quiet) {
    const auto& st = loop.stats();
    std::fprintf(stderr,
                 "[adakv] %zu requests, %zu prompt and %zu generated tokens in %zu steps; "
                 "%zu preemptions; sequences in flight: peak %zu, mean %.1f\n",
                 total, st.prompt_tokens, st.generated_tokens, st.steps, st.preemptions,
                 st.peak_running, st.steps ? st.running_sum / st.steps : 0.0);
    // Cached prefixes nobody uses are free to take: counted free, and said apart.
    std::fprintf(stderr, "[adakv] pool free at the end: %zu of %zu blocks (%zu of them cached)\n",
                 loop.free_blocks() + loop.cached_free_blocks(), serving.kv_pool_blocks,
                 loop.cached_free_blocks());
  }
  return 0;
}

}  // namespace

void add_batch(CLI::App& app, Runner& selected) {
  auto o = std::make_shared<BatchOptions>();
  auto* sub = app.add_subcommand("batch", "Run a JSONL file of requests through one serving loop");
  sub->add_option("file", o->input, "Requests, one JSON object per line")->required();
  sub->add_option("--model", o->model, "GGUF path or the default model's name");
  sub->add_option("-o,--output", o->output, "Results JSONL (default: stdout)");
  sub->add_option("--max-tokens", o->max_tokens,
                  "Tokens generated for a request that gives no max_tokens (default 256)");
  sub->add_option("--threads", o->threads,
                  "CPU threads (default: OMP_NUM_THREADS, else all cores)");
  sub->add_flag("-q,--quiet", o->quiet, "No progress or summary on stderr");
  o->engine.add_to(sub);
  o->compression.default_min_keep = compression::kGenerateMinKeep;
  o->compression.model_preset = true;
  o->compression.serving = true;
  o->compression.add_to(sub);
  o->parallel.add_to(sub);
  o->chat_template.add_to(sub);
  sub->callback([o, &selected] { selected = [o] { return run_batch(*o); }; });
}

}  // namespace adakv::cli

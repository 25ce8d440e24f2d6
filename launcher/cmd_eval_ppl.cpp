// adakv eval ppl: perplexity under compression. Prose contexts of each length are prefilled
// once; every policy at every budget compresses a copy and scores the text's continuation
// against the full cache (perplexity, KL, top-1 agreement). Prints the table; writes it and
// the JSON results to --out.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu_threads.h"
#include "kernels/ops.h"
#include "launcher/commands.h"
#include "launcher/compression_flags.h"
#include "launcher/eval_runs.h"
#include "launcher/job.h"
#include "launcher/parallel_flags.h"
#include "runtime/eval/eval_runner.h"
#include "runtime/eval/ppl.h"
#include "runtime/model_registry.h"
#include "runtime/svg_output.h"
#include "runtime/worker.h"

namespace adakv::cli {
namespace {

struct PplOptions {
  std::string model;
  std::vector<size_t> lengths = {1024, 2048};
  std::vector<std::string> budgets = {"0.1", "0.2"};
  std::vector<std::string> policies = {"full", "snapkv", "adakv"};
  size_t trials = 2;
  size_t continuation = 128;
  uint64_t seed = 0;
  std::string out = "eval-results";
  std::vector<std::string> text;
  int threads = 0;
  CompressionFlags compression;
  ParallelFlags parallel;
};

int run_ppl_command(const PplOptions& o) {
  // The results are written at the end: an unwritable --out fails now, not after the run.
  if (is_job_root()) svg::prepare_output_dir(o.out);
  kernels::set_num_threads(o.threads);
  eval::PplSpec spec;
  spec.lengths = o.lengths;
  spec.trials = o.trials;
  spec.continuation = o.continuation;
  spec.seed = o.seed;
  spec.kv_dtype = o.compression.dtype();
  spec.text_files = o.text;
  spec.runs = eval_runs(o.compression, o.policies, o.budgets);

  const auto job = job_groups(o.parallel.pipeline_stages());
  runtime::Worker engine(runtime::resolve_model(o.model), job.groups, job.world);
  if (!engine.is_root()) return engine.follow();
  std::fprintf(stderr,
               "[eval] ppl: %zu contexts (%zu lengths x %zu), %zu runs per context, %zu threads\n",
               spec.lengths.size() * spec.trials, spec.lengths.size(), spec.trials,
               spec.runs.size(), size_t(kernels::num_threads()));
  const auto result =
      eval::run_ppl(engine, spec, [&](const eval::PplRecord& rec, size_t done, size_t n) {
        const auto& full = rec.runs.front();
        std::fprintf(stderr,
                     "[eval] %zu/%zu len %zu trial %zu: offset %zu, prefill %.2f s, total %.2f s, "
                     "full-cache ppl %.3f\n",
                     done, n, spec.lengths[rec.length_index], rec.trial, rec.offset, rec.prefill_s,
                     rec.total_s, std::exp(full.nll_sum / double(full.tokens)));
      });
  const std::string table = eval::format_ppl(result);
  std::cout << table << std::flush;
  namespace fs = std::filesystem;
  svg::write_text_file((fs::path(o.out) / "ppl_table.txt").string(), table);
  svg::write_text_file((fs::path(o.out) / "ppl_results.json").string(),
                       eval::to_json(result).dump(1) + "\n");
  std::fprintf(stderr, "[eval] wrote ppl_table.txt and ppl_results.json to %s\n", o.out.c_str());
  return 0;
}

}  // namespace

void add_eval_ppl(CLI::App* eval_app, Runner& selected) {
  auto o = std::make_shared<PplOptions>();
  auto* sub = eval_app->add_subcommand(
      "ppl", "Perplexity under compression: prose continuations scored against the full cache");
  sub->add_option("--model", o->model, "Model path or name (default: SmolLM2-135M-Instruct)");
  sub->add_option("--lengths", o->lengths, "Context lengths in tokens (raw text, no template)")
      ->delimiter(',')
      ->capture_default_str();
  sub->add_option("--budgets", o->budgets,
                  "Budgets: ratios (0.1,0.2,0.5 or 20%) or tokens per head (64,128,256)")
      ->delimiter(',')
      ->capture_default_str();
  sub->add_option("--policies", o->policies,
                  "Policies (full is always run as the reference): "
                  "full,streaming,snapkv,pyramidkv,adakv,ada-pyramid; adakv:global or "
                  "adakv:layer sets that policy's scope")
      ->delimiter(',')
      ->capture_default_str();
  sub->add_option("--trials", o->trials, "Contexts per length, each from its own text offset")
      ->check(CLI::Range(size_t{1}, size_t{1} << 20))
      ->capture_default_str();
  sub->add_option("--continuation", o->continuation,
                  "Tokens after each context; all but the first are scored")
      ->check(CLI::Range(size_t{2}, size_t{1} << 20))
      ->capture_default_str();
  sub->add_option("--seed", o->seed, "Seed of the context offsets")->capture_default_str();
  sub->add_option("--out", o->out, "Output folder for the table and JSON")->capture_default_str();
  sub->add_option("--text", o->text,
                  "Prose files (default: /usr/share/common-licenses texts, as eval niah)")
      ->delimiter(',');
  sub->add_option("--threads", o->threads,
                  "CPU threads (default: OMP_NUM_THREADS, else all cores)");
  o->compression.add_to(sub);
  o->parallel.add_to(sub);
  sub->callback([o, &selected] { selected = [o] { return run_ppl_command(*o); }; });
}

}  // namespace adakv::cli

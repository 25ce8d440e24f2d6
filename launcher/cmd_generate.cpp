// adakv generate: one prompt in, a continuation out (streamed), or one JSON object (--json).
// With --compare POLICY[,POLICY...], one prefill serves the chosen policy and each compared one,
// and their answers and KV memory are printed side by side.
// The compression settings start from the model's preset (configs/compression/<model>.yaml)
// with a per-head floor of kGenerateMinKeep tokens, unless --preset / flags say otherwise; the
// settings in force are printed on stderr (and under "compression" with --json).
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "kernels/cpu_threads.h"
#include "kernels/ops.h"
#include "launcher/chat_template_flag.h"
#include "launcher/commands.h"
#include "launcher/compression_flags.h"
#include "launcher/generate_output.h"
#include "launcher/job.h"
#include "launcher/parallel_flags.h"
#include "launcher/sampling_flags.h"
#include "launcher/text_file.h"
#include "runtime/engine.h"
#include "runtime/model_registry.h"
#include "runtime/policy_fork.h"
#include "runtime/worker.h"

namespace adakv::cli {
namespace {

struct GenerateOptions {
  std::string model;
  std::string prompt;
  std::string prompt_file;
  size_t max_tokens = 256;
  float temperature = 0.0f;
  float top_p = 1.0f;
  int top_k = 0;
  uint64_t seed = 0;
  bool chat = false;
  bool json = false;
  bool ignore_eos = false;
  int threads = 0;
  std::vector<std::string> compare;
  std::string logits_file;
  CompressionFlags compression;
  ParallelFlags parallel;
  ChatTemplateFlag chat_template;
  SamplingFlags sampling;
};

// One prefill, every policy; answers and memory side by side.
int run_compare(runtime::Worker& engine, runtime::GenerateRequest req, const GenerateOptions& o,
                const std::string& source) {
  std::vector<compression::CompressionConfig> policies = {req.compression};
  for (const auto& name : o.compare) {
    auto c = req.compression;
    c.policy = compression::parse_policy(name);
    // The chosen policy already runs first; naming it again would only repeat its row.
    if (c.policy != req.compression.policy) policies.push_back(c);
  }
  const auto results = runtime::generate_policies(engine, req, policies);
  if (o.json) {
    nlohmann::json all = nlohmann::json::array();
    for (size_t i = 0; i < results.size(); ++i) {
      all.push_back(result_json(results[i], policies[i], o.compression.kv_dtype, source));
    }
    std::cout << all.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << std::endl;
    return 0;
  }
  std::printf("prompt: %zu tokens, one prefill in %.2f s (%.1f tok/s)\n\n",
              results[0].prompt_tokens, results[0].prefill_s,
              per_second(results[0].prompt_tokens, results[0].prefill_s));
  std::printf("%-12s | %10s %10s %7s | %9s | %s\n", "policy", "KV MiB", "of full", "saved",
              "decode/s", "answer");
  for (size_t i = 0; i < results.size(); ++i) {
    const auto& r = results[i];
    std::string answer = r.text;
    for (char& ch : answer) {
      if (ch == '\n') ch = ' ';
    }
    const double share = double(r.kv_after_prefill_bytes) / r.kv_full_after_prefill_bytes;
    std::printf("%-12s | %10.2f %9.1f%% %6.1f%% | %9.1f | %s\n",
                compression::to_string(policies[i].policy), r.kv_after_prefill_bytes / 1048576.0,
                100 * share, 100 * (1 - share), per_second(r.tokens.size(), r.decode_s),
                answer.c_str());
  }
  std::printf("\nKV MiB: held right after prefill (%s, block rounding included)\n",
              o.compression.kv_dtype.c_str());
  return 0;
}

int run_generate(const GenerateOptions& o) {
  kernels::set_num_threads(o.threads);
  const std::string prompt = o.prompt_file.empty() ? o.prompt : read_text_file(o.prompt_file);
  const std::string model_path = runtime::resolve_model(o.model);
  const auto job = job_groups(o.parallel.pipeline_stages());
  runtime::Worker engine(model_path, job.groups, job.world);
  if (!engine.is_root()) return engine.follow();
  o.chat_template.apply(engine, o.chat);

  runtime::GenerateRequest req;
  req.prompt = engine.encode_prompt(prompt, o.chat);
  req.max_tokens = o.max_tokens;
  req.stop_at_eos = !o.ignore_eos;
  req.sampling.temperature = o.temperature;
  req.sampling.top_p = o.top_p;
  req.sampling.top_k = o.top_k;
  req.sampling.seed = o.seed;
  o.sampling.apply(req.sampling);
  std::string source;
  req.compression = o.compression.config(model_names(model_path), &source);
  req.kv_dtype = o.compression.dtype();
  o.compression.check_window(req.compression, req.prompt.size());
  if (!o.json) print_settings(req.compression, source);
  if (!o.compare.empty()) return run_compare(engine, req, o, source);

  std::function<void(std::string_view)> stream;
  if (!o.json) {
    stream = [](std::string_view s) {
      std::fwrite(s.data(), 1, s.size(), stdout);
      std::fflush(stdout);
    };
  }
  std::ofstream logits_out;
  runtime::LogitsObserver on_logits;
  if (!o.logits_file.empty()) {
    logits_out.open(o.logits_file, std::ios::binary | std::ios::trunc);
    if (!logits_out) throw std::runtime_error("cannot write --logits-file " + o.logits_file);
    on_logits = [&](const float* logits, size_t vocab) {
      logits_out.write(reinterpret_cast<const char*>(logits), std::streamsize(vocab * 4));
    };
  }
  const auto r = runtime::generate(engine, req, stream, on_logits);
  if (o.json) {
    std::cout << result_json(r, req.compression, o.compression.kv_dtype, source)
                     .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
              << std::endl;
  } else {
    std::printf("\n");
    print_summary(r, req.compression, o.compression.kv_dtype);
  }
  return 0;
}

}  // namespace

void add_generate(CLI::App& app, Runner& selected) {
  auto o = std::make_shared<GenerateOptions>();
  auto* sub = app.add_subcommand("generate", "Generate a continuation of a prompt");
  sub->add_option("--model", o->model, "Model path or name (default: SmolLM2-135M-Instruct)");
  auto* p = sub->add_option("--prompt", o->prompt, "Prompt text");
  auto* pf = sub->add_option("--prompt-file", o->prompt_file, "Read the prompt from a file");
  p->excludes(pf);
  sub->add_option("--max-tokens", o->max_tokens, "Tokens to generate at most")
      ->check(CLI::Range(size_t{1}, size_t{1} << 20));
  sub->add_option("--temperature", o->temperature, "Sampling temperature; 0 = greedy")
      ->check(CLI::Range(0.0f, 100.0f));
  sub->add_option("--top-p", o->top_p, "Nucleus sampling mass in (0, 1]");
  sub->add_option("--top-k", o->top_k, "Sample among the k most likely tokens; 0 = all")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--seed", o->seed, "Random seed for sampling");
  o->sampling.add_to(sub);
  sub->add_flag("--chat", o->chat, "Wrap the prompt in the model's chat template");
  sub->add_flag("--json", o->json, "Print one JSON object instead of streaming text");
  sub->add_option("--threads", o->threads,
                  "CPU threads (default: OMP_NUM_THREADS, else all cores)");
  sub->add_flag("--ignore-eos", o->ignore_eos,
                "Keep generating past the stop tokens (end of text, end of turn)");
  sub->add_option("--logits-file", o->logits_file,
                  "Write the logits of every decode step (float32 [steps][vocab]) to this file, "
                  "to compare runs (TP sizes, policies)");
  sub->add_option("--compare", o->compare,
                  "Also run these policies from the same prefill and print all side by side "
                  "(e.g. full,snapkv)")
      ->delimiter(',');
  o->compression.default_min_keep = compression::kGenerateMinKeep;
  o->compression.model_preset = true;
  o->compression.add_to(sub);
  o->parallel.add_to(sub);
  o->chat_template.add_to(sub);
  sub->callback([o, p, pf, &selected] {
    if (p->count() == 0 && pf->count() == 0) {
      throw CLI::RequiredError("--prompt or --prompt-file");
    }
    selected = [o] { return run_generate(*o); };
  });
}

}  // namespace adakv::cli

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

#include "kernels/ops.h"
#include "launcher/commands.h"
#include "launcher/compression_flags.h"
#include "launcher/job.h"
#include "launcher/text_file.h"
#include "model/gguf/gguf.h"
#include "runtime/compression/model_presets.h"
#include "runtime/engine.h"
#include "runtime/model_registry.h"

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
};

double per_second(size_t n, double s) {
  return n / std::max(s, 1e-9);
}

// Prompt tokens kept per KV head, averaged over every head of the model: the budgets every
// rank computed when the prefill compressed, else this rank's kept counts (all equal then).
double kept_tokens_per_head(const runtime::GenerateResult& r) {
  const auto& rows = r.compression.budgets.empty() ? r.compression.kept : r.compression.budgets;
  size_t sum = 0, heads = 0;
  for (const auto& layer : rows) {
    for (size_t k : layer) {
      sum += k;
      ++heads;
    }
  }
  return heads ? double(sum) / heads : double(r.prompt_tokens);
}

// "32", or "204.3" when the average is not a whole number.
std::string tokens_text(double t) {
  char buf[32];
  if (std::fabs(t - std::round(t)) < 0.05) {
    std::snprintf(buf, sizeof buf, "%.0f", t);
  } else {
    std::snprintf(buf, sizeof buf, "%.1f", t);
  }
  return buf;
}

// The settings in force, for --json.
nlohmann::json settings_json(const compression::CompressionConfig& c, const std::string& source) {
  nlohmann::json j = {{"policy", compression::to_string(c.policy)},
                      {"budget_ratio", c.budget_tokens ? nlohmann::json(nullptr)
                                                       : nlohmann::json(c.budget_ratio)},
                      {"budget_tokens", c.budget_tokens ? nlohmann::json(c.budget_tokens)
                                                        : nlohmann::json(nullptr)},
                      {"min_keep", c.min_keep},
                      {"window", c.window},
                      {"alpha", c.alpha},
                      {"pooling", compression::to_string(c.pooling)},
                      {"pool_kernel", c.pool_kernel},
                      {"pool_sink", c.pool_sink},
                      {"pool_shift", c.pool_shift},
                      {"gqa", compression::to_string(c.gqa)},
                      {"lookahead", c.lookahead},
                      {"lookahead_weight", c.lookahead_weight},
                      {"budget_scores", compression::to_string(c.budget_scores)},
                      {"scope", compression::to_string(c.scope)},
                      {"rule", compression::to_string(c.rule)},
                      {"summary", compression::describe(c)}};
  if (!source.empty()) j["source"] = source;
  return j;
}

nlohmann::json to_json(const runtime::GenerateResult& r,
                       const compression::CompressionConfig& policy, const std::string& dtype,
                       const std::string& source) {
  nlohmann::json j;
  j["tokens"] = r.tokens;
  j["text"] = r.text;
  j["finish_reason"] = r.finish_reason;
  j["prompt_tokens"] = r.prompt_tokens;
  j["kv"] = {{"full_bytes", r.kv_full_bytes},
             {"kept_bytes", r.kv_kept_bytes},
             {"after_prefill",
              {{"full_bytes", r.kv_full_after_prefill_bytes},
               {"kept_bytes", r.kv_after_prefill_bytes},
               {"pool_free_bytes", r.pool_free_after_prefill_bytes},
               {"pool_bytes", r.pool_bytes}}},
             {"policy", compression::to_string(policy.policy)},
             {"scope", compression::to_string(policy.scope)},
             {"dtype", dtype},
             {"budgets", r.compression.kept},
             {"kept_tokens_per_head", kept_tokens_per_head(r)},
             {"rank_kept_bytes", r.rank_kv_kept_bytes},
             {"budgets_agree_across_ranks", r.budgets_agree_across_ranks}};
  j["compression"] = settings_json(policy, source);
  j["tp"] = {{"size", r.rank_kv_kept_bytes.size()},
             {"all_reduce_s", r.all_reduce_s},
             {"budget_exchange_s", r.budget_exchange_s}};
  j["timing"] = {{"prefill_s", r.prefill_s},
                 {"decode_s", r.decode_s},
                 {"prefill_tokens_per_s", per_second(r.prompt_tokens, r.prefill_s)},
                 {"decode_tokens_per_s", per_second(r.tokens.size(), r.decode_s)},
                 {"score_s", r.compression.score_s},
                 {"allocate_s", r.compression.allocate_s},
                 {"compact_s", r.compression.compact_s},
                 {"lookahead_tokens", r.compression.lookahead_tokens},
                 {"lookahead_s", r.compression.lookahead_s}};
  return j;
}

void print_summary(const runtime::GenerateResult& r, const compression::CompressionConfig& policy,
                   const std::string& dtype) {
  std::fprintf(stderr,
               "[adakv] prompt %zu tokens, prefill %.2f s (%.1f tok/s); %zu generated, decode "
               "%.2f s (%.1f tok/s); finish: %s\n",
               r.prompt_tokens, r.prefill_s, per_second(r.prompt_tokens, r.prefill_s),
               r.tokens.size(), r.decode_s, per_second(r.tokens.size(), r.decode_s),
               r.finish_reason.c_str());
  // Bytes round up to whole blocks (16 tokens per head), so they can read 100% while tokens
  // were evicted: the tokens kept are what tells.
  const double kept = kept_tokens_per_head(r), n = double(r.prompt_tokens);
  std::fprintf(stderr,
               "[adakv] KV cache (%s, policy %s): kept %s of %zu prompt tokens per head on "
               "average (%.1f%%), evicted %s; %.2f MiB held of %.2f MiB uncompressed (%.1f%%, "
               "whole blocks)\n",
               dtype.c_str(), compression::to_string(policy.policy), tokens_text(kept).c_str(),
               r.prompt_tokens, 100.0 * kept / std::max(n, 1.0),
               tokens_text(std::max(0.0, n - kept)).c_str(), r.kv_kept_bytes / 1048576.0,
               r.kv_full_bytes / 1048576.0,
               100.0 * r.kv_kept_bytes / std::max<size_t>(r.kv_full_bytes, 1));
}

void print_settings(const compression::CompressionConfig& c, const std::string& source) {
  std::fprintf(stderr, "[adakv] compression: %s; from %s\n", compression::describe(c).c_str(),
               source.c_str());
}

// The names the model's preset may have: GGUF general.basename / size_label, then the file name.
std::vector<std::string> model_names(const std::string& path) {
  std::string basename, size_label;
  try {
    const auto file = gguf::GgufFile::open(path);
    basename = file.get_string("general.basename", "");
    size_label = file.get_string("general.size_label", "");
  } catch (const std::exception&) {
    // The engine loaded it already; metadata of an odd type just leaves the file name.
  }
  return compression::model_preset_names(basename, size_label, path);
}

// One prefill, every policy; answers and memory side by side.
int run_compare(const runtime::Engine& engine, runtime::GenerateRequest req,
                const GenerateOptions& o, const std::string& source) {
  std::vector<compression::CompressionConfig> policies = {req.compression};
  for (const auto& name : o.compare) {
    auto c = req.compression;
    c.policy = compression::parse_policy(name);
    // The chosen policy already runs first; naming it again would only repeat its row.
    if (c.policy != req.compression.policy) policies.push_back(c);
  }
  const auto results = engine.generate_policies(req, policies);
  if (o.json) {
    nlohmann::json all = nlohmann::json::array();
    for (size_t i = 0; i < results.size(); ++i) {
      all.push_back(to_json(results[i], policies[i], o.compression.kv_dtype, source));
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
  runtime::Engine engine(model_path, tp_group());
  if (!engine.is_root()) return engine.follow();

  runtime::GenerateRequest req;
  req.prompt = engine.encode_prompt(prompt, o.chat);
  req.max_tokens = o.max_tokens;
  req.stop_at_eos = !o.ignore_eos;
  req.sampling = {o.temperature, o.top_p, o.top_k, o.seed};
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
  const auto r = engine.generate(req, stream, on_logits);
  if (o.json) {
    std::cout << to_json(r, req.compression, o.compression.kv_dtype, source)
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
  sub->add_flag("--chat", o->chat, "Wrap the prompt in the model's chat template");
  sub->add_flag("--json", o->json, "Print one JSON object instead of streaming text");
  sub->add_option("--threads", o->threads,
                  "CPU threads (default: OMP_NUM_THREADS, else all cores)");
  sub->add_flag("--ignore-eos", o->ignore_eos, "Keep generating past the end-of-text token");
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
  sub->callback([o, p, pf, &selected] {
    if (p->count() == 0 && pf->count() == 0) {
      throw CLI::RequiredError("--prompt or --prompt-file");
    }
    selected = [o] { return run_generate(*o); };
  });
}

}  // namespace adakv::cli

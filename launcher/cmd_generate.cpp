// adakv generate: one prompt in, a continuation out (streamed), or one JSON object (--json).
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "kernels/ops.h"
#include "launcher/commands.h"
#include "launcher/compression_flags.h"
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
  int threads = 0;
  CompressionFlags compression;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read prompt file " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int run_generate(const GenerateOptions& o) {
  kernels::set_num_threads(o.threads);
  const std::string prompt = o.prompt_file.empty() ? o.prompt : read_file(o.prompt_file);
  runtime::Engine engine(runtime::resolve_model(o.model));

  runtime::GenerateRequest req;
  req.prompt = engine.encode_prompt(prompt, o.chat);
  req.max_tokens = o.max_tokens;
  req.sampling = {o.temperature, o.top_p, o.top_k, o.seed};
  req.compression = o.compression.config();
  req.kv_dtype = o.compression.dtype();

  std::function<void(std::string_view)> stream;
  if (!o.json) {
    stream = [](std::string_view s) {
      std::fwrite(s.data(), 1, s.size(), stdout);
      std::fflush(stdout);
    };
  }
  const auto r = engine.generate(req, stream);
  const double prefill_tps = r.prompt_tokens / std::max(r.prefill_s, 1e-9);
  const double decode_tps = r.tokens.size() / std::max(r.decode_s, 1e-9);

  if (o.json) {
    nlohmann::json j;
    j["tokens"] = r.tokens;
    j["text"] = r.text;
    j["finish_reason"] = r.finish_reason;
    j["prompt_tokens"] = r.prompt_tokens;
    j["kv"] = {{"full_bytes", r.kv_full_bytes},
               {"kept_bytes", r.kv_kept_bytes},
               {"after_prefill", {{"full_bytes", r.kv_full_after_prefill_bytes},
                                  {"kept_bytes", r.kv_after_prefill_bytes},
                                  {"pool_free_bytes", r.pool_free_after_prefill_bytes},
                                  {"pool_bytes", r.pool_bytes}}},
               {"policy", compression::to_string(req.compression.policy)},
               {"scope", compression::to_string(req.compression.scope)},
               {"dtype", o.compression.kv_dtype},
               {"budgets", r.compression.kept}};
    j["timing"] = {{"prefill_s", r.prefill_s},
                   {"decode_s", r.decode_s},
                   {"prefill_tokens_per_s", prefill_tps},
                   {"decode_tokens_per_s", decode_tps},
                   {"score_s", r.compression.score_s},
                   {"allocate_s", r.compression.allocate_s},
                   {"compact_s", r.compression.compact_s}};
    std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << std::endl;
  } else {
    std::printf("\n");
    std::fprintf(stderr,
                 "[adakv] prompt %zu tokens, prefill %.2f s (%.1f tok/s); %zu generated, decode "
                 "%.2f s (%.1f tok/s); finish: %s\n",
                 r.prompt_tokens, r.prefill_s, prefill_tps, r.tokens.size(), r.decode_s,
                 decode_tps, r.finish_reason.c_str());
    std::fprintf(stderr,
                 "[adakv] KV cache (%s, policy %s): %.2f MiB held of %.2f MiB uncompressed "
                 "(%.1f%%)\n",
                 o.compression.kv_dtype.c_str(), compression::to_string(req.compression.policy),
                 r.kv_kept_bytes / 1048576.0, r.kv_full_bytes / 1048576.0,
                 100.0 * r.kv_kept_bytes / std::max<size_t>(r.kv_full_bytes, 1));
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
  sub->add_option("--threads", o->threads, "CPU threads (default: all)");
  o->compression.add_to(sub);
  sub->callback([o, p, pf, &selected] {
    if (p->count() == 0 && pf->count() == 0) {
      throw CLI::RequiredError("--prompt or --prompt-file");
    }
    selected = [o] { return run_generate(*o); };
  });
}

}  // namespace adakv::cli

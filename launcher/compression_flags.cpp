#include "launcher/compression_flags.h"

#include <cstdlib>
#include <filesystem>
#include <stdexcept>

#include "kernels/quant.h"
#include "runtime/compression/model_presets.h"

namespace adakv::cli {
namespace {

namespace fs = std::filesystem;

// --preset NAME: a file, else configs/compression/NAME.yaml in the configs folders.
std::string preset_path(const std::string& spec) {
  std::error_code ec;
  if (fs::is_regular_file(spec, ec) || spec.find('/') != std::string::npos) return spec;
  std::string name = spec;
  if (name.size() > 5 && name.compare(name.size() - 5, 5, ".yaml") == 0)
    name.resize(name.size() - 5);
  const auto dirs = CompressionFlags::config_dirs();
  if (const auto match = compression::find_preset({name}, dirs)) return match->path;
  std::string looked;
  for (const auto& d : dirs) looked += (looked.empty() ? "" : ", ") + d + "/compression";
  throw std::invalid_argument("--preset " + spec + ": no such file, and no " + name + ".yaml in " +
                              (looked.empty() ? "any configs folder" : looked));
}

}  // namespace

std::vector<std::string> CompressionFlags::config_dirs() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
#ifdef ADAKV_SOURCE_DIR
  const std::string builtin = std::string(ADAKV_SOURCE_DIR) + "/configs";
#else
  const std::string builtin;
#endif
  return compression::config_dirs(std::getenv("ADAKV_CONFIGS"), ec ? "" : exe.string(), builtin);
}

void CompressionFlags::add_to(CLI::App* app_) {
  app = app_;
  app->add_option(
      "--preset", preset,
      model_preset
          ? "YAML compression preset: a file, a name in configs/compression (snapkv), or none "
            "for the built-in (official) settings. Default: the model's own preset, "
            "configs/compression/<model>.yaml (smollm2-135m.yaml for the default model), looked "
            "up in $ADAKV_CONFIGS, else next to the executable (build/adakv -> configs/), else "
            "the source tree; flags override its keys"
          : "YAML compression preset: a file or a name in configs/compression (snapkv); flags "
            "override its keys. Default: none, the official settings");
  app->add_option("--policy", policy,
                  "KV policy: full|streaming|snapkv|pyramidkv|adakv|ada-pyramid");
  app->add_option("--budget", budget,
                  "Average kept tokens per KV head, window included: a ratio of the prompt "
                  "(0.2 or 20%) or a token count (128); never below --min-keep");
  app->add_option(
      "--min-keep", min_keep,
      default_min_keep > 0
          ? "Floor of the budget: every KV head keeps at least this many prompt tokens on "
            "average, and a prompt of at most this many tokens is kept whole (default " +
                std::to_string(default_min_keep) +
                ": a 20% budget of a short chat prompt evicts its first tokens and changes the "
                "answer; 0: no floor, the official behaviour)"
          : std::string("Floor of the budget: every KV head keeps at least this many prompt "
                        "tokens on average, and a prompt of at most this many tokens is kept "
                        "whole (default 0: no floor, the official behaviour, so the published "
                        "results stay reproducible; generate's default is ") +
                std::to_string(compression::kGenerateMinKeep) + ")");
  app->add_option("--window", window, "Observation window W (default 32)");
  app->add_option("--alpha", alpha, "Ada-KV safeguard floor in [0, 1] (default 0.2)");
  app->add_option("--scope", scope, "Allocate per layer or across all layers: layer|global");
  app->add_option("--rule", rule, "Ada-KV allocation rule: topk|waterfill");
  app->add_option("--pooling", pooling, "Score smoothing: maxpool|avgpool");
  app->add_option("--pool-kernel", pool_kernel, "Pooling kernel, odd (default 7)");
  app->add_option("--pool-sink", pool_sink,
                  "First prompt tokens scored unpooled, outside the pooling (default 0)");
  app->add_option("--pool-shift", pool_shift,
                  "Pooling span moved this many tokens back: attention on a word lifts the "
                  "tokens after it (default 0, centred; at most kernel/2)");
  app->add_option("--gqa", gqa, "Query heads -> KV head score: mean|max");
  app->add_option("--lookahead", lookahead,
                  "Greedy tokens decoded with the full cache before compressing; their queries "
                  "join the window's scoring (default 0: off; at most 256)");
  app->add_option("--lookahead-weight", lookahead_weight,
                  "Weight of the look-ahead queries' attention against the window's in scoring "
                  "(default 1)");
  app->add_option("--budget-scores", budget_scores,
                  "Scores that size Ada-KV's head budgets: sum (the selection's, default) or "
                  "peak (each token's largest attention from one observed query)");
  app->add_option("--scoring", scoring,
                  "What a token's score measures: window (attention from the observation "
                  "window, default), output-aware (that attention times ||W_o^h v||, the "
                  "norm of its value through the head's output projection) or reconstruct "
                  "(eval passkey-multi: the most attention from the context repeated after it)");
  app->add_option("--context-scoring", context_scoring,
                  "What scores a compressed context (a request's kv_compress_context), whose "
                  "questions are not known yet: reconstruct (default: the model reads the context "
                  "back, about one more prefill of it; a long context is read back in pieces), "
                  "window or output-aware");
  app->add_option("--reconstruct-keys", reconstruct_keys,
                  "Keys a reconstruction query's attention is normalised over when scored: "
                  "context (the whole context, default) or piece (the sink and the span its "
                  "piece repeats, as KVzip)");
  app->add_option("--context-policy", context_policy,
                  "How a compressed context's budgets are allocated: policy (as --policy, "
                  "default), snapkv, pyramidkv, adakv or ada-pyramid");
  app->add_option("--delta", delta, "Water-filling tile in tokens (default 16)");
  app->add_option("--b-min", b_min, "Water-filling start per head in tokens (default 32)");
  app->add_option("--kv-dtype", kv_dtype, "KV storage: bf16 (default), f32 or e4m3")
      ->check(CLI::IsMember({"f32", "bf16", "e4m3"}));
  app->add_option("--decode-dots", decode_dots,
                  "Decode products: int16 (default: activations rounded to 16 bits per 32 "
                  "elements, as llama.cpp rounds them to 8; a row's result does not depend on its "
                  "batch) or float (float32 activations: slower, but TP 1 and TP N then agree to "
                  "float32 rounding, where int16 rounding can flip a near-tied token)")
      ->check(CLI::IsMember({"float", "int16"}))
      ->each([](const std::string& v) {
        kernels::set_decode_dots(v == "int16" ? kernels::MatmulPath::kInt16Dots
                                              : kernels::MatmulPath::kFloatDots);
      });
}

compression::CompressionConfig CompressionFlags::config(const std::string& default_policy) const {
  return resolve({}, default_policy, nullptr);
}

compression::CompressionConfig CompressionFlags::config(const std::vector<std::string>& model_names,
                                                        std::string* source) const {
  return resolve(model_names, "adakv", source);
}

compression::CompressionConfig CompressionFlags::resolve(
    const std::vector<std::string>& model_names, const std::string& default_policy,
    std::string* source) const {
  compression::CompressionConfig defaults;
  defaults.min_keep = default_min_keep;
  defaults.policy = compression::parse_policy(default_policy);
  compression::CompressionConfig c = defaults;
  std::string from = "built-in defaults";
  if (preset == "none") {
    from = "built-in defaults (--preset none)";
  } else if (!preset.empty()) {
    const std::string path = preset_path(preset);
    c = compression::load_preset(path, defaults);
    from = "preset " + path;
  } else if (model_preset && !model_names.empty()) {
    auto d = compression::model_defaults(model_names, config_dirs(), defaults);
    c = d.config;
    from = d.source;
  }
  auto non_negative = [](long v, const char* flag) {
    if (v < 0)
      throw std::invalid_argument(std::string(flag) + " must be >= 0, got " + std::to_string(v));
    return static_cast<size_t>(v);
  };
  if (!policy.empty()) c.policy = compression::parse_policy(policy);
  if (!budget.empty()) compression::parse_budget(budget, c);
  auto given = [this](const char* flag) { return app && app->count(flag) > 0; };
  if (given("--min-keep")) c.min_keep = non_negative(min_keep, "--min-keep");
  if (given("--window")) c.window = non_negative(window, "--window");
  if (given("--alpha")) c.alpha = alpha;
  if (!scope.empty()) c.scope = compression::parse_scope(scope);
  if (!rule.empty()) c.rule = compression::parse_rule(rule);
  if (!pooling.empty()) c.pooling = compression::parse_pooling(pooling);
  if (given("--pool-kernel")) c.pool_kernel = non_negative(pool_kernel, "--pool-kernel");
  if (given("--pool-sink")) c.pool_sink = non_negative(pool_sink, "--pool-sink");
  if (given("--pool-shift")) c.pool_shift = non_negative(pool_shift, "--pool-shift");
  if (!gqa.empty()) c.gqa = compression::parse_gqa(gqa);
  if (given("--lookahead")) {
    c.lookahead = non_negative(lookahead, "--lookahead");
  } else if (serving && c.lookahead > 0) {
    c.lookahead = 0;
    from += "; look-ahead off when serving (--lookahead N turns it on)";
  }
  if (given("--lookahead-weight")) c.lookahead_weight = lookahead_weight;
  if (!budget_scores.empty()) c.budget_scores = compression::parse_budget_scores(budget_scores);
  if (!scoring.empty()) c.scoring = compression::parse_scoring(scoring);
  if (c.scoring == compression::Scoring::kReconstruct && !reconstructs) {
    throw std::invalid_argument(
        "--scoring reconstruct scores a context without its question: adakv eval passkey-multi, "
        "or --context-scoring reconstruct for the compressed contexts of serve (the default); "
        "use window or output-aware here");
  }
  if (!context_scoring.empty()) c.context_scoring = compression::parse_scoring(context_scoring);
  if (!reconstruct_keys.empty()) {
    c.reconstruct_keys = compression::parse_reconstruct_keys(reconstruct_keys);
  }
  if (!context_policy.empty()) c.context_policy = compression::parse_context_policy(context_policy);
  if (given("--delta")) c.delta = non_negative(delta, "--delta");
  if (given("--b-min")) c.b_min = non_negative(b_min, "--b-min");
  c.validate();
  if (source) *source = from;
  return c;
}

void CompressionFlags::check_window(const compression::CompressionConfig& c,
                                    size_t prompt_tokens) const {
  if (app && app->count("--window") > 0) c.validate(prompt_tokens);
}

kernels::KvDtype CompressionFlags::dtype() const {
  if (kv_dtype == "bf16") return kernels::KvDtype::kBF16;
  if (kv_dtype == "e4m3") return kernels::KvDtype::kE4M3;
  return kernels::KvDtype::kF32;
}

}  // namespace adakv::cli

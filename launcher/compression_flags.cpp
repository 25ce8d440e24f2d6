#include "launcher/compression_flags.h"

#include <stdexcept>

namespace adakv::cli {

void CompressionFlags::add_to(CLI::App* app_) {
  app = app_;
  app->add_option("--preset", preset, "YAML compression preset (configs/compression/*.yaml)");
  app->add_option("--policy", policy,
                  "KV policy: full|streaming|snapkv|pyramidkv|adakv|ada-pyramid");
  app->add_option("--budget", budget,
                  "Average kept tokens per KV head, window included: a ratio of the prompt "
                  "(0.2 or 20%) or a token count (128)");
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
  app->add_option("--delta", delta, "Water-filling tile in tokens (default 16)");
  app->add_option("--b-min", b_min, "Water-filling start per head in tokens (default 32)");
  app->add_option("--kv-dtype", kv_dtype, "KV storage: f32|bf16|e4m3")
      ->check(CLI::IsMember({"f32", "bf16", "e4m3"}));
}

compression::CompressionConfig CompressionFlags::config(const std::string& default_policy) const {
  auto c = preset.empty() ? compression::CompressionConfig{} : compression::load_preset(preset);
  if (preset.empty()) c.policy = compression::parse_policy(default_policy);
  auto non_negative = [](long v, const char* flag) {
    if (v < 0)
      throw std::invalid_argument(std::string(flag) + " must be >= 0, got " + std::to_string(v));
    return static_cast<size_t>(v);
  };
  if (!policy.empty()) c.policy = compression::parse_policy(policy);
  if (!budget.empty()) compression::parse_budget(budget, c);
  auto given = [this](const char* flag) { return app && app->count(flag) > 0; };
  if (given("--window")) c.window = non_negative(window, "--window");
  if (given("--alpha")) c.alpha = alpha;
  if (!scope.empty()) c.scope = compression::parse_scope(scope);
  if (!rule.empty()) c.rule = compression::parse_rule(rule);
  if (!pooling.empty()) c.pooling = compression::parse_pooling(pooling);
  if (given("--pool-kernel")) c.pool_kernel = non_negative(pool_kernel, "--pool-kernel");
  if (given("--pool-sink")) c.pool_sink = non_negative(pool_sink, "--pool-sink");
  if (given("--pool-shift")) c.pool_shift = non_negative(pool_shift, "--pool-shift");
  if (!gqa.empty()) c.gqa = compression::parse_gqa(gqa);
  if (given("--lookahead")) c.lookahead = non_negative(lookahead, "--lookahead");
  if (given("--lookahead-weight")) c.lookahead_weight = lookahead_weight;
  if (!budget_scores.empty()) c.budget_scores = compression::parse_budget_scores(budget_scores);
  if (given("--delta")) c.delta = non_negative(delta, "--delta");
  if (given("--b-min")) c.b_min = non_negative(b_min, "--b-min");
  c.validate();
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

#include "launcher/generate_output.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "model/gguf/gguf.h"
#include "model/model_file.h"
#include "runtime/compression/model_presets.h"

namespace adakv::cli {
namespace {

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

}  // namespace

double per_second(size_t n, double s) {
  return n / std::max(s, 1e-9);
}

// Prompt tokens kept per KV head, averaged over every head of the model: the budgets every
// rank computed when the prefill compressed, else this rank's kept counts (all equal then).
double kept_tokens_per_head(const runtime::GenerateResult& r) {
  return compression::kept_tokens_per_head(r.compression, r.prompt_tokens);
}

// The settings in force, for --json.
nlohmann::json settings_json(const compression::CompressionConfig& c, const std::string& source) {
  nlohmann::json j = {
      {"policy", compression::to_string(c.policy)},
      {"budget_ratio", c.budget_tokens ? nlohmann::json(nullptr) : nlohmann::json(c.budget_ratio)},
      {"budget_tokens",
       c.budget_tokens ? nlohmann::json(c.budget_tokens) : nlohmann::json(nullptr)},
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

nlohmann::json result_json(const runtime::GenerateResult& r,
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
    const auto file = model::open_model_file(path, model::ModelParts::kWeights);
    basename = file->get_string("general.basename", "");
    size_label = file->get_string("general.size_label", "");
  } catch (const std::exception&) {
    // The engine loaded it already; metadata of an odd type just leaves the file name.
  }
  return compression::model_preset_names(basename, size_label, path);
}

}  // namespace adakv::cli

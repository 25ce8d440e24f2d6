#include "launcher/sampling_flags.h"

namespace adakv::cli {

void SamplingFlags::add_to(CLI::App* app) {
  app->add_option("--presence-penalty", presence_penalty,
                  "Lower the logits of tokens generated already by this, in [-2, 2]")
      ->check(CLI::Range(-2.0f, 2.0f));
  app->add_option("--frequency-penalty", frequency_penalty,
                  "Lower each token's logit by this times its count so far, in [-2, 2]")
      ->check(CLI::Range(-2.0f, 2.0f));
  app->add_option("--repetition-penalty", repetition_penalty,
                  "Divide positive (multiply negative) logits of prompt and generated tokens by "
                  "this (> 0; 1 = off)")
      ->check(CLI::PositiveNumber);
  app->add_option("--min-p", min_p,
                  "Drop tokens less likely than this times the likeliest, in [0, 1]")
      ->check(CLI::Range(0.0f, 1.0f));
  app->add_option("--logit-bias", logit_bias,
                  "ID=V: add V (in [-100, 100]) to token ID's logit (repeatable)");
  app->add_option("--stop-token-ids", stop_token_ids,
                  "More token ids that end generation (even with --ignore-eos)")
      ->delimiter(',');
  app->add_option("--min-tokens", min_tokens,
                  "Generate at least this many tokens before a stop token or string may end it");
}

void SamplingFlags::apply(runtime::SamplingParams& p) const {
  p.presence_penalty = presence_penalty;
  p.frequency_penalty = frequency_penalty;
  p.repetition_penalty = repetition_penalty;
  p.min_p = min_p;
  p.stop_token_ids = stop_token_ids;
  p.min_tokens = min_tokens;
  for (const auto& item : logit_bias) {
    const auto eq = item.find('=');
    try {
      if (eq == std::string::npos) throw std::invalid_argument("no '='");
      size_t used = 0;
      const long id = std::stol(item.substr(0, eq), &used);
      if (used != eq) throw std::invalid_argument("id");
      const float v = std::stof(item.substr(eq + 1), &used);
      if (used != item.size() - eq - 1) throw std::invalid_argument("value");
      p.logit_bias.emplace_back(int32_t(id), v);
    } catch (const std::exception&) {
      throw CLI::ValidationError("--logit-bias", "expects ID=V (e.g. 42=-100), got '" + item + "'");
    }
  }
}

}  // namespace adakv::cli

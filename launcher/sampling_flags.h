// generate's sampling flags beyond --temperature, --top-p, --top-k and --seed: the penalties,
// --min-p, --logit-bias ID=V (repeatable), --stop-token-ids and --min-tokens, with the request
// API's ranges (runtime/sampling_params.h).
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "runtime/sampling_params.h"

namespace adakv::cli {

struct SamplingFlags {
  float presence_penalty = 0.0f, frequency_penalty = 0.0f, repetition_penalty = 1.0f;
  float min_p = 0.0f;
  std::vector<std::string> logit_bias;  // "ID=V"
  std::vector<int32_t> stop_token_ids;
  size_t min_tokens = 0;

  void add_to(CLI::App* app);
  // Copies the flags into `p`; throws CLI::ValidationError on a --logit-bias that is not ID=V.
  void apply(runtime::SamplingParams& p) const;
};

}  // namespace adakv::cli

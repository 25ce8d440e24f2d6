// The sampling fields of a JSON request beyond temperature, top_p, top_k and seed: OpenAI's
// presence_penalty, frequency_penalty and logit_bias, vLLM's repetition_penalty, min_p,
// stop_token_ids and min_tokens. Absent or null fields keep their defaults.
#pragma once

#include <nlohmann/json.hpp>

#include "runtime/sampling_params.h"

namespace adakv::runtime {

// Throws RequestError (runtime/request_json.h) naming the field that is of the wrong type or
// out of range; token ids must be below `vocab`, min_tokens at most `context`.
void sampling_from_json(const nlohmann::json& body, SamplingParams& p, size_t vocab,
                        size_t context);

}  // namespace adakv::runtime

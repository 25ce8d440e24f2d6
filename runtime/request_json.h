// A generation request from JSON, with the fields OpenAI-style clients send (the batch file's
// lines, the HTTP API's bodies): prompt (a string or token ids) or messages (system / user /
// assistant turns through the model's chat template), max_tokens or max_completion_tokens,
// temperature, top_p, top_k, seed, stop (a string or a list), ignore_eos, the penalties,
// logit_bias, min_p, stop_token_ids and min_tokens (runtime/sampling_json.h), and adakv's own
// kv_policy, kv_budget, kv_window. Fields it does not know are ignored, as OpenAI's API does.
#pragma once

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "runtime/engine.h"

namespace adakv::runtime {

// A request the caller got wrong; `param` names the field ("" when the body as a whole is).
class RequestError : public std::invalid_argument {
 public:
  RequestError(const std::string& message, std::string param)
      : std::invalid_argument(message), param_(std::move(param)) {}
  const std::string& param() const { return param_; }

 private:
  std::string param_;
};

struct RequestDefaults {
  size_t max_tokens = 256;
  compression::CompressionConfig compression;  // what a request that names none gets
  kernels::KvDtype kv_dtype = kernels::KvDtype::kF32;
  size_t block_tokens = 16;
};

// Throws RequestError naming the field that is missing, of the wrong type or out of range.
// The prompt's fit in the context is checked when the request is added to the engine.
Request request_from_json(const nlohmann::json& body, const Worker& engine,
                          const RequestDefaults& defaults);

// The samples a body asks for (`n`, 1 when absent). Throws RequestError naming `n` outside
// [1, kMaxSamples].
constexpr long long kMaxSamples = 64;
size_t samples_from_json(const nlohmann::json& body);

}  // namespace adakv::runtime

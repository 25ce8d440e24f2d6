#include "runtime/sampling_json.h"

#include <cmath>
#include <string>

#include "runtime/request_json.h"

namespace adakv::runtime {
namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& param, const std::string& why) {
  throw RequestError("'" + param + "' " + why, param);
}

const json* field(const json& body, const char* key) {
  const auto it = body.find(key);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

float number(const json& v, const char* param, double lo, double hi, bool open_lo = false) {
  if (!v.is_number()) bad(param, "must be a number");
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < lo || x > hi || (open_lo && x == lo)) {
    bad(param, std::string("must be in ") + (open_lo ? "(" : "[") + json(lo).dump() + ", " +
                   json(hi).dump() + "], got " + v.dump());
  }
  return float(x);
}

int32_t token_id(const json& v, const char* param, size_t vocab) {
  if (!v.is_number_integer()) bad(param, "must hold token ids (integers)");
  if (v.is_number_unsigned() ? v.get<unsigned long long>() >= vocab
                             : (v.get<long long>() < 0 || size_t(v.get<long long>()) >= vocab)) {
    bad(param,
        "holds token id " + v.dump() + ", outside the vocabulary of " + std::to_string(vocab));
  }
  return int32_t(v.get<long long>());
}

}  // namespace

void sampling_from_json(const json& body, SamplingParams& p, size_t vocab, size_t context) {
  if (const json* v = field(body, "presence_penalty")) {
    p.presence_penalty = number(*v, "presence_penalty", -2, 2);
  }
  if (const json* v = field(body, "frequency_penalty")) {
    p.frequency_penalty = number(*v, "frequency_penalty", -2, 2);
  }
  if (const json* v = field(body, "repetition_penalty")) {
    p.repetition_penalty = number(*v, "repetition_penalty", 0, 1e6, /*open_lo=*/true);
  }
  if (const json* v = field(body, "min_p")) p.min_p = number(*v, "min_p", 0, 1);
  if (const json* v = field(body, "logit_bias")) {
    // OpenAI's shape: {"token id": bias}, the ids as strings (JSON keys).
    if (!v->is_object()) bad("logit_bias", "must be an object {\"token id\": bias}");
    for (const auto& [key, bias] : v->items()) {
      size_t used = 0;
      long long id = -1;
      try {
        id = std::stoll(key, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used == 0 || used != key.size()) {
        bad("logit_bias", "keys must be token ids, got \"" + key + "\"");
      }
      if (id < 0 || size_t(id) >= vocab) {
        bad("logit_bias",
            "names token id " + key + ", outside the vocabulary of " + std::to_string(vocab));
      }
      p.logit_bias.emplace_back(int32_t(id), number(bias, "logit_bias", -100, 100));
    }
  }
  if (const json* v = field(body, "stop_token_ids")) {
    if (!v->is_array()) bad("stop_token_ids", "must be a list of token ids");
    for (const auto& t : *v) p.stop_token_ids.push_back(token_id(t, "stop_token_ids", vocab));
  }
  if (const json* v = field(body, "min_tokens")) {
    if (!v->is_number_integer() || v->get<long long>() < 0 ||
        (v->is_number_unsigned() ? v->get<unsigned long long>() > context
                                 : size_t(v->get<long long>()) > context)) {
      bad("min_tokens",
          "must be an integer in [0, " + std::to_string(context) + "], got " + v->dump());
    }
    p.min_tokens = size_t(v->get<long long>());
  }
}

}  // namespace adakv::runtime

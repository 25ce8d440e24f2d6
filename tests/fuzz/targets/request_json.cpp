// The JSON bodies of the server's completion and chat requests, validated as the OpenAI API
// validates them (runtime/request_json.h, runtime/sampling_json.h) against a one-layer synthetic
// model: a request comes out, or RequestError / std::invalid_argument (what the API answers with
// a 400); any other exception would escape the API's handler.
#include "runtime/request_json.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "runtime/worker.h"
#include "tests/fuzz/targets/fuzz_model.h"

namespace {

using namespace adakv;
using nlohmann::json;

const runtime::Worker& worker() {
  static const runtime::Worker w(fuzz::tiny_model({.weights = true}));
  return w;
}

// The API's own depth limit on bodies (runtime/server/openai_api.cpp): deeper bodies never
// reach the validation.
constexpr int kMaxJsonDepth = 64;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const runtime::Worker& engine = worker();
  json body;
  try {
    body = json::parse(data, data + size, [](int depth, json::parse_event_t, json&) {
      if (depth > kMaxJsonDepth) throw std::invalid_argument("too deep");
      return true;
    });
  } catch (const std::exception&) {
    return 0;
  }
  if (!body.is_object()) return 0;
  try {
    const runtime::Request r = runtime::request_from_json(body, engine, {});
    const size_t vocab = engine.model().config().vocab_size;
    for (int32_t id : r.generate.prompt)
      if (id < 0 || size_t(id) >= vocab) __builtin_trap();
    const size_t n = runtime::samples_from_json(body);
    if (n < 1 || n > size_t(runtime::kMaxSamples)) __builtin_trap();
  } catch (const std::invalid_argument&) {
    // RequestError is one.
  }
  return 0;
}

// Bytes on a connection through the server's request decoder (runtime/server/
// http_request_decoder.h), pipelined requests one after another as a keep-alive connection
// reads them: each is a request, a refusal with a 4xx status, or a wait for more bytes. What
// the API's handler then reads of a request (method, target, headers, JSON body) is read too.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "runtime/server/http_request_decoder.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace adakv::server;
  // Small limits, so that short inputs reach them.
  HttpLimits limits;
  limits.max_header_bytes = 1024;
  limits.max_body_bytes = 4096;
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  for (int i = 0; i < 8 && !rest.empty(); ++i) {
    DecodedRequest d = decode_request(rest, limits);
    if (d.outcome == DecodedRequest::Outcome::kRejected) {
      if (d.rejection.status < 400 || d.rejection.status > 499) __builtin_trap();
      return 0;
    }
    if (d.outcome == DecodedRequest::Outcome::kIncomplete) return 0;
    if (d.consumed == 0 || d.consumed > rest.size()) __builtin_trap();
    const auto& req = d.request;
    if (req.body().size() > limits.max_body_bytes) __builtin_trap();
    std::string seen(req.method_string());
    seen.append(req.target().data(), req.target().size());
    for (const auto& field : req) seen.append(field.value().data(), field.value().size());
    (void)req.keep_alive();
    const auto body = nlohmann::json::parse(req.body(), nullptr, /*allow_exceptions=*/false);
    (void)body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    rest.remove_prefix(d.consumed);
  }
  return 0;
}

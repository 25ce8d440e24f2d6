// The OpenAI-compatible routes over the async engine: POST /v1/completions and
// /v1/chat/completions (streaming as SSE or not), GET /v1/models, /health and /metrics.
// Requests become sequences of the serving loop; their text streams back as it is decided.
// Errors take OpenAI's body and name the field at fault.
#pragma once

#include <memory>
#include <string>

#include "runtime/request_json.h"
#include "runtime/server/front_door.h"
#include "runtime/server/http_server.h"
#include "runtime/server/metrics.h"

namespace adakv::server {

struct ApiConfig {
  std::string model_name;  // what /v1/models lists and requests must name (or omit)
  std::string api_key;     // "": no authentication
  // The compression a request that names none gets (the server's flags), KV layout;
  // max_tokens is not used (completions default to 16 tokens, chat to the rest of the context).
  runtime::RequestDefaults defaults;
  std::string kv_dtype;  // for the response's kv report
  // A stream sends its header once the request is queued, then an SSE comment at once and
  // whenever it sent nothing for this many seconds (0: no comments).
  double stream_keep_alive_s = 5;
};

class OpenAiApi {
 public:
  OpenAiApi(const runtime::Worker& engine, FrontDoor& async, ServerMetrics& metrics,
            ApiConfig config);
  // The HTTP handler (I/O thread).
  void handle(const std::shared_ptr<Exchange>& ex);

 private:
  void completion(const std::shared_ptr<Exchange>& ex, bool chat);
  void models(const std::shared_ptr<Exchange>& ex);

  const runtime::Worker& engine_;
  FrontDoor& async_;
  ServerMetrics& metrics_;
  ApiConfig config_;
  long long started_at_;  // unix seconds, for /v1/models
};

}  // namespace adakv::server

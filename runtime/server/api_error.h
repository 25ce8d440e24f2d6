// OpenAI's error body, {"error": {"message", "type", "param", "code"}}, for every status the
// server answers with (the HTTP layer's 408/413/431 as well as the API's 400/401/404/429/503).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace adakv::server {

// OpenAI's error type for an HTTP status (400 invalid_request_error, 401 authentication_error...).
inline const char* error_type(int status) {
  switch (status) {
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 429:
      return "rate_limit_error";
    case 503:
      return "service_unavailable";
    default:
      return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

// `param`: the request field at fault ("" for none: null). `code`: the status, as vLLM does.
inline std::string error_body(int status, const std::string& message,
                              const std::string& param = "") {
  nlohmann::json e = {{"message", message},
                      {"type", error_type(status)},
                      {"param", param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param)},
                      {"code", status}};
  return nlohmann::json{{"error", e}}.dump(-1, ' ', false,
                                           nlohmann::json::error_handler_t::replace);
}

}  // namespace adakv::server

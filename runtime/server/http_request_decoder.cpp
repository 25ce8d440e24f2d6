#include "runtime/server/http_request_decoder.h"

#include <algorithm>
#include <boost/asio/buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <cstdint>
#include <utility>

namespace adakv::server {

void apply_limits(RequestParser& parser, const HttpLimits& limits) {
  parser.header_limit(uint32_t(std::min<size_t>(limits.max_header_bytes, UINT32_MAX)));
  parser.body_limit(limits.max_body_bytes);
}

Rejection body_too_large(const HttpLimits& limits) {
  return {413, "the request body is larger than the limit of " +
                   std::to_string(limits.max_body_bytes) + " bytes"};
}

Rejection parse_error_answer(const boost::beast::error_code& ec, const HttpLimits& limits,
                             bool in_body) {
  if (ec == http::error::body_limit) return body_too_large(limits);
  if (!in_body && ec == http::error::header_limit) {
    return {431, "the request's header is larger than the limit of " +
                     std::to_string(limits.max_header_bytes) + " bytes"};
  }
  return {400, std::string(in_body ? "malformed HTTP request body: " : "malformed HTTP request: ") +
                   ec.message()};
}

std::optional<Rejection> check_header(const RequestParser& parser, const HttpLimits& limits) {
  // A transfer coding other than chunked last leaves the body's end unknown (RFC 9112 6.3):
  // reading on would take the body for the next request.
  const auto& fields = parser.get();
  if (fields.find(http::field::transfer_encoding) != fields.end() && !parser.chunked()) {
    return Rejection{400, "unsupported Transfer-Encoding: only chunked is understood"};
  }
  const auto length = parser.content_length();
  if (length && *length > limits.max_body_bytes) return body_too_large(limits);
  return std::nullopt;
}

DecodedRequest decode_request(std::string_view bytes, const HttpLimits& limits) {
  DecodedRequest out;
  RequestParser parser;
  apply_limits(parser, limits);
  size_t used = 0;
  // Feeds the parser until `done`; false when it needs more bytes or refused them.
  const auto feed = [&](auto done, bool in_body) {
    while (!done()) {
      boost::beast::error_code ec;
      const size_t n =
          parser.put(boost::asio::buffer(bytes.data() + used, bytes.size() - used), ec);
      used += n;
      if (ec == http::error::need_more || (!ec && n == 0)) return false;
      if (ec) {
        out.outcome = DecodedRequest::Outcome::kRejected;
        out.rejection = parse_error_answer(ec, limits, in_body);
        return false;
      }
    }
    return true;
  };
  // The header alone first, as the server reads it (http::async_read_header), then its checks.
  parser.eager(false);
  if (!feed([&] { return parser.is_header_done(); }, false)) return out;
  if (auto refused = check_header(parser, limits)) {
    out.outcome = DecodedRequest::Outcome::kRejected;
    out.rejection = std::move(*refused);
    return out;
  }
  parser.eager(true);
  if (!feed([&] { return parser.is_done(); }, true)) return out;
  out.outcome = DecodedRequest::Outcome::kRequest;
  out.request = parser.release();
  out.consumed = used;
  return out;
}

}  // namespace adakv::server

// The request side of HTTP/1.1 as the server reads it: Boost.Beast's parser under the server's
// header and body limits, and the answers the server gives to what it refuses. http_server.cpp
// runs them on its connections; decode_request() runs them on bytes in memory, so that tests and
// the fuzz targets reach the decoder without a socket.
#pragma once

#include <boost/beast/core/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace adakv::server {

namespace http = boost::beast::http;

struct HttpLimits {
  size_t max_body_bytes = 16u << 20;
  size_t max_header_bytes = 16u << 10;
  // A request's header must arrive within it (else 408), an idle keep-alive connection is
  // closed after it, and a response write that makes no progress for it ends the connection.
  double timeout_s = 10;
  size_t max_connections = 4096;
};

using RequestParser = http::request_parser<http::string_body>;

// An error answer to a request; the connection closes after it (what follows on it cannot be
// trusted).
struct Rejection {
  int status = 400;
  std::string message;
};

// A fresh parser's header and body limits.
void apply_limits(RequestParser& parser, const HttpLimits& limits);
// The answer to a parse error `ec` while reading the header (in_body false) or the body. The
// ends of the stream (the client went away) are the caller's: they get no answer.
Rejection parse_error_answer(const boost::beast::error_code& ec, const HttpLimits& limits,
                             bool in_body);
// The checks on a complete header before its body is read.
std::optional<Rejection> check_header(const RequestParser& parser, const HttpLimits& limits);
Rejection body_too_large(const HttpLimits& limits);

struct DecodedRequest {
  enum class Outcome { kRequest, kRejected, kIncomplete };
  Outcome outcome = Outcome::kIncomplete;
  http::request<http::string_body> request;  // kRequest
  Rejection rejection;                       // kRejected
  size_t consumed = 0;                       // kRequest: the bytes it took (pipelining)
};

// The first request of `bytes`, as a connection that has received exactly these bytes reads it:
// a whole request, an answer refusing it, or more bytes needed.
DecodedRequest decode_request(std::string_view bytes, const HttpLimits& limits);

}  // namespace adakv::server

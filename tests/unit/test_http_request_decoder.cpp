// The server's HTTP request decoder on bytes in memory: what a connection that received them
// would read, answer or wait for (runtime/server/http_request_decoder.h).
#include <gtest/gtest.h>

#include <string>

#include "runtime/server/http_request_decoder.h"

namespace adakv::server {
namespace {

using Outcome = DecodedRequest::Outcome;

HttpLimits small_limits() {
  HttpLimits l;
  l.max_header_bytes = 256;
  l.max_body_bytes = 16;
  return l;
}

TEST(HttpRequestDecoder, PipelinedRequestsComeOneAtATime) {
  const std::string one = "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n";
  const std::string two = "POST /v1/completions HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}";
  const std::string both = one + two;
  DecodedRequest d = decode_request(both, small_limits());
  ASSERT_EQ(d.outcome, Outcome::kRequest);
  EXPECT_EQ(d.request.target(), "/v1/models");
  EXPECT_EQ(d.consumed, one.size());
  d = decode_request(std::string_view(both).substr(d.consumed), small_limits());
  ASSERT_EQ(d.outcome, Outcome::kRequest);
  EXPECT_EQ(d.request.body(), "{}");
  EXPECT_EQ(d.consumed, two.size());
}

TEST(HttpRequestDecoder, ChunkedBodyIsJoined) {
  const DecodedRequest d = decode_request(
      "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n1\r\nc\r\n0\r\n\r\n",
      small_limits());
  ASSERT_EQ(d.outcome, Outcome::kRequest);
  EXPECT_EQ(d.request.body(), "abc");
}

TEST(HttpRequestDecoder, IncompleteRequestsWait) {
  EXPECT_EQ(decode_request("GET / HTTP/1.1\r\nHost:", small_limits()).outcome,
            Outcome::kIncomplete);
  EXPECT_EQ(
      decode_request("POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nab", small_limits()).outcome,
      Outcome::kIncomplete);
  EXPECT_EQ(decode_request("", small_limits()).outcome, Outcome::kIncomplete);
}

TEST(HttpRequestDecoder, RefusalsCarryTheServersStatus) {
  const auto status = [](const std::string& bytes) {
    const DecodedRequest d = decode_request(bytes, small_limits());
    return d.outcome == Outcome::kRejected ? d.rejection.status : 0;
  };
  EXPECT_EQ(status("POST / HTTP/1.1\r\nContent-Length: 17\r\n\r\n"), 413);
  EXPECT_EQ(status("POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n"), 400);
  EXPECT_EQ(status("GET / HTTP/1.1\r\nX: " + std::string(300, 'a') + "\r\n\r\n"), 431);
  EXPECT_EQ(status("NOT HTTP\r\n\r\n"), 400);
  EXPECT_EQ(status("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"), 400);
}

}  // namespace
}  // namespace adakv::server

// A small blocking HTTP/1.1 client on Boost.Beast, for the replica router: one request per
// connection, the response's body handed over piece by piece as it arrives (chunked SSE
// streams included), and a way to cut the connection from another thread.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace adakv::server {

// "http://host:port" (a trailing slash or path is refused: replicas are named by their root).
struct HttpEndpoint {
  std::string host;
  std::string port;
  std::string url() const { return "http://" + host + ":" + port; }
  // Throws std::invalid_argument naming the URL when it is not http://host:port.
  static HttpEndpoint parse(const std::string& url);
};

struct HttpHead {
  int status = 0;
  std::string content_type;
  std::vector<std::pair<std::string, std::string>> headers;  // those worth passing on
  bool chunked = false;
};

// A failed upstream exchange; phase() is "connect" when the request never reached the peer.
class HttpCallError : public std::runtime_error {
 public:
  HttpCallError(const std::string& message, std::string phase)
      : std::runtime_error(message), phase_(std::move(phase)) {}
  const std::string& phase() const { return phase_; }

 private:
  std::string phase_;
};

// One upstream exchange. Cancel() from any thread ends a running call() with an error.
class HttpCall {
 public:
  HttpCall();
  ~HttpCall();

  struct Request {
    std::string method = "GET", target = "/", body, content_type;
    std::vector<std::pair<std::string, std::string>> headers;
    double connect_timeout_s = 2;  // connecting and sending
    double header_timeout_s = 0;   // waiting for the response header (0: no limit)
  };
  // Sends `request` to `to`. on_head runs once when the response header is read; on_body for
  // each piece of the body as it arrives. Throws HttpCallError naming the endpoint and
  // the phase ("connect", "send", "read") when the exchange fails or is cancelled.
  void call(const HttpEndpoint& to, const Request& request,
            const std::function<void(const HttpHead&)>& on_head,
            const std::function<void(std::string_view)>& on_body);
  void cancel();

 private:
  struct State;
  std::shared_ptr<State> state_;
};

// Convenience: the whole response of a GET (status, body). Throws as HttpCall::call.
std::pair<int, std::string> http_get(const HttpEndpoint& to, const std::string& target,
                                     double timeout_s);

}  // namespace adakv::server

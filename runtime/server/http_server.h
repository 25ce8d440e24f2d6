// HTTP/1.1 on Boost.Beast: keep-alive, pipelining, chunked streaming (SSE), limits on header
// and body size and on idle and slow clients, and disconnect detection while a request runs.
// What a request means is the Handler's business; this file only moves bytes.
//
// Threads: one I/O thread runs the io_context and owns every connection. An Exchange (one
// request and its response) may be answered from any thread: its methods post to the I/O
// thread, so the engine thread never touches a socket.
#pragma once

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/server/http_request_decoder.h"

namespace adakv::server {

class Session;

// What a stream sends while it has nothing else to send, so that a client (or a proxy) with a
// read timeout does not take a long wait for a dead server: `bytes` at once after the header,
// then again whenever nothing was sent for `every_s` seconds. Empty bytes or every_s <= 0:
// nothing.
struct StreamKeepAlive {
  std::string bytes;
  double every_s = 0;
};

// One request on a connection. The handler answers with exactly one respond(), or with
// start_stream(), any number of send() and one end(). Every method is safe from any thread.
class Exchange : public std::enable_shared_from_this<Exchange> {
 public:
  Exchange(std::shared_ptr<Session> session, http::request<http::string_body> request);

  const http::request<http::string_body>& request() const { return request_; }

  using Headers = std::vector<std::pair<std::string, std::string>>;
  void respond(int status, const std::string& content_type, std::string body,
               const Headers& extra = {});
  // 200, chunked, then each send() is one chunk as it is given.
  void start_stream(const std::string& content_type, const Headers& extra = {},
                    StreamKeepAlive keep_alive = {});
  void send(std::string chunk);
  void end();

  // Runs once (on the I/O thread) if the client goes away before the response is complete.
  void on_disconnect(std::function<void()> f);
  bool disconnected() const { return disconnected_; }

 private:
  friend class Session;
  void fire_disconnect();

  std::shared_ptr<Session> session_;
  http::request<http::string_body> request_;
  std::function<void()> on_disconnect_;  // I/O thread only
  std::atomic<bool> disconnected_{false};
  bool ended_ = false;  // I/O thread only
};

using Handler = std::function<void(std::shared_ptr<Exchange>)>;

class HttpServer {
 public:
  // Binds host:port (port 0: any free port) and starts accepting on `io`.
  HttpServer(boost::asio::io_context& io, const std::string& host, unsigned short port,
             HttpLimits limits, Handler handler);
  unsigned short port() const { return port_; }
  // Stops taking connections (those open keep being served).
  void stop_accepting();
  // Exchanges whose response is not yet fully written.
  size_t busy_exchanges() const;

  struct Shared;  // what every connection shares: limits, handler, counters

 private:
  void accept();

  boost::asio::ip::tcp::acceptor acceptor_;
  unsigned short port_ = 0;
  std::shared_ptr<Shared> shared_;
};

}  // namespace adakv::server

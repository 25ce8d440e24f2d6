#include "runtime/server/http_server.h"

#include <sys/socket.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <deque>
#include <optional>
#include <sstream>

#include "runtime/server/api_error.h"

namespace adakv::server {

namespace net = boost::asio;
namespace beast = boost::beast;
using tcp = net::ip::tcp;

struct HttpServer::Shared {
  HttpLimits limits;
  Handler handler;
  std::atomic<size_t> connections{0};
  std::atomic<size_t> busy{0};
};

namespace {

std::chrono::milliseconds ms(double s) {
  return std::chrono::milliseconds(int64_t(s * 1000));
}

std::string serialize(http::response<http::string_body>& res) {
  res.prepare_payload();
  std::ostringstream out;
  out << res;
  return out.str();
}

std::string chunk(const std::string& data) {
  char size[32];
  std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  return size + data + "\r\n";
}

}  // namespace

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, std::shared_ptr<HttpServer::Shared> shared)
      : stream_(std::move(socket)),
        timer_(stream_.get_executor()),
        keep_alive_timer_(stream_.get_executor()),
        shared_(std::move(shared)) {
    ++shared_->connections;
  }
  ~Session() { --shared_->connections; }

  void start() {
    if (shared_->connections > shared_->limits.max_connections) {
      reject({503, "the server holds too many connections"});
      return;
    }
    read_header();
  }

  // ---- Called on the I/O thread by Exchange ----
  void respond(const std::shared_ptr<Exchange>& ex, http::response<http::string_body> res) {
    if (ex != current_ || closed_) return;
    res.keep_alive(keep_alive_);
    queue(serialize(res));
    finish_exchange();
  }
  void start_stream(const std::shared_ptr<Exchange>& ex, const std::string& content_type,
                    const Exchange::Headers& extra, StreamKeepAlive keep_alive) {
    if (ex != current_ || closed_) return;
    std::string head = "HTTP/1.1 200 OK\r\nServer: adakv\r\nContent-Type: " + content_type +
                       "\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n";
    for (const auto& [k, v] : extra) head += k + ": " + v + "\r\n";
    head += keep_alive_ ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
    queue(std::move(head));
    if (keep_alive.bytes.empty() || keep_alive.every_s <= 0) return;
    stream_keep_alive_ = std::move(keep_alive);
    send(ex, stream_keep_alive_.bytes);
    arm_keep_alive(ex, stream_keep_alive_.every_s);
  }
  void send(const std::shared_ptr<Exchange>& ex, const std::string& data) {
    if (ex != current_ || closed_ || data.empty()) return;
    last_chunk_at_ = std::chrono::steady_clock::now();
    queue(chunk(data));
  }
  void end(const std::shared_ptr<Exchange>& ex) {
    if (ex != current_ || closed_) return;
    keep_alive_timer_.cancel();
    queue("0\r\n\r\n");
    finish_exchange();
  }

  net::any_io_executor executor() { return stream_.get_executor(); }

 private:
  // Reads run under their own timer (not the stream's, which would close the socket before a
  // 408 could be written): when it fires, the read is cancelled and timed_out_ says why.
  void arm_timer(double seconds) {
    stream_.expires_never();
    timed_out_ = false;
    timer_.expires_after(ms(seconds));
    timer_.async_wait([weak = weak_from_this()](beast::error_code ec) {
      auto self = weak.lock();
      if (ec || !self || self->closed_) return;
      self->timed_out_ = true;
      beast::error_code ignored;
      self->stream_.socket().cancel(ignored);
    });
  }

  // Sends the stream's keep-alive once `ex` has sent nothing for its interval.
  void arm_keep_alive(const std::shared_ptr<Exchange>& ex, double seconds) {
    keep_alive_timer_.expires_after(ms(seconds));
    keep_alive_timer_.async_wait(
        [weak = weak_from_this(), ex = std::weak_ptr<Exchange>(ex)](beast::error_code ec) {
          auto self = weak.lock();
          auto exchange = ex.lock();
          if (ec || !self || !exchange || exchange != self->current_ || self->closed_ ||
              exchange->ended_) {
            return;
          }
          const double every = self->stream_keep_alive_.every_s;
          const double idle =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - self->last_chunk_at_)
                  .count();
          if (idle < every) return self->arm_keep_alive(exchange, std::max(every - idle, 0.001));
          self->send(exchange, self->stream_keep_alive_.bytes);
          self->arm_keep_alive(exchange, every);
        });
  }

  void read_header() {
    parser_.emplace();
    apply_limits(*parser_, shared_->limits);
    arm_timer(shared_->limits.timeout_s);
    http::async_read_header(stream_, buffer_, *parser_,
                            [self = shared_from_this()](beast::error_code ec, size_t) {
                              self->timer_.cancel();
                              self->on_header(ec);
                            });
  }

  void on_header(beast::error_code ec) {
    if (timed_out_) {
      // Idle between requests: close quietly. Part of a header came: it was too slow.
      if (buffer_.size() > 0 || parser_->got_some()) {
        return reject({408, "the request's header did not arrive in time"});
      }
      return close();
    }
    if (ec == http::error::end_of_stream || ec == net::error::eof ||
        ec == net::error::connection_reset || ec == net::error::operation_aborted) {
      return close();
    }
    if (ec) return reject(parse_error_answer(ec, shared_->limits, /*in_body=*/false));
    if (auto refused = check_header(*parser_, shared_->limits)) return reject(*refused);
    if (parser_->is_done()) return dispatch();
    const auto& header = parser_->get();
    const auto expect = header.find(http::field::expect);
    if (expect != header.end() && beast::iequals(expect->value(), "100-continue")) {
      queue("HTTP/1.1 100 Continue\r\n\r\n");
    }
    // The body may take longer than a header: a few times the timeout.
    arm_timer(4 * shared_->limits.timeout_s);
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, size_t) {
                       self->timer_.cancel();
                       self->on_body(ec);
                     });
  }

  void on_body(beast::error_code ec) {
    if (timed_out_) return reject({408, "the request's body did not arrive in time"});
    if (ec == http::error::end_of_stream || ec == net::error::eof ||
        ec == net::error::connection_reset) {
      return close();
    }
    if (ec) return reject(parse_error_answer(ec, shared_->limits, /*in_body=*/true));
    dispatch();
  }

  void dispatch() {
    http::request<http::string_body> req = parser_->release();
    keep_alive_ = req.keep_alive();
    stream_.expires_never();
    current_ = std::make_shared<Exchange>(shared_from_this(), std::move(req));
    ++shared_->busy;
    counted_busy_ = true;
    watch();
    shared_->handler(current_);
  }

  // While a request runs, a readable socket with nothing to read means the client left.
  void watch() {
    if (watching_ || closed_ || !current_ || buffer_.size() > 0) return;
    watching_ = true;
    stream_.socket().async_wait(tcp::socket::wait_read,
                                [self = shared_from_this()](beast::error_code ec) {
                                  self->watching_ = false;
                                  self->on_readable(ec);
                                });
  }

  void on_readable(beast::error_code ec) {
    if (closed_ || !current_ || current_->ended_) return;
    if (ec) return lost();
    char c;
    const ssize_t n = ::recv(stream_.socket().native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      return lost();
    }
    if (n < 0) watch();
    // n > 0: the next request is already coming (pipelining); it is read once this one ends.
  }

  void finish_exchange() {
    if (current_) current_->ended_ = true;
    response_done_ = true;
    if (!writing_) after_writes();
  }

  void queue(std::string bytes) {
    writes_.push_back(std::move(bytes));
    if (!writing_) write_next();
  }

  void write_next() {
    if (writes_.empty()) {
      writing_ = false;
      after_writes();
      return;
    }
    writing_ = true;
    stream_.expires_after(ms(std::max(shared_->limits.timeout_s, 30.0)));
    net::async_write(stream_, net::buffer(writes_.front()),
                     [self = shared_from_this()](beast::error_code ec, size_t) {
                       if (ec) return self->lost();
                       self->writes_.pop_front();
                       self->write_next();
                     });
  }

  // Every queued byte is written: the next request, or the end of the connection.
  void after_writes() {
    if (!response_done_ || closed_) return;
    if (counted_busy_) {
      --shared_->busy;
      counted_busy_ = false;
    }
    response_done_ = false;
    current_.reset();
    if (closing_ || !keep_alive_) return linger_close();
    read_header();
  }

  // An error answer after which the connection closes (what follows cannot be trusted).
  void reject(const Rejection& r) {
    http::response<http::string_body> res{http::status(r.status), 11};
    res.set(http::field::server, "adakv");
    res.set(http::field::content_type, "application/json");
    res.body() = error_body(r.status, r.message);
    res.keep_alive(false);
    closing_ = true;
    stream_.expires_never();
    queue(serialize(res));
    response_done_ = true;
    if (!writing_) after_writes();
  }

  // After the last response: stop sending, drain what the client still sends for a moment
  // (closing with unread input would reset the connection and lose the response), then close.
  void linger_close() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    stream_.expires_after(ms(2));
    drain();
  }
  void drain() {
    stream_.async_read_some(net::buffer(sink_),
                            [self = shared_from_this()](beast::error_code ec, size_t) {
                              if (ec) return self->close();
                              self->drain();
                            });
  }

  void lost() {
    auto ex = current_;
    close();
    if (ex) ex->fire_disconnect();
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    if (counted_busy_) {
      --shared_->busy;
      counted_busy_ = false;
    }
    keep_alive_timer_.cancel();
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.socket().close(ec);
    writes_.clear();
    current_.reset();
  }

  beast::tcp_stream stream_;
  net::steady_timer timer_;
  net::steady_timer keep_alive_timer_;  // the current stream's keep-alive
  StreamKeepAlive stream_keep_alive_;
  std::chrono::steady_clock::time_point last_chunk_at_;
  std::shared_ptr<HttpServer::Shared> shared_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::shared_ptr<Exchange> current_;
  std::deque<std::string> writes_;
  char sink_[65536];
  bool writing_ = false, watching_ = false, response_done_ = false;
  bool keep_alive_ = true, closing_ = false, closed_ = false, counted_busy_ = false;
  bool timed_out_ = false;
};

Exchange::Exchange(std::shared_ptr<Session> session, http::request<http::string_body> request)
    : session_(std::move(session)), request_(std::move(request)) {}

void Exchange::respond(int status, const std::string& content_type, std::string body,
                       const Headers& extra) {
  http::response<http::string_body> res{http::status(status), 11};
  res.set(http::field::server, "adakv");
  res.set(http::field::content_type, content_type);
  for (const auto& [k, v] : extra) res.set(k, v);
  res.body() = std::move(body);
  auto self = shared_from_this();
  net::post(session_->executor(), [self, res = std::move(res)]() mutable {
    self->session_->respond(self, std::move(res));
  });
}

void Exchange::start_stream(const std::string& content_type, const Headers& extra,
                            StreamKeepAlive keep_alive) {
  auto self = shared_from_this();
  net::post(session_->executor(),
            [self, content_type, extra, keep_alive = std::move(keep_alive)]() mutable {
              self->session_->start_stream(self, content_type, extra, std::move(keep_alive));
            });
}

void Exchange::send(std::string data) {
  auto self = shared_from_this();
  net::post(session_->executor(),
            [self, data = std::move(data)] { self->session_->send(self, data); });
}

void Exchange::end() {
  auto self = shared_from_this();
  net::post(session_->executor(), [self] { self->session_->end(self); });
}

void Exchange::on_disconnect(std::function<void()> f) {
  auto self = shared_from_this();
  net::post(session_->executor(), [self, f = std::move(f)]() mutable {
    if (self->disconnected_) {
      f();
    } else {
      self->on_disconnect_ = std::move(f);
    }
  });
}

void Exchange::fire_disconnect() {
  if (disconnected_.exchange(true)) return;
  if (on_disconnect_) {
    auto f = std::move(on_disconnect_);
    on_disconnect_ = nullptr;
    f();
  }
}

HttpServer::HttpServer(net::io_context& io, const std::string& host, unsigned short port,
                       HttpLimits limits, Handler handler)
    : acceptor_(io), shared_(std::make_shared<Shared>()) {
  shared_->limits = limits;
  shared_->handler = std::move(handler);
  const tcp::endpoint endpoint(net::ip::make_address(host), port);
  acceptor_.open(endpoint.protocol());
  acceptor_.set_option(net::socket_base::reuse_address(true));
  acceptor_.bind(endpoint);
  acceptor_.listen(net::socket_base::max_listen_connections);
  port_ = acceptor_.local_endpoint().port();
  accept();
}

void HttpServer::accept() {
  acceptor_.async_accept([this](beast::error_code ec, tcp::socket socket) {
    if (ec == net::error::operation_aborted || !acceptor_.is_open()) return;
    if (!ec) std::make_shared<Session>(std::move(socket), shared_)->start();
    accept();
  });
}

void HttpServer::stop_accepting() {
  net::post(acceptor_.get_executor(), [this] {
    beast::error_code ec;
    acceptor_.close(ec);
  });
}

size_t HttpServer::busy_exchanges() const {
  return shared_->busy;
}

}  // namespace adakv::server

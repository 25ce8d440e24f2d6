#include "runtime/server/http_client.h"

#include <sys/socket.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <chrono>
#include <limits>
#include <mutex>
#include <regex>
#include <stdexcept>

namespace adakv::server {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = boost::asio::ip::tcp;

HttpEndpoint HttpEndpoint::parse(const std::string& url) {
  static const std::regex form(R"(^http://([A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\]):([0-9]{1,5})$)");
  std::smatch m;
  if (!std::regex_match(url, m, form) || std::stoi(m[2]) == 0 || std::stoi(m[2]) > 65535) {
    throw std::invalid_argument("'" + url +
                                "' is not a replica address of the form http://host:port");
  }
  std::string host = m[1];
  if (host.front() == '[') host = host.substr(1, host.size() - 2);
  return HttpEndpoint{host, m[2]};
}

// The socket's descriptor, published while a call runs, so that cancel() can shut it down
// from another thread (POSIX shutdown() is safe against a blocked read; Asio objects are not).
struct HttpCall::State {
  std::mutex mu;
  int fd = -1;
  bool cancelled = false;
};

HttpCall::HttpCall() : state_(std::make_shared<State>()) {}
HttpCall::~HttpCall() = default;

void HttpCall::cancel() {
  std::lock_guard lock(state_->mu);
  state_->cancelled = true;
  if (state_->fd >= 0) ::shutdown(state_->fd, SHUT_RDWR);
}

namespace {

std::chrono::steady_clock::duration seconds(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(s));
}

}  // namespace

void HttpCall::call(const HttpEndpoint& to, const Request& request,
                    const std::function<void(const HttpHead&)>& on_head,
                    const std::function<void(std::string_view)>& on_body) {
  boost::asio::io_context io;
  beast::tcp_stream stream(io);
  // However the call ends (a callback or a read error throwing included), the descriptor is
  // withdrawn before the stream closes it: cancel() must never shut down whatever socket gets
  // the number next.
  struct Unpublish {
    State& state;
    ~Unpublish() {
      std::lock_guard lock(state.mu);
      state.fd = -1;
    }
  } unpublish{*state_};
  const char* phase = "connect";
  auto fail = [&](const std::string& what) {
    throw HttpCallError(to.url() + ": " + phase + ": " + what, phase);
  };
  {
    std::lock_guard lock(state_->mu);
    if (state_->cancelled) fail("cancelled");
  }
  try {
    tcp::resolver resolver(io);
    stream.expires_after(seconds(request.connect_timeout_s));
    stream.connect(resolver.resolve(to.host, to.port));
    {
      std::lock_guard lock(state_->mu);
      if (state_->cancelled) fail("cancelled");
      state_->fd = stream.socket().native_handle();
    }
    phase = "send";
    bhttp::request<bhttp::string_body> req;
    req.method(bhttp::string_to_verb(request.method));
    req.target(request.target);
    req.version(11);
    req.set(bhttp::field::host, to.host + ":" + to.port);
    req.set(bhttp::field::connection, "close");
    for (const auto& [k, v] : request.headers) req.set(k, v);
    if (!request.content_type.empty()) req.set(bhttp::field::content_type, request.content_type);
    req.body() = request.body;
    req.prepare_payload();
    bhttp::write(stream, req);

    phase = "read";
    if (request.header_timeout_s > 0) {
      stream.expires_after(seconds(request.header_timeout_s));
    } else {
      stream.expires_never();
    }
    beast::flat_buffer buffer;
    bhttp::response_parser<bhttp::string_body> parser;
    parser.body_limit(std::numeric_limits<std::uint64_t>::max());
    bhttp::read_header(stream, buffer, parser);
    stream.expires_never();
    const auto& res = parser.get();
    HttpHead head;
    head.status = int(res.result_int());
    head.content_type = std::string(res[bhttp::field::content_type]);
    head.chunked = parser.chunked();
    for (const auto field : {bhttp::field::retry_after, bhttp::field::allow}) {
      const auto it = res.find(field);
      if (it != res.end())
        head.headers.emplace_back(std::string(it->name_string()), std::string(it->value()));
    }
    on_head(head);
    // Chunked bodies (SSE) go on as each chunk arrives; others in one piece at the end.
    auto on_chunk = [&](std::uint64_t, beast::string_view piece, beast::error_code&) {
      on_body(std::string_view(piece.data(), piece.size()));
      return piece.size();
    };
    parser.on_chunk_body(on_chunk);
    beast::error_code ec;
    bhttp::read(stream, buffer, parser, ec);
    if (ec && ec != bhttp::error::end_of_stream) fail(ec.message());
    if (!head.chunked && !parser.get().body().empty()) on_body(parser.get().body());
  } catch (const beast::system_error& e) {
    bool cancelled;
    {
      std::lock_guard lock(state_->mu);
      cancelled = state_->cancelled;
    }
    fail(cancelled ? std::string("cancelled") : e.code().message());
  }
}

std::pair<int, std::string> http_get(const HttpEndpoint& to, const std::string& target,
                                     double timeout_s) {
  HttpCall call;
  HttpCall::Request r;
  r.target = target;
  r.connect_timeout_s = timeout_s;
  r.header_timeout_s = timeout_s;
  int status = 0;
  std::string body;
  call.call(
      to, r, [&](const HttpHead& h) { status = h.status; },
      [&](std::string_view piece) { body.append(piece); });
  return {status, body};
}

}  // namespace adakv::server

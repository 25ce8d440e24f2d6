// adakv router: one OpenAI endpoint in front of independent `adakv serve` replicas (data
// parallelism across nodes or jobs; runtime/server/replica_router.h). It holds no model.
// SIGINT and SIGTERM drain: no new requests, those in flight get --drain-s seconds, exit 0.
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <thread>

#include "launcher/commands.h"
#include "runtime/server/http_server.h"
#include "runtime/server/replica_router.h"

namespace adakv::cli {
namespace {

struct RouterOptions {
  std::vector<std::string> replicas;
  std::string host = "127.0.0.1";
  unsigned short port = 8000;
  double drain_s = 30, poll_s = 0.2, max_body_mb = 16, timeout_s = 10;
};

int run_router(const RouterOptions& o) {
  if (o.replicas.empty()) throw std::invalid_argument("--replica: name at least one replica");
  if (o.drain_s < 0) throw std::invalid_argument("--drain-s must be >= 0");
  if (o.poll_s <= 0) throw std::invalid_argument("--poll-s must be > 0");
  std::vector<server::HttpEndpoint> endpoints;
  for (const auto& url : o.replicas) endpoints.push_back(server::HttpEndpoint::parse(url));
  server::RouterConfig config;
  config.poll_s = o.poll_s;
  server::ReplicaRouter router(endpoints, config);

  boost::asio::io_context io(1);
  server::HttpLimits limits;
  limits.max_body_bytes = size_t(o.max_body_mb * 1048576.0);
  limits.timeout_s = o.timeout_s;
  std::unique_ptr<server::HttpServer> http;
  try {
    http = std::make_unique<server::HttpServer>(
        io, o.host, o.port, limits,
        [&router](std::shared_ptr<server::Exchange> ex) { router.handle(ex); });
  } catch (const std::exception& e) {
    throw std::runtime_error("cannot listen on " + o.host + ":" + std::to_string(o.port) + ": " +
                             e.what());
  }
  std::atomic<bool> stopping{false};
  boost::asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](const boost::system::error_code& ec, int sig) {
    if (ec) return;
    std::fprintf(stderr, "[adakv] signal %d: no new requests; draining for up to %.0f s\n", sig,
                 o.drain_s);
    http->stop_accepting();
    stopping = true;
  });
  std::thread io_thread([&io] { io.run(); });

  std::fprintf(stderr, "[adakv] routing on http://%s:%u\n", o.host.c_str(), unsigned(http->port()));
  std::fflush(stderr);

  while (!stopping) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  router.shutdown(o.drain_s);
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (http->busy_exchanges() > 0 && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  io.stop();
  io_thread.join();
  std::fprintf(stderr, "[adakv] stopped\n");
  return 0;
}

}  // namespace

void add_router(CLI::App& app, Runner& selected) {
  auto o = std::make_shared<RouterOptions>();
  auto* sub = app.add_subcommand(
      "router", "One OpenAI endpoint in front of several `adakv serve` replicas (data parallel)");
  sub->add_option("--replica", o->replicas,
                  "A replica's address, http://host:port (repeat for each replica)")
      ->required();
  sub->add_option("--host", o->host, "Address to bind (default 127.0.0.1)");
  sub->add_option("--port", o->port, "TCP port (default 8000; 0: any free port)");
  sub->add_option("--drain-s", o->drain_s,
                  "On SIGINT/SIGTERM, seconds in-flight requests get to finish (default 30)");
  sub->add_option("--poll-s", o->poll_s,
                  "Seconds between reads of every replica's /metrics (default 0.2)");
  sub->add_option("--max-body-mb", o->max_body_mb, "Largest request body, MiB (default 16)");
  sub->add_option("--timeout-s", o->timeout_s,
                  "Seconds a header may take, an idle connection stays open (default 10)");
  sub->callback([o, &selected] { selected = [o] { return run_router(*o); }; });
}

}  // namespace adakv::cli

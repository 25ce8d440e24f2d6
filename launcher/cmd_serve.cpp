// adakv serve: the OpenAI-compatible HTTP server (runtime/server/) over the serving loop.
// Rank 0 of the TP job serves HTTP and runs the loop; the other ranks follow its plans. With
// --dp N the job is N replicas (comm/parallel_layout.h): each replica's first rank runs its own
// loop and serves on a port of its own, and rank 0 also runs the router
// (runtime/server/replica_router.h) on --port in front of them all.
// SIGINT, SIGTERM (and SIGUSR1, which mpirun forwards to every rank) drain: no new requests,
// those in flight get --drain-s seconds, then end with finish_reason "abort"; every rank stops
// and the exit code is 0.
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <regex>
#include <thread>
#include <vector>

#include "kernels/cpu_threads.h"
#include "kernels/ops.h"
#include "launcher/chat_template_flag.h"
#include "launcher/commands.h"
#include "launcher/compression_flags.h"
#include "launcher/engine_flags.h"
#include "launcher/generate_output.h"
#include "launcher/job.h"
#include "launcher/parallel_flags.h"
#include "runtime/model_registry.h"
#include "runtime/server/front_door.h"
#include "runtime/server/http_server.h"
#include "runtime/server/openai_api.h"
#include "runtime/server/replica_router.h"
#include "runtime/worker.h"

namespace adakv::cli {
namespace {

struct ServeOptions {
  std::string model, host = "127.0.0.1", served_name, api_key;
  unsigned short port = 8000;
  size_t max_queue = 256;
  double drain_s = 30, max_body_mb = 16, max_header_kb = 16, timeout_s = 10;
  double sse_keepalive_s = 5;
  int threads = 0;
  EngineFlags engine;
  CompressionFlags compression;
  ParallelFlags parallel;
  ChatTemplateFlag chat_template;
};

// The file's name without .gguf and without a quantization suffix (".Q4_1", ".F16"...).
std::string default_served_name(const std::string& path) {
  std::string stem = std::filesystem::path(path).stem().string();
  static const std::regex quant(R"(^(.*)[.-]((I?Q\d.*)|F16|F32|BF16)$)", std::regex::icase);
  std::smatch m;
  if (std::regex_match(stem, m, quant) && m[1].length() > 0) return m[1];
  return stem;
}

// The address other ranks reach this one at: the host it binds, or its name when it binds
// every interface.
std::string advertised_host(const std::string& bind) {
  if (bind != "0.0.0.0" && bind != "::") return bind;
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) {
    throw std::runtime_error(std::string("gethostname: ") + std::strerror(errno));
  }
  return name;
}

// Every rank of the job: the "host:port" each replica's root serves on (`mine` on those roots),
// by a broadcast from each root over the whole job.
std::vector<std::string> exchange_endpoints(const comm::World& w, const std::string& mine) {
  comm::Communicator* world = tp_group();
  std::vector<std::string> out;
  for (int r = 0; r < w.dp_size; ++r) {
    char buf[256] = {};
    const int root = r * w.tp_size * w.pp_size;
    if (w.rank == root) std::snprintf(buf, sizeof buf, "%s", mine.c_str());
    world->broadcast_patiently(buf, sizeof buf, root);
    out.emplace_back(buf);
  }
  return out;
}

int run_serve(const ServeOptions& o) {
  kernels::set_num_threads(o.threads);
  const std::string model_path = runtime::resolve_model(o.model);
  const int replicas = o.parallel.replicas();
  const auto job = job_groups(o.parallel.stages(), replicas);
  runtime::Worker engine(model_path, job.groups, job.world);
  if (!engine.is_root()) {
    // Only rank 0 decides when to stop; it tells the others (a signal that mpirun forwards to
    // every rank must not end a follower in the middle of a step).
    for (int sig : {SIGINT, SIGTERM, SIGUSR1}) std::signal(sig, SIG_IGN);
    if (replicas > 1) exchange_endpoints(job.world, "");
    return engine.follow();
  }
  o.chat_template.apply(engine, /*renders_chats=*/true);

  runtime::RequestDefaults defaults;
  std::string source;
  defaults.compression = o.compression.config(model_names(model_path), &source);
  defaults.kv_dtype = o.compression.dtype();
  const runtime::ServingConfig serving =
      o.engine.config(engine.model().local_config(), defaults.kv_dtype);
  if (o.max_queue == 0) throw std::invalid_argument("--max-queue must be at least 1");
  if (o.drain_s < 0) throw std::invalid_argument("--drain-s must be >= 0");
  if (o.max_body_mb <= 0 || o.max_header_kb <= 0 || o.timeout_s <= 0) {
    throw std::invalid_argument("--max-body-mb, --max-header-kb and --timeout-s must be > 0");
  }
  if (o.sse_keepalive_s < 0) throw std::invalid_argument("--sse-keepalive-s must be >= 0");

  server::ServerMetrics metrics;
  server::FrontDoor async(engine, serving, o.max_queue, metrics);
  server::ApiConfig api_config;
  api_config.model_name = o.served_name.empty() ? default_served_name(model_path) : o.served_name;
  api_config.api_key = o.api_key;
  api_config.defaults = defaults;
  api_config.kv_dtype = o.compression.kv_dtype;
  api_config.stream_keep_alive_s = o.sse_keepalive_s;
  server::OpenAiApi api(engine, async, metrics, api_config);

  boost::asio::io_context io(1);
  server::HttpLimits limits;
  limits.max_body_bytes = size_t(o.max_body_mb * 1048576.0);
  limits.max_header_bytes = size_t(o.max_header_kb * 1024.0);
  limits.timeout_s = o.timeout_s;
  // With replicas, each replica's root serves on a port of its own and the job's rank 0 puts
  // the router on --port in front of them all.
  const unsigned short engine_port = replicas > 1 ? 0 : o.port;
  std::unique_ptr<server::HttpServer> http;
  try {
    http = std::make_unique<server::HttpServer>(
        io, o.host, engine_port, limits,
        [&api](std::shared_ptr<server::Exchange> ex) { api.handle(ex); });
  } catch (const std::exception& e) {
    throw std::runtime_error("cannot listen on " + o.host + ":" + std::to_string(engine_port) +
                             ": " + e.what());
  }
  std::unique_ptr<server::ReplicaRouter> router;
  std::unique_ptr<server::HttpServer> router_http;
  if (replicas > 1) {
    const auto urls =
        exchange_endpoints(job.world, advertised_host(o.host) + ":" + std::to_string(http->port()));
    std::fprintf(stderr, "[adakv] replica %d (%s) serving on http://%s:%u\n", job.world.dp_rank,
                 job.world.rank == 0 ? "with the router" : "behind the router", o.host.c_str(),
                 unsigned(http->port()));
    if (job.world.rank == 0) {
      std::vector<server::HttpEndpoint> endpoints;
      for (const auto& u : urls) endpoints.push_back(server::HttpEndpoint::parse("http://" + u));
      router = std::make_unique<server::ReplicaRouter>(endpoints, server::RouterConfig{});
      try {
        router_http = std::make_unique<server::HttpServer>(
            io, o.host, o.port, limits,
            [&router](std::shared_ptr<server::Exchange> ex) { router->handle(ex); });
      } catch (const std::exception& e) {
        throw std::runtime_error("cannot listen on " + o.host + ":" + std::to_string(o.port) +
                                 ": " + e.what());
      }
    }
  }

  std::atomic<int> signals_seen{0};
  boost::asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.add(SIGUSR1);
  std::function<void(const boost::system::error_code&, int)> on_signal =
      [&](const boost::system::error_code& ec, int sig) {
        if (ec) return;
        // The first signal drains; a second one ends what is left at once.
        const double drain = signals_seen++ == 0 ? o.drain_s : 0.0;
        std::fprintf(stderr, "[adakv] signal %d: no new requests; draining for up to %.0f s\n", sig,
                     drain);
        http->stop_accepting();
        if (router_http) router_http->stop_accepting();
        async.shutdown(drain);
        signals.async_wait(on_signal);
      };
  signals.async_wait(on_signal);
  std::thread io_thread([&io] { io.run(); });

  print_settings(defaults.compression, source);
  std::fprintf(
      stderr, "[adakv] %s; TP %zu\n",
      describe_pool(serving, engine.model().local_config(), o.compression.kv_dtype).c_str(),
      engine.tp_size());
  if (replicas == 1 || router_http) {
    std::fprintf(stderr, "[adakv] serving %s on http://%s:%u%s\n", api_config.model_name.c_str(),
                 o.host.c_str(), unsigned(router_http ? router_http->port() : http->port()),
                 router_http ? (" (" + std::to_string(replicas) + " replicas)").c_str() : "");
  }
  std::fflush(stderr);

  async.run();
  // The router's requests on other replicas end as those replicas drain (the same signal).
  if (router) router->shutdown(o.drain_s + 5);
  int code = 0;
  if (async.dead()) {
    // /health answers 503 until someone stops the server.
    code = 1;
    while (signals_seen == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  // The last responses are posted to the I/O thread: let them go out.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (http->busy_exchanges() > 0 && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  io.stop();
  io_thread.join();
  // From here on a late signal must not kill the process on its way out (exit 0 was promised).
  boost::system::error_code ignored;
  signals.clear(ignored);
  for (int sig : {SIGINT, SIGTERM, SIGUSR1}) std::signal(sig, SIG_IGN);
  engine.shutdown();
  std::fprintf(stderr, "[adakv] stopped\n");
  return code;
}

}  // namespace

void add_serve(CLI::App& app, Runner& selected) {
  auto o = std::make_shared<ServeOptions>();
  auto* sub = app.add_subcommand("serve", "OpenAI-compatible HTTP server (rank 0 of the TP job)");
  sub->add_option("--model", o->model, "GGUF path or the default model's name");
  sub->add_option("--host", o->host, "Address to bind (default 127.0.0.1)");
  sub->add_option("--port", o->port, "TCP port (default 8000; 0: any free port)");
  sub->add_option("--served-model-name", o->served_name,
                  "The model's name in the API (default: the file's name without .gguf and "
                  "its quantization)");
  sub->add_option("--api-key", o->api_key, "Require `Authorization: Bearer KEY` on /v1 routes");
  sub->add_option("--max-queue", o->max_queue,
                  "Requests that may wait for admission; more get 429 (default 256)");
  sub->add_option("--drain-s", o->drain_s,
                  "On SIGINT/SIGTERM, seconds in-flight requests get to finish (default 30)");
  sub->add_option("--max-body-mb", o->max_body_mb, "Largest request body, MiB (default 16)");
  sub->add_option("--max-header-kb", o->max_header_kb, "Largest request header, KiB (default 16)");
  sub->add_option("--timeout-s", o->timeout_s,
                  "Seconds a header may take, an idle connection stays open, a write may stall "
                  "(default 10)");
  sub->add_option("--sse-keepalive-s", o->sse_keepalive_s,
                  "A stream's header goes out once its request is queued; then an SSE comment "
                  "every this many seconds without a token (default 5; 0: none)");
  sub->add_option("--threads", o->threads,
                  "CPU threads (default: OMP_NUM_THREADS, else all cores)");
  o->engine.add_to(sub);
  o->compression.default_min_keep = compression::kGenerateMinKeep;
  o->compression.model_preset = true;
  o->compression.serving = true;
  o->compression.add_to(sub);
  o->parallel.add_to(sub);
  o->chat_template.add_to(sub);
  sub->callback([o, &selected] { selected = [o] { return run_serve(*o); }; });
}

}  // namespace adakv::cli

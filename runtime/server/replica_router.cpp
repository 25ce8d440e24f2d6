#include "runtime/server/replica_router.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "runtime/server/api_error.h"

namespace adakv::server {

ReplicaRouter::ReplicaRouter(std::vector<HttpEndpoint> replicas, RouterConfig config)
    : replicas_(std::move(replicas)), config_(config) {
  poller_ = std::thread([this] { poll_loop(); });
}

ReplicaRouter::~ReplicaRouter() {
  stop_polling_ = true;
  changed_.notify_all();
  if (poller_.joinable()) poller_.join();
}

void ReplicaRouter::poll_loop() {
  std::unique_lock lock(mu_);
  while (!stop_polling_) {
    lock.unlock();
    replicas_.poll(config_.poll_timeout_s);
    lock.lock();
    changed_.wait_for(lock, std::chrono::duration<double>(config_.poll_s),
                      [this] { return bool(stop_polling_); });
  }
}

void ReplicaRouter::handle(const std::shared_ptr<Exchange>& ex) {
  std::string path(ex->request().target());
  if (const auto q = path.find('?'); q != std::string::npos) path.resize(q);
  if ((path == "/health" || path == "/metrics") && ex->request().method() != http::verb::get) {
    return ex->respond(405, "application/json",
                       error_body(405, "method " + std::string(ex->request().method_string()) +
                                           " is not allowed on " + path + "; use GET"),
                       {{"Allow", "GET"}});
  }
  if (path == "/health") {
    if (closed_)
      return ex->respond(503, "application/json", error_body(503, "the router is shutting down"));
    const auto loads = replicas_.loads();
    const bool any = std::any_of(loads.begin(), loads.end(), [](const auto& l) { return l.up; });
    if (!any) return ex->respond(503, "application/json", error_body(503, "no replica is up"));
    return ex->respond(200, "text/plain", "");
  }
  if (closed_) {
    return ex->respond(503, "application/json", error_body(503, "the router is shutting down"));
  }
  ++active_;
  std::thread([this, ex, path] {
    if (path == "/metrics") {
      metrics(ex);
    } else {
      proxy(ex);
    }
    std::lock_guard lock(mu_);
    --active_;
    changed_.notify_all();
  }).detach();
}

void ReplicaRouter::metrics(const std::shared_ptr<Exchange>& ex) {
  const auto texts = replicas_.poll(config_.poll_timeout_s);
  std::string out = merge_replica_metrics(texts);
  const auto loads = replicas_.loads();
  out += "# HELP adakv:router_replica_up Whether the replica answers (1) or not (0).\n";
  out += "# TYPE adakv:router_replica_up gauge\n";
  for (size_t i = 0; i < loads.size(); ++i) {
    out += "adakv:router_replica_up{replica=\"" + std::to_string(i) + "\",url=\"" +
           replicas_.endpoint(i).url() + "\"} " + (loads[i].up ? "1" : "0") + "\n";
  }
  out += "# HELP adakv:router_requests_total Requests the router sent to the replica.\n";
  out += "# TYPE adakv:router_requests_total counter\n";
  for (size_t i = 0; i < loads.size(); ++i) {
    out += "adakv:router_requests_total{replica=\"" + std::to_string(i) + "\"} " +
           std::to_string(replicas_.routed(i)) + "\n";
  }
  ex->respond(200, "text/plain; version=0.0.4; charset=utf-8", out);
}

void ReplicaRouter::proxy(std::shared_ptr<Exchange> ex) {
  const auto& in = ex->request();
  HttpCall::Request up;
  up.method = std::string(in.method_string());
  up.target = std::string(in.target());
  up.body = in.body();
  if (const auto it = in.find(http::field::content_type); it != in.end()) {
    up.content_type = std::string(it->value());
  }
  if (const auto it = in.find(http::field::authorization); it != in.end()) {
    up.headers.emplace_back("Authorization", std::string(it->value()));
  }
  auto call = std::make_shared<HttpCall>();
  {
    std::lock_guard lock(mu_);
    calls_.push_back(call);
  }
  ex->on_disconnect([call] { call->cancel(); });

  bool streaming = false, answered = false;
  std::string failure;
  const uint64_t affinity = context_affinity(up.body);
  // A replica that cannot be reached has not seen the request: try the next one.
  for (size_t attempt = 0; attempt < replicas_.size() && !answered; ++attempt) {
    const auto replica = replicas_.acquire(affinity);
    if (!replica) break;
    HttpHead head;
    std::string body;
    bool got_head = false;
    try {
      call->call(
          replicas_.endpoint(*replica), up,
          [&](const HttpHead& h) {
            head = h;
            got_head = true;
            streaming = h.status == 200 && h.content_type.rfind("text/event-stream", 0) == 0;
            if (streaming) ex->start_stream(h.content_type);
          },
          [&](std::string_view piece) {
            if (streaming) {
              ex->send(std::string(piece));
            } else {
              body.append(piece);
            }
          });
      replicas_.release(*replica);
      answered = true;
      if (streaming) {
        ex->end();
      } else {
        ex->respond(head.status, head.content_type, std::move(body), head.headers);
      }
    } catch (const std::exception& e) {
      replicas_.release(*replica);
      failure = "replica " + std::to_string(*replica) + " failed: " + e.what();
      if (ex->disconnected()) {
        answered = true;
        break;
      }
      const auto* call_error = dynamic_cast<const HttpCallError*>(&e);
      if (!got_head && call_error && call_error->phase() == "connect") {
        replicas_.mark_down(*replica);
        continue;
      }
      answered = true;
      if (streaming) {
        // Mid-stream: the status is sent already; the error travels as an event.
        ex->send("data: " + error_body(502, failure) + "\n\n");
        ex->send("data: [DONE]\n\n");
        ex->end();
      } else {
        ex->respond(502, "application/json", error_body(502, failure));
      }
    }
  }
  if (!answered) {
    ex->respond(503, "application/json",
                error_body(503, failure.empty() ? "no replica is up" : failure));
  }
  std::lock_guard lock(mu_);
  calls_.erase(std::find(calls_.begin(), calls_.end(), call));
}

void ReplicaRouter::shutdown(double drain_s) {
  closed_ = true;
  std::unique_lock lock(mu_);
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(drain_s));
  changed_.wait_until(lock, deadline, [this] { return active_ == 0; });
  for (const auto& c : calls_) c->cancel();
  changed_.wait(lock, [this] { return active_ == 0; });
}

}  // namespace adakv::server

// One OpenAI endpoint in front of several independent `adakv serve` replicas (data
// parallelism): each request goes to the replica with the most free KV blocks (ReplicaSet),
// its response is passed back as it arrives (SSE streams chunk by chunk), /metrics shows every
// replica's series with a replica label and their sums, and /health is up while any replica
// is. A replica that cannot be reached is skipped before the request is sent; one that fails
// during a request ends that request with an error (a 502, or an error event and [DONE] on a
// stream already started) while the others keep serving.
//
// Threads: handle() runs on the HTTP I/O thread and hands each request to a thread of its own
// (upstream calls block); a poller thread reads the replicas' /metrics every poll_s, the first
// time at once (until then no replica is up: /health answers 503).
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include "runtime/server/http_server.h"
#include "runtime/server/replica_set.h"

namespace adakv::server {

struct RouterConfig {
  double poll_s = 0.2;          // between reads of every replica's /metrics
  double poll_timeout_s = 2.0;  // a replica slower than this to answer /metrics is down
};

class ReplicaRouter {
 public:
  ReplicaRouter(std::vector<HttpEndpoint> replicas, RouterConfig config);
  ~ReplicaRouter();

  void handle(const std::shared_ptr<Exchange>& ex);
  // Stop taking requests; those in flight get drain_s seconds, then their upstream calls are
  // cut. Returns when none is left.
  void shutdown(double drain_s);
  // Requests being proxied now.
  size_t in_flight() const { return active_; }
  const ReplicaSet& replicas() const { return replicas_; }

 private:
  void poll_loop();
  void proxy(std::shared_ptr<Exchange> ex);
  void metrics(const std::shared_ptr<Exchange>& ex);

  ReplicaSet replicas_;
  RouterConfig config_;
  std::atomic<bool> closed_{false}, stop_polling_{false};
  std::atomic<size_t> active_{0};
  std::mutex mu_;
  std::condition_variable changed_;
  std::vector<std::shared_ptr<HttpCall>> calls_;  // those running, to cut at the drain's end
  std::thread poller_;
};

}  // namespace adakv::server

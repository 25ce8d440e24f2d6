// The serving loop behind a thread-safe door: HTTP threads submit and abort requests; one
// engine thread (the one that owns the Worker, and so every MPI call of rank 0) runs the loop.
//
// A submitted request's callbacks (on_text, on_token, on_done, on_error) run on the engine
// thread; the HTTP side posts what they carry to its own connection. Every submission ends in
// exactly one of on_done or on_error.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/engine.h"
#include "runtime/server/metrics.h"

namespace adakv::server {

struct Submission {
  runtime::Request request;
  // n > 1: the other samples of request's prompt (equal but for sampling and callbacks); they
  // share its prefill and its compressed cache (Engine::add_samples).
  std::vector<runtime::Request> samples;
  double arrived_s = 0;  // steady clock, for the latency metrics
  // The request could not run: refused by the engine (400, the message names the problem) or
  // the engine failed under it (503).
  std::function<void(int status, const std::string& message)> on_error;
};

enum class SubmitStatus { kQueued, kQueueFull, kClosed };

class FrontDoor {
 public:
  // `max_queue`: submissions past this many waiting requests are turned away (kQueueFull).
  FrontDoor(runtime::Worker& engine, const runtime::ServingConfig& config, size_t max_queue,
            ServerMetrics& metrics);

  // Any thread. A ticket names a request before the engine has seen it (for abort).
  uint64_t new_ticket() { return next_ticket_++; }
  SubmitStatus submit(uint64_t ticket, Submission s);
  // Any thread: throws std::invalid_argument when the engine would refuse `s` (what its
  // on_error would report as 400), so that a caller can answer before it submits.
  void check(const Submission& s) const;
  // Any thread: ends the request (finish_reason "abort"); its blocks return at the next step.
  void abort(uint64_t ticket);
  // Any thread: stop taking requests; those in flight get `drain_s` seconds to finish, then are
  // aborted. run() returns once nothing is left.
  void shutdown(double drain_s);

  // The engine thread: runs the loop until shutdown() and the end of the work.
  void run();

  bool accepting() const { return !closed_ && !dead_; }
  bool dead() const { return dead_; }
  static double now_s();

 private:
  struct Live {
    std::vector<uint64_t> ids;  // the Engine's, one per sample
    size_t running = 0;         // samples not yet done
    std::function<void(int, const std::string&)> on_error;
  };
  void admit(std::deque<std::pair<uint64_t, Submission>>& batch);
  void publish_gauges();
  void fail_all(const std::string& why);

  runtime::Worker& engine_;
  runtime::Engine loop_;
  size_t max_queue_;
  ServerMetrics& metrics_;
  std::atomic<uint64_t> next_ticket_{1};
  std::atomic<bool> closed_{false}, dead_{false};
  std::atomic<size_t> engine_waiting_{0};  // the scheduler's queue after the last step

  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<std::pair<uint64_t, Submission>> incoming_;
  std::deque<uint64_t> aborts_;
  double drain_deadline_s_ = 0;

  std::map<uint64_t, Live> live_;  // engine thread only: ticket -> request in the loop
};

}  // namespace adakv::server

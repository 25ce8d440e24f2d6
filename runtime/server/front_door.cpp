#include "runtime/server/front_door.h"

#include <chrono>
#include <cstdio>
#include <stdexcept>

namespace adakv::server {

double FrontDoor::now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

FrontDoor::FrontDoor(runtime::Worker& engine, const runtime::ServingConfig& config,
                     size_t max_queue, ServerMetrics& metrics)
    : engine_(engine), loop_(engine, config), max_queue_(max_queue), metrics_(metrics) {
  publish_gauges();
}

SubmitStatus FrontDoor::submit(uint64_t ticket, Submission s) {
  std::lock_guard lock(mu_);
  if (closed_ || dead_) return SubmitStatus::kClosed;
  if (incoming_.size() + engine_waiting_ >= max_queue_) return SubmitStatus::kQueueFull;
  incoming_.emplace_back(ticket, std::move(s));
  wake_.notify_one();
  return SubmitStatus::kQueued;
}

void FrontDoor::check(const Submission& s) const {
  loop_.check(s.request);
  for (const auto& r : s.samples) loop_.check(r);
}

void FrontDoor::abort(uint64_t ticket) {
  std::lock_guard lock(mu_);
  aborts_.push_back(ticket);
  wake_.notify_one();
}

void FrontDoor::shutdown(double drain_s) {
  std::lock_guard lock(mu_);
  // A later, shorter drain (a second signal) brings the deadline forward.
  const double deadline = now_s() + drain_s;
  if (!closed_ || deadline < drain_deadline_s_) drain_deadline_s_ = deadline;
  closed_ = true;
  wake_.notify_one();
}

void FrontDoor::admit(std::deque<std::pair<uint64_t, Submission>>& batch) {
  for (auto& [ticket, s] : batch) {
    const double arrived = s.arrived_s;
    const size_t n_prompt = s.request.generate.prompt.size();
    std::vector<runtime::Request> samples;
    samples.push_back(std::move(s.request));
    for (auto& r : s.samples) samples.push_back(std::move(r));
    for (size_t i = 0; i < samples.size(); ++i) {
      runtime::Request& r = samples[i];
      // Latency metrics ride on the request's own callbacks: the first token once per
      // request, the gaps between tokens per sample.
      auto last_token_at = std::make_shared<double>(0);
      auto on_token = std::move(r.on_token);
      const bool first_sample = i == 0;
      r.on_token = [this, arrived, last_token_at, on_token, first_sample](int32_t t) {
        const double now = now_s();
        if (*last_token_at == 0) {
          if (first_sample) metrics_.on_first_token(now - arrived);
        } else {
          metrics_.on_token(now - *last_token_at);
        }
        *last_token_at = now;
        if (on_token) on_token(t);
      };
      auto on_done = std::move(r.on_done);
      r.on_done = [this, ticket, arrived, on_done](runtime::GenerateResult&& g) {
        const auto it = live_.find(ticket);
        if (it != live_.end() && --it->second.running == 0) live_.erase(it);
        metrics_.on_finished(g.finish_reason, now_s() - arrived, g.kv_full_bytes, g.kv_kept_bytes);
        if (on_done) on_done(std::move(g));
      };
    }
    try {
      const size_t n = samples.size();
      std::vector<uint64_t> ids = n == 1 ? std::vector<uint64_t>{loop_.add(std::move(samples[0]))}
                                         : loop_.add_samples(std::move(samples));
      live_[ticket] = Live{std::move(ids), n, std::move(s.on_error)};
      metrics_.add_prompt_tokens(n_prompt);
    } catch (const std::invalid_argument& e) {
      if (s.on_error) s.on_error(400, e.what());
    }
  }
}

void FrontDoor::publish_gauges() {
  const auto& sched = loop_.scheduler();
  EngineGauges g;
  g.running = sched.num_running();
  g.waiting = sched.num_waiting();
  g.total_blocks = sched.capacity_blocks();
  // Cached blocks no request uses are free to take (vLLM counts them free too).
  g.cached_blocks = sched.cached_blocks(0, false);
  g.cached_free_blocks = sched.cached_blocks(0, true);
  g.free_blocks = loop_.free_blocks() + g.cached_free_blocks;
  const auto& cfg = engine_.model().config();
  const size_t block_bytes =
      kernels::KvBlockLayout{sched.config().block_tokens, cfg.head_dim, sched.config().kv_dtype}
          .block_bytes();
  size_t used = 0, uncompressed = 0, compressed = 0;
  for (size_t rank = 0; rank < engine_.job_size(); ++rank) {
    used += sched.used_blocks(rank) - sched.cached_blocks(rank, true);
    uncompressed += sched.uncompressed_blocks(rank);
    compressed += sched.compressed_blocks(rank);
  }
  g.bytes_held = used * block_bytes;
  g.bytes_saved = uncompressed > compressed ? (uncompressed - compressed) * block_bytes : 0;
  g.preemptions = loop_.stats().preemptions;
  const auto prefix = sched.prefix_stats();
  g.prefix_queries = prefix.queried_tokens;
  g.prefix_hits = prefix.hit_tokens;
  engine_waiting_ = g.waiting;
  metrics_.set_gauges(g);
}

void FrontDoor::fail_all(const std::string& why) {
  for (auto& [ticket, live] : live_) {
    if (live.on_error) live.on_error(503, why);
  }
  live_.clear();
  std::deque<std::pair<uint64_t, Submission>> left;
  {
    std::lock_guard lock(mu_);
    left.swap(incoming_);
  }
  for (auto& [ticket, s] : left) {
    if (s.on_error) s.on_error(503, why);
  }
}

void FrontDoor::run() {
  for (;;) {
    std::deque<std::pair<uint64_t, Submission>> batch;
    std::deque<uint64_t> aborts;
    bool drain_over = false;
    {
      std::unique_lock lock(mu_);
      wake_.wait(lock, [&] {
        return !incoming_.empty() || !aborts_.empty() || loop_.has_work() || closed_;
      });
      batch.swap(incoming_);
      aborts.swap(aborts_);
      drain_over = closed_ && now_s() >= drain_deadline_s_;
      if (closed_ && batch.empty() && !loop_.has_work()) return;
    }
    admit(batch);
    for (uint64_t ticket : aborts) {
      const auto it = live_.find(ticket);
      if (it == live_.end()) continue;
      for (uint64_t id : std::vector<uint64_t>(it->second.ids)) loop_.abort(id);
    }
    if (drain_over) {
      std::vector<uint64_t> ids;
      for (const auto& [ticket, live] : live_)
        ids.insert(ids.end(), live.ids.begin(), live.ids.end());
      for (uint64_t id : ids) loop_.abort(id);
    }
    try {
      loop_.step();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "[adakv] the engine failed: %s\n", e.what());
      dead_ = true;
      fail_all(std::string("the engine failed: ") + e.what());
      return;
    }
    publish_gauges();
  }
}

}  // namespace adakv::server

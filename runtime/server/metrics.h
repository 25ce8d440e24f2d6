// The server's Prometheus metrics, under vLLM's names with an `adakv:` prefix, plus Ada-KV's
// own (KV bytes held and saved by compression, the share of its cache each request kept).
// The engine thread records; any thread renders the text exposition (GET /metrics).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace adakv::server {

// Cumulative histogram over fixed upper bounds (the +Inf bucket is implicit).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double x);
  // Appends the _bucket / _sum / _count lines of metric `name`.
  void render(const std::string& name, std::string& out) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // [bounds + 1]: per bucket, not cumulative
  double sum_ = 0;
  uint64_t count_ = 0;
};

// The pool and queue right after a step.
struct EngineGauges {
  size_t running = 0, waiting = 0;
  size_t free_blocks = 0, total_blocks = 0;
  size_t bytes_held = 0;     // blocks the requests hold (every rank; cached ones in use), in bytes
  size_t bytes_saved = 0;    // what they would hold uncompressed, minus bytes_held
  size_t preemptions = 0;    // since the start
  size_t cached_blocks = 0;  // rank 0's blocks that cached prompt spans and contexts hold
  size_t cached_free_blocks = 0;  // of those, what no request references (the pool's to take)
  uint64_t prefix_queries = 0, prefix_hits = 0;  // prompt tokens looked up / found cached
};

class ServerMetrics {
 public:
  ServerMetrics();

  void set_gauges(const EngineGauges& g);
  void add_prompt_tokens(size_t n);
  void on_first_token(double ttft_s);
  void on_token(double gap_s);  // a token after the first: the gap since the previous one
  // A request ended: its reason (stop, length, abort), arrival-to-end time and KV bytes.
  void on_finished(const std::string& reason, double e2e_s, size_t kv_full_bytes,
                   size_t kv_kept_bytes);

  std::string render() const;

 private:
  mutable std::mutex mu_;
  EngineGauges gauges_;
  uint64_t prompt_tokens_ = 0, generation_tokens_ = 0, kv_bytes_saved_total_ = 0;
  std::map<std::string, uint64_t> finished_;
  Histogram ttft_, itl_, e2e_, kept_share_;
};

}  // namespace adakv::server

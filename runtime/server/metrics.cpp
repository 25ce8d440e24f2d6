#include "runtime/server/metrics.h"

#include <algorithm>
#include <cstdio>

namespace adakv::server {
namespace {

std::string number(double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", x);
  return buf;
}

void header(std::string& out, const std::string& name, const char* type, const char* help) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void sample(std::string& out, const std::string& name, double value) {
  out += name + " " + number(value) + "\n";
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double x) {
  const size_t i = size_t(std::lower_bound(bounds_.begin(), bounds_.end(), x) - bounds_.begin());
  ++counts_[i];
  sum_ += x;
  ++count_;
}

void Histogram::render(const std::string& name, std::string& out) const {
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    out += name + "_bucket{le=\"" + number(bounds_[i]) + "\"} " + std::to_string(cumulative) + "\n";
  }
  out += name + "_bucket{le=\"+Inf\"} " + std::to_string(count_) + "\n";
  sample(out, name + "_sum", sum_);
  out += name + "_count " + std::to_string(count_) + "\n";
}

// Bucket bounds as vLLM's (seconds), extended for a CPU's long prompts.
ServerMetrics::ServerMetrics()
    : ttft_({0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
             1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}),
      itl_({0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
            20.0, 40.0, 80.0}),
      e2e_({0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
            30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}),
      kept_share_({0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.99, 1.0}) {}

void ServerMetrics::set_gauges(const EngineGauges& g) {
  std::lock_guard lock(mu_);
  gauges_ = g;
}

void ServerMetrics::add_prompt_tokens(size_t n) {
  std::lock_guard lock(mu_);
  prompt_tokens_ += n;
}

void ServerMetrics::on_first_token(double ttft_s) {
  std::lock_guard lock(mu_);
  ++generation_tokens_;
  ttft_.observe(ttft_s);
}

void ServerMetrics::on_token(double gap_s) {
  std::lock_guard lock(mu_);
  ++generation_tokens_;
  itl_.observe(gap_s);
}

void ServerMetrics::on_finished(const std::string& reason, double e2e_s, size_t kv_full_bytes,
                                size_t kv_kept_bytes) {
  std::lock_guard lock(mu_);
  ++finished_[reason];
  e2e_.observe(e2e_s);
  if (kv_full_bytes > 0) {
    kept_share_.observe(double(kv_kept_bytes) / double(kv_full_bytes));
    if (kv_full_bytes > kv_kept_bytes) kv_bytes_saved_total_ += kv_full_bytes - kv_kept_bytes;
  }
}

std::string ServerMetrics::render() const {
  std::lock_guard lock(mu_);
  std::string out;
  const EngineGauges& g = gauges_;
  auto gauge = [&](const char* name, const char* help, double v) {
    header(out, std::string("adakv:") + name, "gauge", help);
    sample(out, std::string("adakv:") + name, v);
  };
  auto counter = [&](const char* name, const char* help, double v) {
    header(out, std::string("adakv:") + name, "counter", help);
    sample(out, std::string("adakv:") + name, v);
  };
  gauge("num_requests_running", "Sequences holding KV blocks (prefilling or decoding).",
        double(g.running));
  gauge("num_requests_waiting", "Requests queued for admission.", double(g.waiting));
  gauge("kv_cache_usage_perc", "Share of the KV pool's blocks in use (1 = full).",
        g.total_blocks ? 1.0 - double(g.free_blocks) / double(g.total_blocks) : 0.0);
  gauge("kv_cache_free_blocks",
        "Free blocks of rank 0's KV pool, with the cached ones no request uses (taken back when "
        "needed).",
        double(g.free_blocks));
  gauge("kv_cache_total_blocks", "Blocks of rank 0's KV pool.", double(g.total_blocks));
  gauge("kv_cache_bytes_held", "KV bytes the resident sequences hold, every rank.",
        double(g.bytes_held));
  gauge("kv_cache_bytes_saved",
        "KV bytes compression saves the resident sequences now (uncompressed minus held).",
        double(g.bytes_saved));
  gauge("kv_cache_cached_blocks",
        "Blocks of rank 0's KV pool that cached prompt prefixes and compressed contexts hold.",
        double(g.cached_blocks));
  gauge("kv_cache_cached_free_blocks",
        "Of kv_cache_cached_blocks, those no request references: the pool takes them back when "
        "it needs them.",
        double(g.cached_free_blocks));
  counter("num_preemptions_total", "Sequences preempted (recomputed later).",
          double(g.preemptions));
  counter("prefix_cache_queries_total",
          "Prompt tokens looked up in the prefix cache (and context tokens in the compressed "
          "contexts).",
          double(g.prefix_queries));
  counter("prefix_cache_hits_total", "Of those, tokens found cached.", double(g.prefix_hits));
  counter("prompt_tokens_total", "Prompt tokens of accepted requests.", double(prompt_tokens_));
  counter("generation_tokens_total", "Tokens generated.", double(generation_tokens_));
  counter("kv_bytes_saved_total", "Full minus kept KV bytes, summed over finished requests.",
          double(kv_bytes_saved_total_));
  header(out, "adakv:request_success_total", "counter", "Requests finished, by finish reason.");
  for (const char* reason : {"stop", "length", "abort"}) {
    const auto it = finished_.find(reason);
    out += std::string("adakv:request_success_total{finished_reason=\"") + reason + "\"} " +
           std::to_string(it == finished_.end() ? 0 : it->second) + "\n";
  }
  auto histogram = [&](const char* name, const char* help, const Histogram& h) {
    header(out, std::string("adakv:") + name, "histogram", help);
    h.render(std::string("adakv:") + name, out);
  };
  histogram("time_to_first_token_seconds", "From arrival to the first token.", ttft_);
  histogram("inter_token_latency_seconds", "Between consecutive tokens of a request.", itl_);
  histogram("e2e_request_latency_seconds", "From arrival to the end.", e2e_);
  histogram("request_kv_kept_share", "KV bytes a finished request held over its full size.",
            kept_share_);
  return out;
}

}  // namespace adakv::server

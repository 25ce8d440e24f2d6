// The Prometheus text of the server's metrics: names, cumulative buckets, counters by reason.
#include <gtest/gtest.h>

#include <string>

#include "runtime/server/api_error.h"
#include "runtime/server/metrics.h"

namespace adakv::server {
namespace {

bool has_line(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos || text.rfind(line + "\n", 0) == 0;
}

TEST(ServerMetrics, HistogramBucketsAreCumulative) {
  Histogram h({0.1, 1.0});
  for (double x : {0.05, 0.1, 0.5, 2.0}) h.observe(x);
  std::string out;
  h.render("m", out);
  EXPECT_TRUE(has_line(out, "m_bucket{le=\"0.1\"} 2")) << out;  // le is inclusive
  EXPECT_TRUE(has_line(out, "m_bucket{le=\"1\"} 3")) << out;
  EXPECT_TRUE(has_line(out, "m_bucket{le=\"+Inf\"} 4")) << out;
  EXPECT_TRUE(has_line(out, "m_sum 2.65")) << out;
  EXPECT_TRUE(has_line(out, "m_count 4")) << out;
}

TEST(ServerMetrics, RendersGaugesCountersAndReasons) {
  ServerMetrics m;
  m.set_gauges({.running = 3,
                .waiting = 2,
                .free_blocks = 25,
                .total_blocks = 100,
                .bytes_held = 4096,
                .bytes_saved = 1024,
                .preemptions = 7});
  m.add_prompt_tokens(40);
  m.on_first_token(0.5);
  m.on_token(0.02);
  m.on_finished("length", 1.5, 1000, 200);
  m.on_finished("abort", 0.1, 0, 0);
  const std::string t = m.render();
  EXPECT_TRUE(has_line(t, "adakv:num_requests_running 3")) << t;
  EXPECT_TRUE(has_line(t, "adakv:num_requests_waiting 2"));
  EXPECT_TRUE(has_line(t, "adakv:kv_cache_usage_perc 0.75"));
  EXPECT_TRUE(has_line(t, "adakv:num_preemptions_total 7"));
  EXPECT_TRUE(has_line(t, "adakv:prompt_tokens_total 40"));
  EXPECT_TRUE(has_line(t, "adakv:generation_tokens_total 2"));
  EXPECT_TRUE(has_line(t, "adakv:kv_bytes_saved_total 800"));
  EXPECT_TRUE(has_line(t, "adakv:kv_cache_bytes_saved 1024"));
  EXPECT_TRUE(has_line(t, "adakv:request_success_total{finished_reason=\"length\"} 1"));
  EXPECT_TRUE(has_line(t, "adakv:request_success_total{finished_reason=\"abort\"} 1"));
  EXPECT_TRUE(has_line(t, "adakv:request_success_total{finished_reason=\"stop\"} 0"));
  EXPECT_TRUE(has_line(t, "adakv:request_kv_kept_share_count 1"));  // the abort held nothing
  EXPECT_TRUE(has_line(t, "# TYPE adakv:time_to_first_token_seconds histogram"));
}

TEST(ApiError, OpenAiShapeWithParamOrNull) {
  const auto with = nlohmann::json::parse(error_body(400, "bad 'top_p'", "top_p"));
  EXPECT_EQ(with["error"]["type"], "invalid_request_error");
  EXPECT_EQ(with["error"]["param"], "top_p");
  EXPECT_EQ(with["error"]["code"], 400);
  const auto without = nlohmann::json::parse(error_body(429, "later"));
  EXPECT_EQ(without["error"]["type"], "rate_limit_error");
  EXPECT_TRUE(without["error"]["param"].is_null());
}

}  // namespace
}  // namespace adakv::server

#include <gtest/gtest.h>

#include <stdexcept>

#include "runtime/server/http_client.h"
#include "runtime/server/replica_set.h"

using adakv::server::choose_replica;
using adakv::server::HttpEndpoint;
using adakv::server::merge_replica_metrics;
using adakv::server::ReplicaLoad;

namespace {

ReplicaLoad load(double free, double total, double running, size_t in_flight, bool up = true) {
  ReplicaLoad l;
  l.up = up;
  l.free_blocks = free;
  l.total_blocks = total;
  l.running = running;
  l.in_flight = in_flight;
  return l;
}

}  // namespace

TEST(ReplicaSet, ChoosesTheMostFreeBlocksAmongThoseUp) {
  EXPECT_EQ(choose_replica({load(100, 1000, 0, 0), load(900, 1000, 0, 0)}), 1u);
  EXPECT_EQ(choose_replica({load(100, 1000, 0, 0), load(900, 1000, 0, 0, false)}), 0u);
  EXPECT_FALSE(choose_replica({load(100, 1000, 0, 0, false)}).has_value());
  EXPECT_FALSE(choose_replica({}).has_value());
}

TEST(ReplicaSet, RequestsNotYetSeenAreChargedAtTheMeanHeld) {
  // Replica 0: 600 free, 2 running holding 200 each, 3 more routed since the poll (-600).
  // Replica 1: 300 free, nothing unseen.
  EXPECT_EQ(choose_replica({load(600, 1000, 2, 5), load(300, 1000, 3, 3)}), 1u);
  // Seen requests are in free_blocks already: not charged twice.
  EXPECT_EQ(choose_replica({load(600, 1000, 2, 2), load(300, 1000, 3, 3)}), 0u);
}

TEST(ReplicaSet, TiesGoToFewerInFlightThenTheLowerIndex) {
  EXPECT_EQ(choose_replica({load(500, 1000, 0, 2), load(500, 1000, 0, 1)}), 1u);
  EXPECT_EQ(choose_replica({load(500, 1000, 0, 1), load(500, 1000, 0, 1)}), 0u);
}

TEST(ReplicaSet, MergedMetricsHaveTotalsAndOneSeriesPerReplica) {
  const std::string a =
      "# HELP adakv:x A gauge.\n# TYPE adakv:x gauge\nadakv:x 2\n"
      "# TYPE adakv:r counter\nadakv:r{finished_reason=\"stop\"} 1\n"
      "# TYPE adakv:h histogram\nadakv:h_bucket{le=\"1\"} 3\nadakv:h_sum 0.5\nadakv:h_count 3\n";
  const std::string b =
      "# HELP adakv:x A gauge.\n# TYPE adakv:x gauge\nadakv:x 5\n"
      "# TYPE adakv:r counter\nadakv:r{finished_reason=\"stop\"} 4\n"
      "# TYPE adakv:h histogram\nadakv:h_bucket{le=\"1\"} 1\nadakv:h_sum 0.25\nadakv:h_count 1\n";
  const std::string m = merge_replica_metrics({a, b});
  for (const char* line :
       {"# HELP adakv:x A gauge.\n# TYPE adakv:x gauge\nadakv:x 7\nadakv:x{replica=\"0\"} 2\n"
        "adakv:x{replica=\"1\"} 5\n",
        "adakv:r{finished_reason=\"stop\"} 5\n",
        "adakv:r{replica=\"1\",finished_reason=\"stop\"} 4\n", "adakv:h_bucket{le=\"1\"} 4\n",
        "adakv:h_sum 0.75\n", "adakv:h_count{replica=\"0\"} 3\n"}) {
    EXPECT_NE(m.find(line), std::string::npos) << line << "\nin:\n" << m;
  }
  // HELP/TYPE once per family, the histogram's samples under its one TYPE line.
  EXPECT_EQ(m.find("# TYPE adakv:x gauge"), m.rfind("# TYPE adakv:x gauge"));
  EXPECT_LT(m.find("# TYPE adakv:h histogram"), m.find("adakv:h_sum"));
  // A replica that is down ("") adds nothing.
  EXPECT_NE(merge_replica_metrics({a, ""}).find("adakv:x 2\n"), std::string::npos);
}

TEST(ReplicaSet, EndpointsAreHttpHostPort) {
  const auto e = HttpEndpoint::parse("http://node2:8001");
  EXPECT_EQ(e.host, "node2");
  EXPECT_EQ(e.port, "8001");
  EXPECT_EQ(HttpEndpoint::parse("http://[::1]:80").host, "::1");
  for (const char* bad : {"node2:8001", "http://node2", "http://node2:8001/", "https://n:1",
                          "http://n:0", "http://n:70000"}) {
    EXPECT_THROW(HttpEndpoint::parse(bad), std::invalid_argument) << bad;
  }
}

// Requests about one compressed context go to one replica while it has at least half the free
// blocks of the least loaded one; different contexts spread over the replicas.
TEST(ReplicaSet, RequestsAboutOneContextGoWhereItIsCached) {
  using adakv::server::context_affinity;
  const std::vector<ReplicaLoad> even = {load(500, 1000, 1, 1), load(500, 1000, 1, 1),
                                         load(500, 1000, 1, 1), load(500, 1000, 1, 1)};
  std::vector<size_t> homes(4, 0);
  for (int doc = 0; doc < 64; ++doc) {
    const std::string system =
        R"({"role": "system", "content": "document )" + std::to_string(doc) + R"("})";
    const uint64_t first = context_affinity(R"({"kv_compress_context": true, "messages": [)" +
                                            system + R"(, {"role": "user", "content": "Q1?"}]})");
    // The next turn: the same first message, more after it.
    const uint64_t later = context_affinity(
        R"({"kv_compress_context": true, "messages": [)" + system +
        R"(, {"role": "user", "content": "Q1?"}, {"role": "assistant", "content": "A."},)"
        R"( {"role": "user", "content": "Q2?"}]})");
    ASSERT_NE(first, 0u);
    EXPECT_EQ(first, later);
    const auto home = choose_replica(even, first);
    ASSERT_TRUE(home.has_value());
    ++homes[*home];
    // Busier than the others but with half their free blocks: it still goes home.
    std::vector<ReplicaLoad> busy = even;
    busy[*home].free_blocks = 260;
    EXPECT_EQ(choose_replica(busy, first), home);
    // Below half: the load rule decides.
    busy[*home].free_blocks = 200;
    EXPECT_NE(choose_replica(busy, first), home);
    // Home down: another replica, the same one for every request about it.
    busy = even;
    busy[*home].up = false;
    const auto other = choose_replica(busy, first);
    ASSERT_TRUE(other.has_value());
    EXPECT_NE(*other, *home);
    EXPECT_EQ(choose_replica(busy, later), other);
  }
  for (size_t n : homes) EXPECT_GE(n, 6u) << "64 contexts over 4 replicas";
}

TEST(ReplicaSet, OnlyCompressedContextsHaveAnAffinity) {
  using adakv::server::context_affinity;
  EXPECT_EQ(context_affinity(R"({"messages": [{"role": "user", "content": "x"}]})"), 0u);
  EXPECT_EQ(context_affinity(R"({"kv_compress_context": false, "prompt": "x"})"), 0u);
  EXPECT_EQ(context_affinity("not json"), 0u);
  EXPECT_EQ(context_affinity(R"({"kv_compress_context": true})"), 0u);
  const uint64_t a = context_affinity(R"({"kv_compress_context": true, "prompt": "doc. Q1?"})");
  const uint64_t b = context_affinity(R"({"kv_compress_context": true, "prompt": "doc. Q2?"})");
  EXPECT_NE(a, 0u);
  EXPECT_NE(a, b);  // a completion's first 1024 bytes: these prompts are shorter
}

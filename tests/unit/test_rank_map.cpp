// The rank map of a cluster config (launcher/cluster/rank_map.h): which node, local rank, device
// and tp/pp/dp coordinates each rank gets, the refusal of a TP group on two nodes, and the table
// `adakv launch --dry-run` prints.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "launcher/cluster/cluster_config.h"
#include "launcher/cluster/rank_map.h"

using namespace adakv::cluster;

namespace {

const std::string kConfigDir = std::string(ADAKV_TEST_DATA_DIR) + "/../../configs/cluster/";

// Expected placement, one per rank: host, local rank, device, tp, pp, dp, layers (-1 = none).
struct Want {
  std::string host;
  int local, device, tp, pp, dp, first = -1, last = -1;
};

void expect_map(const std::vector<RankPlacement>& got, const std::vector<Want>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t r = 0; r < want.size(); ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const RankPlacement& p = got[r];
    const Want& w = want[r];
    EXPECT_EQ(p.rank, static_cast<int>(r));
    EXPECT_EQ(p.host, w.host);
    EXPECT_EQ(p.local_rank, w.local);
    EXPECT_EQ(p.device, w.device);
    EXPECT_EQ(p.tp_rank, w.tp);
    EXPECT_EQ(p.pp_rank, w.pp);
    EXPECT_EQ(p.dp_rank, w.dp);
    if (w.first < 0) {
      EXPECT_FALSE(p.layers.has_value());
    } else {
      ASSERT_TRUE(p.layers.has_value());
      EXPECT_EQ(p.layers->begin, w.first);
      EXPECT_EQ(p.layers->end, w.last + 1);
    }
  }
}

std::string error_of(const std::string& yaml) {
  try {
    parse_cluster_config(yaml, "test.yaml");
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no ConfigError for:\n" << yaml;
  return "";
}

const char* kTwoCpuNodesOfThree = R"(
backend: cpu
nodes:
  - host: a
    slots: 3
  - host: b
    slots: 3
)";

}  // namespace

TEST(RankMap, Tp8Pp2OnTwoNodesOfEightGpus) {
  const ClusterConfig c = load_cluster_config(kConfigDir + "h100x8-2node-tp8-pp2.yaml");
  EXPECT_EQ(c.tp, 8);
  EXPECT_EQ(c.pp, 2);
  EXPECT_EQ(c.dp, 1);
  EXPECT_EQ(c.job_ranks(), 16);
  EXPECT_FALSE(c.allow_tp_across_nodes);
  // Llama-3.1-405B's 126 layers: 63 per stage.
  const auto map = rank_map(c, 126);
  std::vector<Want> want;
  for (int r = 0; r < 8; ++r) want.push_back({"node1", r, r, r, 0, 0, 0, 62});
  for (int r = 0; r < 8; ++r) want.push_back({"node2", r, r, r, 1, 0, 63, 125});
  expect_map(map, want);
  EXPECT_EQ(tp_group_span(c, map), "");
}

TEST(RankMap, Dp2Tp8OnTwoNodesOfEightGpus) {
  const ClusterConfig c = load_cluster_config(kConfigDir + "h100x8-2node-dp2-tp8.yaml");
  EXPECT_EQ(c.tp, 8);
  EXPECT_EQ(c.pp, 1);
  EXPECT_EQ(c.dp, 2);
  const auto map = rank_map(c);
  std::vector<Want> want;
  for (int r = 0; r < 8; ++r) want.push_back({"node1", r, r, r, 0, 0});
  for (int r = 0; r < 8; ++r) want.push_back({"node2", r, r, r, 0, 1});
  expect_map(map, want);
  EXPECT_EQ(tp_group_span(c, map), "");
}

TEST(RankMap, Tp3Pp2OnTwoCpuNodesOfThreeSlots) {
  // tp left out: the 6 slots in 2 stages imply TP 3.
  const ClusterConfig c = parse_cluster_config(
      std::string(kTwoCpuNodesOfThree) + "pipeline_parallel_size: 2\n", "test.yaml");
  EXPECT_EQ(c.tp, 3);
  EXPECT_EQ(c.job_ranks(), 6);
  // 7 layers split unevenly: the first stage takes the extra one.
  expect_map(rank_map(c, 7), {{"a", 0, -1, 0, 0, 0, 0, 3},
                              {"a", 1, -1, 1, 0, 0, 0, 3},
                              {"a", 2, -1, 2, 0, 0, 0, 3},
                              {"b", 0, -1, 0, 1, 0, 4, 6},
                              {"b", 1, -1, 1, 1, 0, 4, 6},
                              {"b", 2, -1, 2, 1, 0, 4, 6}});
  expect_map(rank_map(c), {{"a", 0, -1, 0, 0, 0},
                           {"a", 1, -1, 1, 0, 0},
                           {"a", 2, -1, 2, 0, 0},
                           {"b", 0, -1, 0, 1, 0},
                           {"b", 1, -1, 1, 1, 0},
                           {"b", 2, -1, 2, 1, 0}});
}

TEST(RankMap, FewerRanksThanSlotsFillTheFirstNode) {
  // tp 1 x dp 4 on 3 + 3 slots: 4 ranks, a's 3 slots first, then one on b.
  const ClusterConfig c = parse_cluster_config(
      std::string(kTwoCpuNodesOfThree) + "tp: 1\ndata_parallel_size: 4\n", "test.yaml");
  expect_map(
      rank_map(c),
      {{"a", 0, -1, 0, 0, 0}, {"a", 1, -1, 0, 0, 1}, {"a", 2, -1, 0, 0, 2}, {"b", 0, -1, 0, 0, 3}});
}

TEST(RankMap, MoreStagesThanLayersIsAnErrorNamingTheKey) {
  const ClusterConfig c = parse_cluster_config(
      std::string(kTwoCpuNodesOfThree) + "tp: 1\npipeline_parallel_size: 6\n", "test.yaml");
  try {
    rank_map(c, 4);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "test.yaml: pipeline_parallel_size: 6 stages need at least as many layers, the "
                 "model has 4");
  }
}

TEST(RankMap, TpGroupAcrossNodesIsRefusedNamingLayoutAndNodes) {
  // TP 3 on nodes of 2 + 1 slots.
  const std::string two_plus_one =
      "backend: cpu\ntp: 3\nnodes:\n  - host: a\n    slots: 2\n  - host: b\n    slots: 1\n";
  EXPECT_EQ(error_of(two_plus_one),
            "test.yaml: tp: layout TP 3 x PP 1 x DP 1 (3 ranks) puts TP group 0 (ranks 0-2) on 2 "
            "nodes: a (ranks 0-1), b (ranks 2); its all-reduces would cross the network every "
            "layer. Keep TP inside a node (tp dividing each node's slots, with "
            "pipeline_parallel_size or data_parallel_size across the nodes), or say "
            "allow_tp_across_nodes: true");
  const ClusterConfig allowed =
      parse_cluster_config(two_plus_one + "allow_tp_across_nodes: true\n", "test.yaml");
  EXPECT_TRUE(allowed.allow_tp_across_nodes);
  EXPECT_NE(tp_group_span(allowed, rank_map(allowed)), "");

  // TP 2 x PP 3 on 3 + 3 slots: group 1 (ranks 2-3) straddles the boundary.
  const std::string msg =
      error_of(std::string(kTwoCpuNodesOfThree) + "tp: 2\npipeline_parallel_size: 3\n");
  EXPECT_EQ(msg.rfind("test.yaml: tp: layout TP 2 x PP 3 x DP 1 (6 ranks) puts TP group 1 (ranks "
                      "2-3) on 2 nodes: a (ranks 2), b (ranks 3); ",
                      0),
            0u)
      << msg;

  // The shipped TP 16 config is the explicit exception; without the key it is refused.
  const ClusterConfig tp16 = load_cluster_config(kConfigDir + "h100x8-2node.yaml");
  EXPECT_TRUE(tp16.allow_tp_across_nodes);
  EXPECT_EQ(tp_group_span(tp16, rank_map(tp16)),
            "layout TP 16 x PP 1 x DP 1 (16 ranks) puts TP group 0 (ranks 0-15) on 2 nodes: node1 "
            "(ranks 0-7), node2 (ranks 8-15)");
  const std::string refused = error_of(
      "backend: cuda\ntp: 16\nnodes:\n  - host: node1\n    gpus: 8\n  - host: node2\n    gpus: "
      "8\n");
  EXPECT_NE(refused.find("GPUs, with pipeline_parallel_size"), std::string::npos) << refused;
  EXPECT_NE(refused.find("allow_tp_across_nodes: true"), std::string::npos) << refused;
}

TEST(RankMap, TableIsAlignedWithLayersWhenKnown) {
  const ClusterConfig c = parse_cluster_config(
      "backend: cpu\npipeline_parallel_size: 2\nnodes:\n  - host: node-a\n    slots: 2\n"
      "  - host: b\n    slots: 2\n",
      "test.yaml");
  EXPECT_EQ(rank_map_table(rank_map(c, 30)),
            "rank  node    local  device  tp  pp  dp  layers\n"
            "   0  node-a      0     cpu   0   0   0    0-14\n"
            "   1  node-a      1     cpu   1   0   0    0-14\n"
            "   2  b           0     cpu   0   1   0   15-29\n"
            "   3  b           1     cpu   1   1   0   15-29\n");
  const ClusterConfig gpu = load_cluster_config(kConfigDir + "h100x8.yaml");
  const std::string table = rank_map_table(rank_map(gpu));
  EXPECT_EQ(table.substr(0, table.find('\n', table.find('\n') + 1) + 1),
            "rank  node       local  device  tp  pp  dp\n"
            "   0  localhost      0       0   0   0   0\n");
}

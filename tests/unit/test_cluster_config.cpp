// Cluster configs (launcher/cluster): every file in configs/cluster parses; every validation
// rule fails with a message naming the file and the key; the hostfile and the mpirun command
// hold what OpenMPI needs; `adakv launch --dry-run` prints it through the real binary.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "launcher/cluster/cluster_config.h"
#include "launcher/cluster/mpirun_command.h"
#include "model/config.h"
#include "model/gguf/writer.h"

using namespace adakv::cluster;
namespace fs = std::filesystem;

namespace {

const std::string kConfigDir = std::string(ADAKV_TEST_DATA_DIR) + "/../../configs/cluster/";

const char* kMinimal = R"(
backend: cpu
tp: 2
nodes:
  - host: localhost
    slots: 2
)";

// The ConfigError message of parsing `yaml` as "test.yaml" ("" and a failure if none).
std::string error_of(const std::string& yaml) {
  try {
    parse_cluster_config(yaml, "test.yaml");
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no ConfigError for:\n" << yaml;
  return "";
}

bool contains(const std::vector<std::string>& argv, const std::vector<std::string>& run) {
  return std::search(argv.begin(), argv.end(), run.begin(), run.end()) != argv.end();
}

std::string value_of(const KeyValues& kv, const std::string& key) {
  for (const auto& [k, v] : kv) {
    if (k == key) return v;
  }
  return "";
}

// A llama GGUF header with the given heads; 4 dims per head, ffn 24, vocab 8.
std::string write_model(const std::string& name, uint32_t heads, uint32_t kv_heads) {
  adakv::gguf::GgufWriter w;
  w.add_string("general.architecture", "llama");
  w.add_u32("llama.block_count", 1);
  w.add_u32("llama.embedding_length", heads * 4);
  w.add_u32("llama.attention.head_count", heads);
  w.add_u32("llama.attention.head_count_kv", kv_heads);
  w.add_u32("llama.feed_forward_length", 24);
  w.add_u32("llama.context_length", 64);
  w.add_tensor_f32("token_embd.weight", {heads * 4, 8}, std::vector<float>(heads * 4 * 8, 0.f));
  const std::string path = testing::TempDir() + "adakv_cluster_" + name + ".gguf";
  w.write(path);
  return path;
}

ClusterConfig with_tp(int tp) {
  ClusterConfig c = parse_cluster_config(kMinimal, "test.yaml");
  c.tp = tp;
  c.nodes[0].slots = 16;
  return c;
}

struct CliRun {
  int rc = -1;
  std::string out;
};

CliRun run_adakv(const std::string& args) {
  EXPECT_TRUE(fs::exists(ADAKV_BINARY)) << "build the adakv target first: " << ADAKV_BINARY;
  FILE* pipe = popen((std::string(ADAKV_BINARY) + " " + args + " 2>&1").c_str(), "r");
  CliRun r;
  if (!pipe) return r;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, pipe)) > 0;) r.out.append(buf, n);
  const int status = pclose(pipe);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace

TEST(ClusterConfig, EveryShippedConfigParses) {
  size_t n = 0;
  for (const auto& entry : fs::directory_iterator(kConfigDir)) {
    if (entry.path().extension() != ".yaml") continue;
    SCOPED_TRACE(entry.path().string());
    const ClusterConfig c = load_cluster_config(entry.path().string());
    EXPECT_FALSE(c.name.empty());
    EXPECT_GE(c.total_ranks(), c.job_ranks());
    EXPECT_EQ(c.job_ranks(), c.tp * c.pp * c.dp);
    EXPECT_FALSE(hostfile_text(c).empty());
    ++n;
  }
  EXPECT_GE(n, 6u);
}

TEST(ClusterConfig, LocalConfigIsThreeCpuRanksOnThisMachine) {
  const ClusterConfig c = load_cluster_config(kConfigDir + "local.yaml");
  EXPECT_EQ(c.backend, Backend::kCpu);
  EXPECT_EQ(c.tp, 3);
  ASSERT_EQ(c.nodes.size(), 1u);
  EXPECT_EQ(c.nodes[0].host, "localhost");
  EXPECT_EQ(c.nodes[0].slots, 3);
  EXPECT_EQ(value_of(c.mpi.env, "OMPI_MCA_btl_vader_single_copy_mechanism"), "none");
}

TEST(ClusterConfig, H100ConfigsAreCudaWithNcclSettings) {
  const ClusterConfig one = load_cluster_config(kConfigDir + "h100x8.yaml");
  EXPECT_EQ(one.backend, Backend::kCuda);
  EXPECT_EQ(one.tp, 8);
  EXPECT_EQ(one.total_ranks(), 8);

  const ClusterConfig two = load_cluster_config(kConfigDir + "h100x8-2node.yaml");
  EXPECT_EQ(two.backend, Backend::kCuda);
  EXPECT_EQ(two.tp, 16);
  ASSERT_EQ(two.nodes.size(), 2u);
  EXPECT_EQ(two.nodes[1].gpus, 8);
  EXPECT_EQ(value_of(two.nccl_env, "NCCL_IB_HCA"), "mlx5");
  EXPECT_EQ(value_of(two.nccl_env, "NCCL_DEBUG"), "WARN");
  EXPECT_FALSE(value_of(two.nccl_env, "NCCL_SOCKET_IFNAME").empty());
  EXPECT_FALSE(value_of(two.nccl_env, "NCCL_IB_GID_INDEX").empty());
}

TEST(ClusterConfig, NetnsSimConfigNamesTheAgentRelativeToItsFile) {
  const ClusterConfig c = load_cluster_config(kConfigDir + "netns-sim.yaml");
  ASSERT_EQ(c.nodes.size(), 2u);
  EXPECT_EQ(c.nodes[0].host, "adakv-sim-node1");
  EXPECT_EQ(c.nodes[1].host, "adakv-sim-node2");
  EXPECT_TRUE(fs::path(c.mpi.launch_agent).is_absolute()) << c.mpi.launch_agent;
  EXPECT_TRUE(fs::exists(c.mpi.launch_agent)) << c.mpi.launch_agent;
  EXPECT_EQ(fs::path(c.mpi.launch_agent).filename(), "netns-agent.sh");
  EXPECT_EQ(c.mpi.tcp_if_include, "10.77.0.0/24");
}

TEST(ClusterConfig, NameDefaultsToTheFileStem) {
  EXPECT_EQ(parse_cluster_config(kMinimal, "dir/mine.yaml").name, "mine");
}

TEST(ClusterConfig, EveryRuleFailsWithAMessageNamingFileAndKey) {
  struct Case {
    std::string yaml;
    std::vector<std::string> expect;  // substrings of the message
  };
  const std::string nodes = "nodes:\n  - host: localhost\n    slots: 2\n";
  const std::vector<Case> cases = {
      {"", {"empty config"}},
      {"backend: cpu\ntp: [2\n", {"invalid YAML"}},
      {"- 1\n- 2\n", {"expected a map"}},
      {"backend: cpu\ntp: 2\nnodez: []\n", {":3:", "nodez", "unknown key", "nodes"}},
      {"tp: 2\n" + nodes, {"backend", "missing"}},
      {"backend: gpu\ntp: 2\n" + nodes, {"backend", "'gpu'", "cpu or cuda"}},
      {"backend: cpu\ntp: 2\npipeline_parallel_size: 0\n" + nodes,
       {"pipeline_parallel_size", "0 must be at least 1"}},
      {"backend: cpu\ntp: 2\npipeline_parallel_size: -2\n" + nodes,
       {"pipeline_parallel_size", "at least 1"}},
      {"backend: cpu\ntp: 2\npipeline_parallel_size: two\n" + nodes,
       {":3:", "pipeline_parallel_size", "'two' is not an integer"}},
      {"backend: cpu\ntp: 2\ndata_parallel_size: 0\n" + nodes,
       {"data_parallel_size", "0 must be at least 1"}},
      {"backend: cpu\ntp: 2\ndata_parallel_size: [2]\n" + nodes,
       {"data_parallel_size", "single value"}},
      {"backend: cpu\npipeline_parallel_size: 0\n" + nodes, {"pipeline_parallel_size"}},
      {"backend: cpu\npipeline_parallel_size: 3\n" + nodes,
       {"pipeline_parallel_size", "2 ranks do not split", "tp is left out", "2 slots"}},
      {"backend: cpu\ndata_parallel_size: 4\n" + nodes,
       {"data_parallel_size", "2 ranks do not split"}},
      {"backend: cpu\ntp: 2\npipeline_parallel_size: 2\n" + nodes,
       {"pipeline_parallel_size",
        "4 ranks (tp 2 x pipeline_parallel_size 2 x data_parallel_size 1) do not fit", "2 slots"}},
      {"backend: cpu\ntp: 1\ndata_parallel_size: 3\n" + nodes,
       {"data_parallel_size", "3 ranks", "do not fit"}},
      {"backend: cpu\ntp: 1\nallow_tp_across_nodes: yes please\n" + nodes,
       {"allow_tp_across_nodes", "not true or false"}},
      {"backend: cpu\ntp: 1\nmpi:\n  env:\n    ADAKV_PP_SIZE: 2\n" + nodes,
       {"mpi.env.ADAKV_PP_SIZE", "set by pipeline_parallel_size"}},
      {"backend: cpu\ntp: 1\nmpi:\n  env:\n    ADAKV_DP_SIZE: 2\n" + nodes,
       {"mpi.env.ADAKV_DP_SIZE", "set by data_parallel_size"}},
      {"backend: cpu\ntp: 1\nmpi:\n  env:\n    ADAKV_BACKEND: cuda\n" + nodes,
       {"mpi.env.ADAKV_BACKEND", "set by backend"}},
      {"backend: cpu\ntp: three\n" + nodes, {"tp", "'three' is not an integer"}},
      {"backend: cpu\ntp: 0\n" + nodes, {"tp", "at least 1"}},
      {"backend: cpu\ntp: 3\n" + nodes, {"tp", "3 ranks do not fit", "2 slots"}},
      {"backend: cpu\ntp: 2\n", {"nodes", "missing"}},
      {"backend: cpu\ntp: 1\nnodes: []\n", {"nodes", "empty"}},
      {"backend: cpu\ntp: 1\nnodes: localhost\n", {"nodes", "list"}},
      {"backend: cpu\ntp: 1\nnodes:\n  - slots: 2\n", {"nodes[0]", "missing host"}},
      {"backend: cpu\ntp: 1\nnodes:\n  - host: a\n    sloots: 2\n", {"nodes[0].sloots", "unknown"}},
      {"backend: cpu\ntp: 1\nnodes:\n  - host: a\n", {"nodes[0].slots", "missing"}},
      {"backend: cpu\ntp: 1\nnodes:\n  - host: a\n    slots: 0\n", {"nodes[0].slots", "at least"}},
      {"backend: cpu\ntp: 1\nnodes:\n  - host: a\n    gpus: 8\n", {"nodes[0].gpus", "cuda"}},
      {"backend: cuda\ntp: 1\nnodes:\n  - host: a\n    slots: 8\n", {"nodes[0].slots", "gpus"}},
      {"backend: cuda\ntp: 9\nnodes:\n  - host: a\n    gpus: 8\n", {"tp", "8 GPUs"}},
      {"backend: cpu\ntp: 1\nnodes:\n  - host: my_node\n    slots: 1\n", {"nodes[0].host", "'_'"}},
      {"backend: cpu\ntp: 1\nnodes:\n  - host: a\n    slots: 1\n  - host: a\n    slots: 1\n",
       {"nodes[1].host", "twice"}},
      {"backend: cpu\ntp: 1\nthreads_per_rank: -1\n" + nodes, {"threads_per_rank"}},
      {"backend: cpu\ntp: 1\nmpi:\n  btls: tcp\n" + nodes, {"mpi.btls", "unknown"}},
      {"backend: cpu\ntp: 1\nmpi:\n  bind_to: cores\n" + nodes, {"mpi.bind_to", "'cores'"}},
      {"backend: cpu\ntp: 1\nmpi:\n  timeout: -5\n" + nodes, {"mpi.timeout"}},
      {"backend: cpu\ntp: 1\nmpi:\n  oversubscribe: maybe\n" + nodes, {"mpi.oversubscribe"}},
      {"backend: cpu\ntp: 1\nmpi:\n  mca:\n    btl: [a, b]\n" + nodes,
       {"mpi.mca.btl", "single value"}},
      {"backend: cpu\ntp: 1\nmpi:\n  btl: tcp\n  mca:\n    btl: self\n" + nodes,
       {"mpi.mca.btl", "already set by mpi.btl"}},
      {"backend: cpu\ntp: 1\nmpi:\n  mca:\n    Bad-Key: 1\n" + nodes, {"mpi.mca.Bad-Key"}},
      {"backend: cpu\ntp: 1\nmpi:\n  env:\n    1X: y\n" + nodes, {"mpi.env.1X", "variable"}},
      {"backend: cpu\ntp: 1\nthreads_per_rank: 2\nmpi:\n  env:\n    OMP_NUM_THREADS: 4\n" + nodes,
       {"mpi.env.OMP_NUM_THREADS", "threads_per_rank"}},
      {"backend: cpu\ntp: 1\nnccl:\n  env:\n    NCCL_DEBUG: WARN\n" + nodes, {"nccl", "cuda"}},
      {"backend: cuda\ntp: 1\nnccl:\n  envs: {}\nnodes:\n  - host: a\n    gpus: 1\n",
       {"nccl.envs", "unknown"}},
      {"backend: cuda\ntp: 1\nnccl:\n  env:\n    DEBUG: WARN\nnodes:\n  - host: a\n    gpus: 1\n",
       {"nccl.env.DEBUG", "NCCL_"}},
      {"backend: cuda\ntp: 1\nmpi:\n  oversubscribe: true\nnodes:\n  - host: a\n    gpus: 1\n",
       {"mpi.oversubscribe", "GPU"}},
  };
  for (const auto& c : cases) {
    const std::string msg = error_of(c.yaml);
    EXPECT_EQ(msg.rfind("test.yaml", 0), 0u) << msg;
    for (const auto& s : c.expect) {
      EXPECT_NE(msg.find(s), std::string::npos) << "'" << s << "' not in: " << msg;
    }
  }
}

TEST(ClusterConfig, ParallelSizesDefaultToOneAndTpIsImpliedWhenLeftOut) {
  const ClusterConfig plain = parse_cluster_config(kMinimal, "test.yaml");
  EXPECT_EQ(plain.pp, 1);
  EXPECT_EQ(plain.dp, 1);
  EXPECT_FALSE(plain.allow_tp_across_nodes);
  EXPECT_EQ(plain.job_ranks(), 2);

  // No tp: every slot of the nodes, split into pp x dp groups.
  const std::string four = "backend: cpu\nnodes:\n  - host: a\n    slots: 4\n";
  const ClusterConfig all = parse_cluster_config(four, "test.yaml");
  EXPECT_EQ(all.tp, 4);
  const ClusterConfig pp = parse_cluster_config(four + "pipeline_parallel_size: 2\n", "t.yaml");
  EXPECT_EQ(pp.tp, 2);
  EXPECT_EQ(pp.pp, 2);
  const ClusterConfig both =
      parse_cluster_config(four + "pipeline_parallel_size: 2\ndata_parallel_size: 2\n", "t.yaml");
  EXPECT_EQ(both.tp, 1);
  EXPECT_EQ(both.job_ranks(), 4);
  // tp given: the job is tp x pp x dp ranks, fewer than the slots if so.
  const ClusterConfig given = parse_cluster_config(four + "tp: 1\ndata_parallel_size: 3\n", "t");
  EXPECT_EQ(given.tp, 1);
  EXPECT_EQ(given.job_ranks(), 3);

  EXPECT_EQ(error_of(four + "pipeline_parallel_size: 3\ndata_parallel_size: 2\n"),
            "test.yaml: pipeline_parallel_size x data_parallel_size: 4 ranks do not split into 2 "
            "data-parallel replica(s) of 3 pipeline stage(s) (tp is left out, so the job runs all "
            "4 slots of the nodes)");
}

TEST(ClusterConfig, PipelineStagesMustHaveLayers) {
  adakv::model::ModelConfig m;
  m.n_heads = 8;
  m.n_kv_heads = 8;
  m.ffn_dim = 24;
  m.vocab_size = 8;
  m.n_layers = 2;
  ClusterConfig c = with_tp(2);
  c.pp = 2;
  EXPECT_NO_THROW(check_tp_fits(c, m, "m"));
  c.pp = 3;
  try {
    check_tp_fits(c, m, "m");
    FAIL() << "3 stages accepted for 2 layers";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "test.yaml: pipeline_parallel_size: 3 stages need at least as many layers; model "
                 "m has 2");
  }
  // The GGUF header's block count is the layer count.
  EXPECT_EQ(check_model_fits(with_tp(1), write_model("layers", 8, 8)), 1);
}

TEST(ClusterConfig, MissingFileIsNamed) {
  try {
    load_cluster_config("/nonexistent/cluster.yaml");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/cluster.yaml"), std::string::npos);
  }
}

TEST(ClusterConfig, TpMustShardTheModelsHeads) {
  // SmolLM2's shape: 9 attention heads, 3 KV heads.
  const std::string smol = write_model("smol", 9, 3);
  EXPECT_NO_THROW(check_model_fits(with_tp(1), smol));
  EXPECT_NO_THROW(check_model_fits(with_tp(3), smol));
  for (int tp : {2, 4, 6}) {
    try {
      check_model_fits(with_tp(tp), smol);
      ADD_FAILURE() << "tp " << tp << " accepted for 9 heads";
    } catch (const ConfigError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("test.yaml: tp: " + std::to_string(tp)), std::string::npos) << msg;
      EXPECT_NE(msg.find("9 attention heads, 3 KV heads"), std::string::npos) << msg;
    }
  }
  // 8 heads, 2 KV heads: tp 4 and 8 replicate each KV head; 3 divides neither.
  const std::string gqa = write_model("gqa", 8, 2);
  EXPECT_NO_THROW(check_model_fits(with_tp(4), gqa));
  EXPECT_NO_THROW(check_model_fits(with_tp(8), gqa));
  EXPECT_THROW(check_model_fits(with_tp(3), gqa), ConfigError);
  // 12 heads, 4 KV heads: tp 6 divides the heads but is not a multiple of the KV heads.
  adakv::model::ModelConfig m;
  m.n_heads = 12;
  m.n_kv_heads = 4;
  m.ffn_dim = 24;
  m.vocab_size = 8;
  EXPECT_THROW(check_tp_fits(with_tp(6), m, "m"), ConfigError);
  EXPECT_NO_THROW(check_tp_fits(with_tp(4), m, "m"));
}

TEST(ClusterConfig, UnreadableModelIsNamed) {
  try {
    check_model_fits(with_tp(1), "/nonexistent/model.gguf");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("test.yaml: model: cannot read /nonexistent/model.gguf"), std::string::npos)
        << msg;
  }
}

TEST(MpirunCommand, HostfileListsEveryNodeWithItsRanks) {
  EXPECT_NE(
      hostfile_text(load_cluster_config(kConfigDir + "local.yaml")).find("\nlocalhost slots=3\n"),
      std::string::npos);
  const std::string two = hostfile_text(load_cluster_config(kConfigDir + "h100x8-2node.yaml"));
  EXPECT_NE(two.find("\nnode1 slots=8\nnode2 slots=8\n"), std::string::npos) << two;
}

TEST(MpirunCommand, LocalCpuCommand) {
  const ClusterConfig c = load_cluster_config(kConfigDir + "local.yaml");
  const std::vector<std::string> program = {"/bin/adakv", "generate", "--prompt", "hi"};
  const auto argv = mpirun_argv(c, "/tmp/h", LaunchHost{true, 2}, program);
  EXPECT_EQ(argv.front(), "mpirun");
  EXPECT_TRUE(contains(argv, {"--allow-run-as-root"}));
  EXPECT_TRUE(contains(argv, {"--hostfile", "/tmp/h"}));
  EXPECT_TRUE(contains(argv, {"-np", "3"}));
  EXPECT_TRUE(contains(argv, {"--bind-to", "none"}));
  EXPECT_TRUE(contains(argv, {"--oversubscribe"}));  // 3 slots on 2 cores
  EXPECT_TRUE(contains(argv, {"--mca", "btl", "self,vader,tcp"}));
  EXPECT_TRUE(contains(argv, {"-x", "OMP_NUM_THREADS=1"}));
  EXPECT_TRUE(contains(argv, {"-x", "OMPI_MCA_btl_vader_single_copy_mechanism=none"}));
  EXPECT_TRUE(std::equal(program.rbegin(), program.rend(), argv.rbegin()));

  const auto user = mpirun_argv(c, "/tmp/h", LaunchHost{false, 64}, program);
  EXPECT_FALSE(contains(user, {"--allow-run-as-root"}));
  EXPECT_FALSE(contains(user, {"--oversubscribe"}));  // 3 slots on 64 cores
}

TEST(MpirunCommand, OversubscribeFollowsTheConfig) {
  ClusterConfig c = parse_cluster_config(kMinimal, "test.yaml");
  EXPECT_TRUE(wants_oversubscribe(c, 1));
  EXPECT_FALSE(wants_oversubscribe(c, 2));
  c.mpi.oversubscribe = false;
  EXPECT_FALSE(wants_oversubscribe(c, 1));
  c.mpi.oversubscribe = true;
  EXPECT_TRUE(wants_oversubscribe(c, 64));
  const ClusterConfig gpu = load_cluster_config(kConfigDir + "h100x8.yaml");
  EXPECT_FALSE(wants_oversubscribe(gpu, 1));  // a GPU runs one rank
}

TEST(MpirunCommand, MultiNodeCudaCommandCarriesNcclAndTransport) {
  const ClusterConfig c = load_cluster_config(kConfigDir + "h100x8-2node.yaml");
  const auto argv = mpirun_argv(c, "/tmp/h", LaunchHost{false, 4}, {"/bin/adakv", "serve"});
  EXPECT_TRUE(contains(argv, {"-np", "16"}));
  EXPECT_TRUE(contains(argv, {"--map-by", "slot"}));  // ranks 0-7 on node1: device = local rank
  EXPECT_TRUE(contains(argv, {"-x", "NCCL_IB_HCA=mlx5"}));
  EXPECT_TRUE(contains(argv, {"-x", "NCCL_DEBUG=WARN"}));
  EXPECT_TRUE(contains(argv, {"--mca", "btl_tcp_if_include", c.mpi.tcp_if_include}));
  EXPECT_TRUE(contains(argv, {"--mca", "oob_tcp_if_include", c.mpi.tcp_if_include}));
  EXPECT_FALSE(contains(argv, {"--oversubscribe"}));
}

TEST(MpirunCommand, LayoutEnvironmentOnlyWhenItIsNotOne) {
  auto layout_words = [](const std::vector<std::string>& argv) {
    std::vector<std::string> out;
    for (size_t i = 0; i + 1 < argv.size(); ++i) {
      if (argv[i] == "-x" && (argv[i + 1].rfind("ADAKV_PP_SIZE", 0) == 0 ||
                              argv[i + 1].rfind("ADAKV_DP_SIZE", 0) == 0)) {
        out.push_back(argv[i + 1]);
      }
    }
    return out;
  };
  using V = std::vector<std::string>;
  const std::vector<std::string> program = {"/bin/adakv", "serve"};
  const LaunchHost host{false, 4};

  const ClusterConfig tp16 = load_cluster_config(kConfigDir + "h100x8-2node.yaml");
  EXPECT_TRUE(layout_env(tp16).empty());
  EXPECT_EQ(layout_words(mpirun_argv(tp16, "/tmp/h", host, program)), V{});

  const ClusterConfig pp = load_cluster_config(kConfigDir + "h100x8-2node-tp8-pp2.yaml");
  EXPECT_EQ(layout_env(pp), (KeyValues{{"ADAKV_PP_SIZE", "2"}}));
  const auto pp_argv = mpirun_argv(pp, "/tmp/h", host, program);
  EXPECT_EQ(layout_words(pp_argv), V{"ADAKV_PP_SIZE=2"});
  EXPECT_TRUE(contains(pp_argv, {"-np", "16"}));
  EXPECT_TRUE(contains(pp_argv, {"-x", "ADAKV_BACKEND=cuda", "-x", "ADAKV_PP_SIZE=2"}));

  const ClusterConfig dp = load_cluster_config(kConfigDir + "h100x8-2node-dp2-tp8.yaml");
  EXPECT_EQ(layout_env(dp), (KeyValues{{"ADAKV_DP_SIZE", "2"}}));
  const auto dp_argv = mpirun_argv(dp, "/tmp/h", host, program);
  EXPECT_EQ(layout_words(dp_argv), V{"ADAKV_DP_SIZE=2"});
  EXPECT_TRUE(contains(dp_argv, {"-np", "16"}));

  ClusterConfig both = parse_cluster_config(
      "backend: cpu\npipeline_parallel_size: 2\ndata_parallel_size: 3\nnodes:\n"
      "  - host: a\n    slots: 6\n",
      "test.yaml");
  EXPECT_EQ(both.tp, 1);
  EXPECT_EQ(layout_words(mpirun_argv(both, "/tmp/h", host, program)),
            (V{"ADAKV_PP_SIZE=2", "ADAKV_DP_SIZE=3"}));
  EXPECT_TRUE(contains(mpirun_argv(both, "/tmp/h", host, program), {"-np", "6"}));
  EXPECT_NE(hostfile_text(both).find("(test.yaml, backend cpu, tp 1, pp 2, dp 3)"),
            std::string::npos)
      << hostfile_text(both);
}

TEST(MpirunCommand, NetnsSimCommandUsesTheAgent) {
  const ClusterConfig c = load_cluster_config(kConfigDir + "netns-sim.yaml");
  const auto argv = mpirun_argv(c, "/tmp/h", LaunchHost{true, 2}, {"/bin/adakv", "generate"});
  EXPECT_TRUE(contains(argv, {"--mca", "plm_rsh_agent", c.mpi.launch_agent}));
  EXPECT_TRUE(contains(argv, {"--mca", "plm_rsh_no_tree_spawn", "1"}));
  EXPECT_TRUE(contains(argv, {"--mca", "oob_tcp_if_include", "10.77.0.0/24"}));
  EXPECT_TRUE(contains(argv, {"--timeout", "600"}));
}

TEST(MpirunCommand, ModelIsAppendedUnlessGiven) {
  using V = std::vector<std::string>;
  EXPECT_EQ(rank_argv("adakv", {"generate", "--prompt", "hi"}, "M", true),
            (V{"adakv", "generate", "--prompt", "hi", "--model", "M"}));
  EXPECT_EQ(rank_argv("adakv", {"generate", "--model", "X"}, "M", true),
            (V{"adakv", "generate", "--model", "X"}));
  EXPECT_EQ(rank_argv("adakv", {"generate", "--model=X"}, "M", true),
            (V{"adakv", "generate", "--model=X"}));
  EXPECT_EQ(rank_argv("adakv", {"inspect", "f.gguf"}, "M", false),
            (V{"adakv", "inspect", "f.gguf"}));
  EXPECT_EQ(rank_argv("adakv", {"generate"}, "", true), (V{"adakv", "generate"}));
}

TEST(MpirunCommand, ShellQuoting) {
  EXPECT_EQ(shell_quote("plain/path-1.yaml"), "plain/path-1.yaml");
  EXPECT_EQ(shell_quote("two words"), "'two words'");
  EXPECT_EQ(shell_quote("it's"), "'it'\\''s'");
  EXPECT_EQ(shell_quote(""), "''");
  EXPECT_EQ(shell_join({"a", "b c"}), "a 'b c'");
}

TEST(LaunchCli, DryRunPrintsHostfileAndCommand) {
  const CliRun r =
      run_adakv("launch --cluster " + kConfigDir + "local.yaml --dry-run -- generate --prompt hi");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("localhost slots=3"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("mpirun "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" -np 3 "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" -x OMPI_MCA_btl_vader_single_copy_mechanism=none "), std::string::npos);
  EXPECT_NE(r.out.find(" generate --prompt hi --model SmolLM2-135M-Instruct"), std::string::npos)
      << r.out;
  if (geteuid() == 0) {
    EXPECT_NE(r.out.find("--allow-run-as-root"), std::string::npos);
  }
}

TEST(LaunchCli, DryRunPrintsTheRankMap) {
  // The model is not on this machine: no layers column, and no host is contacted.
  const CliRun r = run_adakv("launch --cluster " + kConfigDir +
                             "h100x8-2node-tp8-pp2.yaml --dry-run -- serve --host 0.0.0.0");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find(" -np 16 "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" -x ADAKV_PP_SIZE=2 "), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("ADAKV_DP_SIZE"), std::string::npos) << r.out;
  const std::string map =
      "# TP 8 x PP 2 x DP 1 (16 ranks) on 2 node(s)\n"
      "#   rank  node   local  device  tp  pp  dp\n"
      "#      0  node1      0       0   0   0   0\n"
      "#      1  node1      1       1   1   0   0\n";
  EXPECT_NE(r.out.find(map), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("#      8  node2      0       0   0   1   0\n"), std::string::npos);
  EXPECT_NE(r.out.find("#     15  node2      7       7   7   1   0\n"), std::string::npos);

  const CliRun tp16 =
      run_adakv("launch --cluster " + kConfigDir + "h100x8-2node.yaml --dry-run -- serve");
  ASSERT_EQ(tp16.rc, 0) << tp16.out;
  EXPECT_NE(tp16.out.find("# TP 16 x PP 1 x DP 1 (16 ranks) on 2 node(s), TP across nodes "
                          "(allow_tp_across_nodes)\n"),
            std::string::npos)
      << tp16.out;
  EXPECT_NE(tp16.out.find("#     15  node2      7       7  15   0   0\n"), std::string::npos);
}

TEST(LaunchCli, DryRunKeepsTheUsersModelAndSkipsItForInspect) {
  const std::string cfg = "launch --cluster " + kConfigDir + "local.yaml --dry-run -- ";
  const CliRun given = run_adakv(cfg + "generate --model /m.gguf --prompt hi");
  ASSERT_EQ(given.rc, 0) << given.out;
  EXPECT_EQ(given.out.find("--model SmolLM2"), std::string::npos) << given.out;
  const CliRun inspect = run_adakv(cfg + "inspect /m.gguf");
  ASSERT_EQ(inspect.rc, 0) << inspect.out;
  EXPECT_EQ(inspect.out.find("--model"), std::string::npos) << inspect.out;
}

TEST(LaunchCli, BadInputsExitTwoWithAClearMessage) {
  const CliRun missing = run_adakv("launch --cluster /nonexistent.yaml --dry-run -- generate");
  EXPECT_EQ(missing.rc, 2);
  EXPECT_NE(missing.out.find("/nonexistent.yaml"), std::string::npos) << missing.out;

  const std::string bad = testing::TempDir() + "adakv_bad_cluster.yaml";
  FILE* f = fopen(bad.c_str(), "w");
  ASSERT_NE(f, nullptr);
  fputs("backend: cpu\ntp: 2\nnodes: []\n", f);
  fclose(f);
  const CliRun empty = run_adakv("launch --cluster " + bad + " --dry-run -- generate");
  EXPECT_EQ(empty.rc, 2);
  EXPECT_NE(empty.out.find(bad + ": nodes: empty"), std::string::npos) << empty.out;

  const std::string cfg = "launch --cluster " + kConfigDir + "local.yaml --dry-run";
  const CliRun none = run_adakv(cfg);
  EXPECT_EQ(none.rc, 2);
  EXPECT_NE(none.out.find("give the subcommand"), std::string::npos) << none.out;
  const CliRun unknown = run_adakv(cfg + " -- generat --prompt hi");
  EXPECT_EQ(unknown.rc, 2);
  EXPECT_NE(unknown.out.find("'generat' is not an adakv subcommand"), std::string::npos);
  const CliRun nested = run_adakv(cfg + " -- launch --cluster x");
  EXPECT_EQ(nested.rc, 2);
}

// The `adakv` binary as users call it: generate (text and --json), inspect, errors, exit codes.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>

#include "tests/e2e/model_fixture.h"
#include "tests/e2e/run_adakv.h"

namespace {

using adakv::test::adakv;

std::string model() {
  return "--model " + adakv::test::model_path();
}

std::filesystem::path temp_file(const std::string& name, const std::string& content) {
  const auto p = std::filesystem::temp_directory_path() / (std::to_string(::getpid()) + name);
  std::ofstream(p, std::ios::binary) << content;
  return p;
}

// The version, the commit the binary was built from (git describe: hex, maybe "-dirty") and
// its backends.
TEST(Cli, VersionNamesTheCommitAndTheBackends) {
  const auto r = adakv("--version");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(std::regex_search(
      r.out,
      std::regex(R"(^adakv [0-9]+\.[0-9]+\.[0-9]+ \(commit [0-9a-f]{7,}(-dirty)?; backends: cpu)")))
      << r.out;
}

TEST(Cli, GenerateJsonMatchesTheOracleGreedyTokens) {
  const auto r = adakv("generate " + model() +
                       " --prompt 'The capital of France is' --max-tokens 8 --json --policy full");
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  // HF transformers' greedy continuation (tests/data/logits_goldens.bin, first prompt).
  EXPECT_EQ(j["tokens"].get<std::vector<int>>(),
            (std::vector<int>{7042, 30, 198, 198, 504, 2988, 314, 42}));
  EXPECT_EQ(j["text"].get<std::string>().substr(0, 6), " Paris");
  EXPECT_EQ(j["finish_reason"], "length");
  EXPECT_EQ(j["prompt_tokens"], 5);
  // 5 prompt tokens + 7 fed back fill one 16-token block per head: 30 layers x 3 KV heads x
  // 16 tokens x 64 x (K and V) x 2 bytes (bf16, the default KV dtype).
  EXPECT_EQ(j["kv"]["full_bytes"], 30 * 3 * 16 * 64 * 2 * 2);
  EXPECT_EQ(j["kv"]["kept_bytes"], j["kv"]["full_bytes"]);
  EXPECT_GT(j["timing"]["prefill_s"].get<double>(), 0.0);
  EXPECT_GT(j["timing"]["decode_s"].get<double>(), 0.0);
}

TEST(Cli, ChatAnswersAndStopsAtEndOfTurn) {
  const auto r = adakv("generate " + model() +
                       " --chat --prompt 'What is the capital of France?' --max-tokens 40 --json"
                       " --policy full");
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_NE(j["text"].get<std::string>().find("Paris"), std::string::npos) << j["text"];
  EXPECT_EQ(j["finish_reason"], "stop");
}

TEST(Cli, SamplingIsReproducibleWithASeed) {
  const std::string args = "generate " + model() +
                           " --prompt 'Once upon a time' --max-tokens 12 --temperature 0.9 "
                           "--top-p 0.95 --top-k 50 --json --seed ";
  const auto a = adakv(args + "7"), b = adakv(args + "7"), c = adakv(args + "8");
  ASSERT_EQ(a.rc, 0) << a.err;
  const auto ta = nlohmann::json::parse(a.out)["tokens"];
  EXPECT_EQ(ta, nlohmann::json::parse(b.out)["tokens"]);
  EXPECT_NE(ta, nlohmann::json::parse(c.out)["tokens"]);
}

TEST(Cli, StreamsTextAndReportsSpeedAndKvBytes) {
  const auto r =
      adakv("generate " + model() + " --prompt 'The capital of France is' --max-tokens 4");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out.substr(0, 6), " Paris");
  EXPECT_NE(r.err.find("tok/s"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("KV cache"), std::string::npos) << r.err;
}

TEST(Cli, PromptLongerThanTheContextIsRefused) {
  std::string text;
  for (int i = 0; i < 9000; ++i) text += "word ";
  const auto p = temp_file("-long.txt", text);
  const auto r = adakv("generate " + model() + " --prompt-file " + p.string());
  std::filesystem::remove(p);
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("context holds 8192"), std::string::npos) << r.err;
}

TEST(Cli, ShortPromptsWorkWithTheDefaultPolicy) {
  // adakv at 20% by default: a prompt no longer than the window is simply kept whole.
  const auto r = adakv("generate " + model() + " --prompt 'Hello' --max-tokens 2 --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["kv"]["policy"], "adakv");
  EXPECT_EQ(j["kv"]["kept_bytes"], j["kv"]["full_bytes"]);
  // ...but a window the user asked for must fit.
  const auto w = adakv("generate " + model() + " --prompt 'Hello' --window 8");
  EXPECT_EQ(w.rc, 1);
  EXPECT_NE(w.err.find("window 8"), std::string::npos) << w.err;
}

TEST(Cli, CompareRunsEachPolicyOnce) {
  // The chosen policy (adakv) runs first; naming it in --compare again adds no second run.
  const auto r = adakv("generate " + model() +
                       " --prompt 'The capital of France is' --max-tokens 2 --json"
                       " --compare full,adakv,snapkv");
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 3u) << r.out;
  EXPECT_EQ(j[0]["kv"]["policy"], "adakv");
  EXPECT_EQ(j[1]["kv"]["policy"], "full");
  EXPECT_EQ(j[2]["kv"]["policy"], "snapkv");
}

TEST(Cli, BadArgumentsAreUsageErrors) {
  EXPECT_NE(adakv("generate " + model() + " --prompt x --temperature -1").rc, 0);
  EXPECT_NE(adakv("generate " + model() + " --prompt x --top-p 0").rc, 0);
  EXPECT_NE(adakv("generate " + model()).rc, 0);  // no prompt
  for (const char* bad : {"--budget -1", "--budget 1.5", "--alpha 2", "--policy lru",
                          "--scope everywhere", "--pool-kernel 4"}) {
    const auto b = adakv("generate " + model() + " --prompt x " + bad);
    EXPECT_NE(b.rc, 0) << bad;
    EXPECT_FALSE(b.err.empty()) << bad;
  }
  const auto r = adakv("generate --model /nonexistent.gguf --prompt x");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("/nonexistent.gguf"), std::string::npos) << r.err;
}

TEST(Cli, InspectListsTheModel) {
  const auto r = adakv("inspect " + adakv::test::model_path());
  ASSERT_EQ(r.rc, 0) << r.err;
  for (const char* want : {"token_embd.weight", "Q8_0", "Q4_1", "blk.29.ffn_down.weight",
                           "llama.block_count", "272"}) {
    EXPECT_NE(r.out.find(want), std::string::npos) << want;
  }
}

TEST(Cli, CorruptModelGivesOneClearError) {
  std::ifstream in(adakv::test::model_path(), std::ios::binary);
  std::string head(100000, '\0');
  in.read(head.data(), head.size());
  const auto p = temp_file("-truncated.gguf", head);
  for (const std::string cmd : {"inspect ", "generate --prompt hi --model "}) {
    const auto r = adakv(cmd + p.string());
    EXPECT_EQ(r.rc, 1) << cmd;
    EXPECT_NE(r.err.find("gguf:"), std::string::npos) << r.err;
  }
  std::filesystem::remove(p);
}

TEST(Cli, ServeNamesABadFlag) {
  const auto r = adakv("serve --port notaport");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("--port"), std::string::npos) << r.err;
}

}  // namespace

// Qwen2.5 (2 KV heads) under tensor parallelism: `adakv generate` as the 2 ranks of an mpirun
// job against one rank, with Ada-KV compressing a ~2,800-token prompt at 20%: the same tokens,
// the same budget vector on every rank and as TP 1, per-rank KV bytes that sum to the total. The
// ffn (19 blocks of 256 in ffn_down's K-quants) splits 10 + 9 blocks. TP 3 and 4 are refused by
// name. Skipped without the model (tests/e2e/qwen_model.h).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/e2e/qwen_model.h"
#include "tests/e2e/run_adakv.h"

namespace adakv::test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Float32 KV and decode activations: TP sums the RowParallel outputs in another order, which
// bf16 storage and the int16 decode dots would round into visible differences.
constexpr const char* kFlags =
    " --max-tokens 32 --ignore-eos --json --threads 1 --kv-dtype f32 --decode-dots float";

std::string prompt_file() {
  const auto path = fs::temp_directory_path() / ("adakv-qwen-tp-" + std::to_string(::getpid()));
  std::string text = slurp("/usr/share/common-licenses/GPL-3");
  text.resize(12000);
  std::ofstream(path) << text;
  return path.string();
}

json run(int np, const std::string& prompt, const std::string& policy) {
  const auto r = adakv_mpi(np, "generate --model " + qwen_model_path() + " --prompt-file " +
                                   prompt + kFlags + " " + policy);
  EXPECT_EQ(r.rc, 0) << r.err;
  return r.rc == 0 ? json::parse(r.out) : json();
}

size_t sum(const json& v) {
  size_t s = 0;
  for (const auto& x : v) s += x.get<size_t>();
  return s;
}

TEST(QwenTensorParallel, Tp2GivesTheTokensAndBudgetsOfOneRank) {
  ADAKV_SKIP_WITHOUT_QWEN();
  const std::string prompt = prompt_file();
  for (const char* policy : {"--policy full", "--policy adakv --budget 0.2 --scope layer",
                             "--policy adakv --budget 0.2 --scope global"}) {
    SCOPED_TRACE(policy);
    const json one = run(1, prompt, policy), two = run(2, prompt, policy);
    ASSERT_FALSE(one.is_null() || two.is_null());
    EXPECT_EQ(two["tp"]["size"].get<int>(), 2);
    EXPECT_EQ(one["tokens"].size(), 32u);
    EXPECT_EQ(one["tokens"], two["tokens"]);
    EXPECT_EQ(one["kv"]["budgets"], two["kv"]["budgets"]);
    EXPECT_TRUE(two["kv"]["budgets_agree_across_ranks"].get<bool>());
    EXPECT_EQ(sum(two["kv"]["rank_kept_bytes"]), two["kv"]["kept_bytes"].get<size_t>());
    EXPECT_EQ(two["kv"]["kept_bytes"], one["kv"]["kept_bytes"]);
    if (std::string(policy).find("adakv") != std::string::npos) {
      EXPECT_LT(one["kv"]["kept_bytes"].get<size_t>(), one["kv"]["full_bytes"].get<size_t>() / 3);
    }
    std::printf("[qwen tp] %s: TP 2 tokens identical to TP 1: %s; kept %zu of %zu KV bytes\n",
                policy, one["tokens"] == two["tokens"] ? "yes" : "no",
                one["kv"]["kept_bytes"].get<size_t>(), one["kv"]["full_bytes"].get<size_t>());
  }
  fs::remove(prompt);
}

TEST(QwenTensorParallel, SizesThatDoNotDivideTheHeadsAreRefusedByName) {
  ADAKV_SKIP_WITHOUT_QWEN();
  const auto r = adakv_mpi(4, "generate --model " + qwen_model_path() + " --prompt hi");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("does not divide the model's attention heads (14)"), std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace adakv::test

// Every scorer gives the same budgets at TP 1 and TP 3 (the default model's 3 KV heads, one per
// rank): `adakv generate` with the window and the output-aware scorer under Ada-KV's and SnapKV's
// allocation as mpirun jobs, and `adakv eval passkey-multi` (the query-agnostic path: context
// scored alone, questions on forks) with all three scorers (reconstruct runs there only, also
// in pieces that score their own spans), whose budget fingerprints and answers must match one
// rank's. Float32 KV and decode dots, as the other TP tests, so that the answers compare
// exactly.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/e2e/model_fixture.h"
#include "tests/e2e/run_adakv.h"

namespace {

namespace fs = std::filesystem;
using adakv::test::adakv_mpi;
using adakv::test::slurp;
using nlohmann::json;

constexpr const char* kExactNumerics = " --kv-dtype f32 --decode-dots float";

fs::path work_dir() {
  const auto dir = fs::temp_directory_path() / ("adakv-qa-tp-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir;
}

std::string prompt_file(size_t bytes) {
  const auto path = work_dir() / ("prompt-" + std::to_string(bytes) + ".txt");
  std::string text = slurp("/usr/share/common-licenses/GPL-3");
  text.resize(std::min(text.size(), bytes));
  std::ofstream(path) << text;
  return path.string();
}

json generate(int np, const std::string& flags) {
  const auto r = adakv_mpi(
      np, "generate --model " + adakv::test::model_path() + " --prompt-file " + prompt_file(3000) +
              " --max-tokens 8 --threads 1 --ignore-eos --json --lookahead 0 --min-keep 0" +
              kExactNumerics + " " + flags);
  if (r.rc != 0) throw std::runtime_error("TP " + std::to_string(np) + " run failed: " + r.err);
  return json::parse(r.out);
}

TEST(QueryAgnosticTp, EveryScorerAndAllocatorGivesTheSameBudgetsAtTp3) {
  for (const char* flags : {"--policy adakv --budget 0.2 --scoring window",
                            "--policy adakv --budget 0.2 --scoring output-aware",
                            "--policy snapkv --budget 0.2 --scoring output-aware",
                            "--policy adakv --budget 0.2 --scoring output-aware --scope global"}) {
    SCOPED_TRACE(flags);
    const json one = generate(1, flags);
    const json three = generate(3, flags);
    EXPECT_TRUE(three["kv"]["budgets_agree_across_ranks"].get<bool>());
    ASSERT_FALSE(one["kv"]["budgets"].empty());
    EXPECT_EQ(one["kv"]["budgets"], three["kv"]["budgets"]);
    EXPECT_EQ(one["tokens"], three["tokens"]);
  }
  // The scorer matters: output-aware keeps other budgets than the window under Ada-KV.
  EXPECT_NE(generate(1, "--policy adakv --budget 0.2 --scoring window")["kv"]["budgets"],
            generate(1, "--policy adakv --budget 0.2 --scoring output-aware")["kv"]["budgets"]);
}

// eval passkey-multi under `policies` at one rank and at three: each run's budget fingerprint
// and answers must match.
void expect_tp3_matches_one_rank(const std::string& policies, const std::string& flags,
                                 size_t runs) {
  json records[2];
  for (int i = 0; i < 2; ++i) {
    const int np = i == 0 ? 1 : 3;
    const auto out = work_dir() / ("multi-" + std::to_string(np));
    const auto r =
        adakv_mpi(np, "eval passkey-multi --model " + adakv::test::model_path() +
                          " --lengths 600 --keys 2 --trials 1 --budgets 0.2"
                          " --policies " +
                          policies + " --threads 1 --out " + out.string() + kExactNumerics + flags);
    ASSERT_EQ(r.rc, 0) << r.err;
    records[i] = json::parse(slurp(out / "passkey-multi_results.json"))["records"];
  }
  ASSERT_EQ(records[0].size(), 2u);
  ASSERT_EQ(records[1].size(), 2u);
  for (size_t k = 0; k < 2; ++k) {
    const json& one = records[0][k]["runs"];
    const json& three = records[1][k]["runs"];
    ASSERT_EQ(one.size(), runs);
    ASSERT_EQ(three.size(), runs);
    for (size_t p = 0; p < runs; ++p) {
      SCOPED_TRACE("key " + std::to_string(k) + " run " + std::to_string(p));
      EXPECT_EQ(three[p]["budgets_fingerprint"], one[p]["budgets_fingerprint"]);
      EXPECT_TRUE(three[p]["budgets_agree_across_ranks"].get<bool>());
      EXPECT_EQ(three[p]["output"], one[p]["output"]);
    }
  }
}

TEST(QueryAgnosticTp, PasskeyMultiUnderTp3MatchesOneRank) {
  expect_tp3_matches_one_rank(
      "snapkv,adakv,adakv:output-aware,adakv:reconstruct,snapkv:reconstruct,"
      "ada-pyramid:reconstruct",
      "", 7);
}

// Reconstruction in pieces, each scoring only the span it repeats: the same on every rank.
TEST(QueryAgnosticTp, PieceScoresUnderTp3MatchOneRank) {
  expect_tp3_matches_one_rank("adakv:reconstruct,snapkv:reconstruct",
                              " --reconstruct-keys piece --repeat-piece 128", 3);
}

}  // namespace

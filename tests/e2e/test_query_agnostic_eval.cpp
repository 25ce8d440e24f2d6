// `adakv eval passkey-multi` on the real default model, kept small: two short documents of
// three keys each, the context compressed once per policy without the question. The full cache
// answers every key; every question of a document shares one context; the run is deterministic
// (a second run writes the same answers and budgets); output-aware runs keep the budget.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "tests/e2e/model_fixture.h"
#include "tests/e2e/run_adakv.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

fs::path out_dir(const std::string& name) {
  return fs::temp_directory_path() / ("adakv-qa-" + name + "-" + std::to_string(::getpid()));
}

json run_eval(const fs::path& out) {
  fs::remove_all(out);
  const auto r =
      adakv::test::adakv("eval passkey-multi --model '" + adakv::test::model_path() +
                         "' --lengths 700 --keys 3 --trials 2 --seed 2 --budgets 0.5"
                         " --policies snapkv,adakv,adakv:output-aware --threads 2 --out '" +
                         out.string() + "'");
  EXPECT_EQ(r.rc, 0) << r.err;
  std::printf("%s", r.out.c_str());
  auto j = json::parse(adakv::test::slurp(out / "passkey-multi_results.json"));
  EXPECT_TRUE(fs::exists(out / "passkey-multi_summary.svg"));
  fs::remove_all(out);
  return j;
}

TEST(QueryAgnosticEval, FullAnswersEveryKeyAndRunsAreDeterministic) {
  const json a = run_eval(out_dir("a"));
  const json b = run_eval(out_dir("b"));
  ASSERT_EQ(a["task"], "passkey-multi");
  ASSERT_EQ(a["runs"].size(), 4u);
  EXPECT_EQ(a["runs"][3]["policy"], "adakv:output-aware");
  EXPECT_EQ(a["runs"][3]["scoring"], "output-aware");
  EXPECT_EQ(a["runs"][2]["scoring"], "window");
  const json& recs = a["records"];
  ASSERT_EQ(recs.size(), 6u);  // 2 documents x 3 keys
  ASSERT_EQ(b["records"].size(), 6u);
  std::set<std::string> keys;
  for (size_t i = 0; i < recs.size(); ++i) {
    SCOPED_TRACE(recs[i].dump());
    const json& runs = recs[i]["runs"];
    EXPECT_TRUE(runs[0]["correct"].get<bool>());
    keys.insert(recs[i]["answer"].get<std::string>());
    // The questions of one document share its context, and its compressed caches.
    const json& first = recs[i - i % 3];
    EXPECT_EQ(recs[i]["prompt_tokens"], first["prompt_tokens"]);
    EXPECT_LE(recs[i]["prompt_tokens"].get<size_t>(), 700u);
    for (size_t p = 1; p < 4; ++p) {
      EXPECT_EQ(runs[p]["budgets_fingerprint"], first["runs"][p]["budgets_fingerprint"]);
      EXPECT_LT(runs[p]["kv_kept"].get<double>(), 0.6);
      EXPECT_EQ(runs[p]["output"], b["records"][i]["runs"][p]["output"]);
      EXPECT_EQ(runs[p]["budgets_fingerprint"], b["records"][i]["runs"][p]["budgets_fingerprint"]);
    }
    EXPECT_EQ(runs[0]["output"], b["records"][i]["runs"][0]["output"]);
    // Another scorer, another allocation: the two adakv runs keep different budgets.
    EXPECT_NE(runs[2]["budgets_fingerprint"], runs[3]["budgets_fingerprint"]);
  }
  EXPECT_EQ(keys.size(), 6u);
}

// Reconstruct scoring alone: its recording observes the repeated context and rolls it back, so
// every fork starts right after the document.
TEST(QueryAgnosticEval, ReconstructAloneForksFromTheDocument) {
  const fs::path out = out_dir("reconstruct");
  fs::remove_all(out);
  const auto r = adakv::test::adakv("eval passkey-multi --model '" + adakv::test::model_path() +
                                    "' --lengths 600 --keys 2 --trials 1 --budgets 0.2"
                                    " --policies adakv:reconstruct --threads 2 --out '" +
                                    out.string() + "'");
  ASSERT_EQ(r.rc, 0) << r.err;
  const json j = json::parse(adakv::test::slurp(out / "passkey-multi_results.json"));
  fs::remove_all(out);
  ASSERT_EQ(j["runs"].size(), 2u);
  EXPECT_EQ(j["runs"][1]["scoring"], "reconstruct");
  ASSERT_EQ(j["records"].size(), 2u);
  for (const json& rec : j["records"]) {
    SCOPED_TRACE(rec.dump());
    EXPECT_TRUE(rec["runs"][0]["correct"].get<bool>());
    EXPECT_LT(rec["runs"][1]["kv_kept"].get<double>(), 0.3);
    EXPECT_GT(rec["runs"][1]["reconstruct_s"].get<double>(), 0.0);
  }
}

// Reconstruct scoring in pieces, each piece's queries over the span it repeats (KVzip's
// chunked scoring), with the scores dumped: every key before the window is scored by some
// piece, and the dump's shapes and kept counts match the run.
TEST(QueryAgnosticEval, PiecesScoreTheirSpansAndTheScoresAreDumped) {
  const fs::path out = out_dir("pieces");
  fs::remove_all(out);
  const auto r = adakv::test::adakv(
      "eval passkey-multi --model '" + adakv::test::model_path() +
      "' --lengths 600 --keys 2 --trials 1 --budgets 0.2 --policies adakv:reconstruct"
      " --reconstruct-keys piece --repeat-piece 128 --threads 2 --out '" +
      out.string() + "' --dump-scores '" + (out / "scores").string() + "'");
  ASSERT_EQ(r.rc, 0) << r.err;
  const json j = json::parse(adakv::test::slurp(out / "passkey-multi_results.json"));
  ASSERT_EQ(j["records"].size(), 2u);
  for (const json& rec : j["records"]) {
    SCOPED_TRACE(rec.dump());
    EXPECT_TRUE(rec["runs"][0]["correct"].get<bool>());
    EXPECT_LT(rec["runs"][1]["kv_kept"].get<double>(), 0.3);
  }
  const fs::path stem = out / "scores" / "doc-600-0-adakv:reconstruct";
  const json meta = json::parse(adakv::test::slurp(fs::path(stem.string() + ".json")));
  const size_t layers = meta["layers"], floats = meta["layer_floats"];
  const size_t n = meta["context"].size(), window = 32;
  ASSERT_EQ(meta["answers"].size(), 2u);
  ASSERT_EQ(floats % (n - window), 0u);
  const size_t heads = floats / (n - window);
  ASSERT_GT(heads, 0u);
  const std::string raw = adakv::test::slurp(fs::path(stem.string() + ".f32"));
  ASSERT_EQ(raw.size(), layers * floats * sizeof(float));
  std::vector<float> scores(layers * floats);
  std::memcpy(scores.data(), raw.data(), raw.size());
  EXPECT_GT(*std::min_element(scores.begin(), scores.end()), 0.0f);
  ASSERT_EQ(meta["runs"].size(), 1u);
  const json& kept = meta["runs"][0]["kept"];
  ASSERT_EQ(kept.size(), layers);
  size_t total = 0;
  for (const json& layer : kept) {
    ASSERT_EQ(layer.size(), heads);
    for (const json& k : layer) total += k.get<size_t>();
  }
  EXPECT_LT(double(total) / double(layers * heads * n), 0.3);
  EXPECT_TRUE(fs::exists(out / "scores" / "doc-600-0-full.json"));
  fs::remove_all(out);
}

// Reconstruct scoring needs a repeated context, which eval passkey-multi and serve's compressed
// contexts feed; generate refuses it by name instead of scoring without it.
TEST(QueryAgnosticEval, GenerateRefusesReconstructScoring) {
  const auto r = adakv::test::adakv("generate --model '" + adakv::test::model_path() +
                                    "' --prompt hello --max-tokens 2 --lookahead 0"
                                    " --scoring reconstruct");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("--scoring reconstruct scores a context without its question"),
            std::string::npos)
      << r.err;
}

}  // namespace

// `adakv eval` on the real default model, kept small: passkey at 1k tokens, two depths, two
// trials, full + snapkv + adakv at 20%. The full cache must find the key; the table, the JSON
// and the pictures must be written and agree with each other.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/e2e/model_fixture.h"
#include "tests/e2e/run_adakv.h"

namespace {

namespace fs = std::filesystem;

using adakv::test::adakv;
using adakv::test::slurp;

class EvalModel : public ::testing::Test {
 protected:
  void SetUp() override {
    out_ = fs::temp_directory_path() / ("adakv-eval-out-" + std::to_string(::getpid()));
    fs::remove_all(out_);
  }
  void TearDown() override { fs::remove_all(out_); }
  std::string model() const { return "--model '" + adakv::test::model_path() + "'"; }
  fs::path out_;
};

TEST_F(EvalModel, PasskeyAt1kFullFindsTheKeyAndEverythingIsWritten) {
  const adakv::test::Run r =
      adakv("eval passkey " + model() +
            " --lengths 1024 --depths 50,100 --trials 2 --seed 1 --budgets 0.2"
            " --policies full,snapkv,adakv --out '" +
            out_.string() + "'");
  ASSERT_EQ(r.rc, 0) << r.err;
  std::printf("%s", r.out.c_str());

  // The table: one row per run, then adakv against full and snapkv.
  EXPECT_NE(r.out.find("full          100%"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("snapkv        20%"), std::string::npos);
  EXPECT_NE(r.out.find("adakv         20%"), std::string::npos);
  EXPECT_NE(r.out.find("adakv @ 20%: "), std::string::npos);
  EXPECT_NE(r.out.find("points vs snapkv"), std::string::npos);
  EXPECT_NE(r.out.find("ans NLL"), std::string::npos);
  EXPECT_NE(r.out.find("; answer NLL "), std::string::npos);
  EXPECT_NE(r.err.find("[eval] 4/4 len 1024"), std::string::npos) << r.err;

  const auto j = nlohmann::json::parse(slurp(out_ / "passkey_results.json"));
  ASSERT_EQ(j["records"].size(), 4u);
  ASSERT_EQ(j["runs"].size(), 3u);
  EXPECT_EQ(j["runs"][0]["policy"], "full");
  EXPECT_EQ(j["runs"][2]["policy"], "adakv");
  for (const auto& rec : j["records"]) {
    EXPECT_EQ(rec["prompt_tokens"].get<size_t>(), 1024u);  // hits the target exactly here
    EXPECT_EQ(rec["answer"].get<std::string>().size(), 5u);
    EXPECT_NEAR(rec["depth_reached"].get<double>(), rec["depth"].get<double>() / 100, 0.02);
    ASSERT_EQ(rec["runs"].size(), 3u);
    EXPECT_DOUBLE_EQ(rec["runs"][0]["kv_kept"].get<double>(), 1.0);
    for (size_t i = 1; i < 3; ++i) EXPECT_LT(rec["runs"][i]["kv_kept"].get<double>(), 0.22);
    // Every run scored the right answer teacher-forced; the full cache, which wrote it, finds it
    // likely (a few nats over the whole sentence).
    for (const auto& run : rec["runs"]) {
      const double nll = run["answer_nll"].get<double>();
      EXPECT_TRUE(std::isfinite(nll) && nll > 0) << run.dump();
    }
    if (rec["runs"][0]["correct"].get<bool>()) {
      EXPECT_LT(rec["runs"][0]["answer_nll"].get<double>(), 5.0) << rec.dump();
    }
    // Correct means the key is among the numbers written.
    for (const auto& run : rec["runs"]) {
      const bool found = run["output"].get<std::string>().find(rec["answer"].get<std::string>()) !=
                         std::string::npos;
      EXPECT_TRUE(found || !run["correct"].get<bool>()) << run.dump();
    }
  }
  // SmolLM2-135M finds a key in 1k tokens of filler (all four here; three would still pass).
  EXPECT_GE(j["runs"][0]["accuracy"].get<double>(), 0.75) << j["records"].dump(1);

  for (const char* f :
       {"passkey_table.txt", "passkey_heatmap_full_100pct.svg", "passkey_heatmap_snapkv_20pct.svg",
        "passkey_heatmap_adakv_20pct.svg", "passkey_heatmaps.svg", "passkey_summary.svg"}) {
    ASSERT_TRUE(fs::exists(out_ / f)) << f;
  }
  EXPECT_NE(slurp(out_ / "passkey_table.txt").find("by depth (rows) x length (columns)"),
            std::string::npos);
  const std::string svg = slurp(out_ / "passkey_heatmap_adakv_20pct.svg");
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("adakv @ 20%"), std::string::npos);
  EXPECT_NE(svg.find(">1024<"), std::string::npos);
  EXPECT_NE(svg.find(">100%<"), std::string::npos);  // the depth row label
}

TEST_F(EvalModel, BadGridsFailWithAMessage) {
  adakv::test::Run r = adakv("eval passkey " + model() + " --lengths 1024 --budgets 1.5 --out '" +
                             out_.string() + "'");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("budget"), std::string::npos) << r.err;
  r = adakv("eval passkey " + model() + " --lengths 40 --trials 1 --depths 0 --out '" +
            out_.string() + "'");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("too short"), std::string::npos) << r.err;
  r = adakv("eval passkey " + model() + " --depths 120 --out '" + out_.string() + "'");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("depths"), std::string::npos) << r.err;
  r = adakv("eval");
  EXPECT_NE(r.rc, 0);
  r = adakv("eval ppl " + model() + " --continuation 1");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("--continuation"), std::string::npos) << r.err;
}

}  // namespace

// `adakv profile` on the real model: a ~1000-token prompt gives a 30 x 3 profile whose budgets
// add up to the policy's total, whose retained masses are shares, and whose files are written.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "tests/e2e/model_fixture.h"
#include "tests/e2e/run_adakv.h"

namespace {

namespace fs = std::filesystem;

using adakv::test::adakv;
using adakv::test::slurp;

std::string model() {
  return "--model " + adakv::test::model_path();
}

class ProfileModel : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("adakv-profile-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    // About 1000 tokens of the GPL-3 text (Debian's base-files ships it).
    const std::string gpl = slurp("/usr/share/common-licenses/GPL-3");
    ASSERT_GT(gpl.size(), 5000u) << "/usr/share/common-licenses/GPL-3 is missing";
    prompt_ = dir_ / "prompt.txt";
    std::ofstream(prompt_, std::ios::binary) << gpl.substr(0, 4400);
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path dir_, prompt_;
};

TEST_F(ProfileModel, JsonHasEveryLayerAndHeadWithConsistentBudgetsAndMasses) {
  const fs::path out = dir_ / "out";
  const auto r = adakv("profile " + model() + " --prompt-file " + prompt_.string() +
                       " --json --out " + out.string());
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(nlohmann::json::parse(slurp(out / "profile.json")), j);
  const std::string svg = slurp(out / "head_budgets.svg");
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);

  const size_t n = j["prompt_tokens"];
  ASSERT_GT(n, 800u);
  ASSERT_LT(n, 1300u);
  ASSERT_EQ(j["layers"], 30);
  ASSERT_EQ(j["kv_heads"], 3);
  ASSERT_EQ(j["heads"].size(), 30u);
  EXPECT_EQ(j["policy"]["policy"], "adakv");
  const size_t per_head = j["policy"]["budget_per_head"];
  EXPECT_EQ(per_head, static_cast<size_t>(std::lround(0.2 * n)));  // the default: 20%

  size_t total = 0, heads = 0;
  double mass = 0, kept_fraction = 0;
  for (const auto& layer : j["heads"]) {
    ASSERT_EQ(layer.size(), 3u);
    for (const auto& h : layer) {
      const size_t budget = h["budget"];
      EXPECT_GE(budget, 32u);  // the window is always kept
      EXPECT_LE(budget, n);
      const double m = h["retained_mass"], e = h["entropy_norm"], loc = h["locality"];
      EXPECT_GE(m, 0.0);
      EXPECT_LE(m, 1.0);
      EXPECT_GE(e, 0.0);
      EXPECT_LE(e, 1.0);
      EXPECT_GE(loc, 0.0);
      EXPECT_LE(loc, 1.0);
      const std::string role = h["role"];
      EXPECT_TRUE(role == "retrieval" || role == "local" || role == "mixed") << role;
      total += budget;
      mass += m;
      kept_fraction += double(h["kept_fraction"]);
      ++heads;
    }
  }
  // Ada-KV's rounding: round() moves each head by at most half a token and the floor() of
  // the safeguard share loses less than one.
  EXPECT_LE(total, 90 * per_head + 45);
  EXPECT_GE(total + 135, 90 * per_head);
  EXPECT_EQ(j["summary"]["total_budget"], total);
  // Keeping the highest scores retains at least the kept share of the mass, and far more on
  // real attention, which is concentrated.
  EXPECT_GE(mass / heads, kept_fraction / heads);
  EXPECT_GT(mass / heads, 0.5);
  const auto& roles = j["summary"]["roles"];
  EXPECT_EQ(size_t(roles["retrieval"]) + size_t(roles["local"]) + size_t(roles["mixed"]), 90u);
}

TEST_F(ProfileModel, TablePrintsOneRowPerLayerAndNamesTheFiles) {
  const fs::path out = dir_ / "table";
  const auto r = adakv("profile " + model() + " --prompt-file " + prompt_.string() +
                       " --policy snapkv --budget 128 --out " + out.string());
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("layer"), std::string::npos);
  EXPECT_NE(r.out.find("\n   29 |    128 "), std::string::npos) << r.out;  // uniform budgets
  EXPECT_NE(r.out.find("roles:"), std::string::npos);
  EXPECT_NE(r.err.find("head_budgets.svg"), std::string::npos);
  EXPECT_TRUE(fs::exists(out / "profile.json"));
  EXPECT_TRUE(fs::exists(out / "head_budgets.svg"));
}

TEST_F(ProfileModel, APromptNoLongerThanTheWindowIsAClearError) {
  const auto r =
      adakv("profile " + model() + " --prompt 'Hello there' --out " + (dir_ / "short").string());
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("window"), std::string::npos) << r.err;
  const auto missing = adakv("profile " + model());
  EXPECT_NE(missing.rc, 0);
  EXPECT_NE(missing.err.find("--prompt"), std::string::npos) << missing.err;
}

}  // namespace

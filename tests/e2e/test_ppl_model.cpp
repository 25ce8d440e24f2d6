// Perplexity under compression on the real model: Worker::score_continuation against one
// plain forward over prompt + continuation (the full cache's numbers), a budget of 100% equal
// to the full cache bit for bit, and `adakv eval ppl` end to end (table, JSON, bad lengths).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "runtime/contiguous_kv_cache.h"
#include "runtime/policy_fork.h"
#include "runtime/worker.h"
#include "tests/e2e/model_fixture.h"
#include "tests/e2e/run_adakv.h"

namespace {

namespace fs = std::filesystem;
using adakv::compression::CompressionConfig;
using adakv::compression::Policy;

class PplModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { engine_ = new adakv::runtime::Worker(adakv::test::model_path()); }
  static void TearDownTestSuite() { delete engine_; }
  // Tokens [from, from + n) of the GPL-3 text (Debian's base-files ships it).
  static std::vector<int32_t> text(size_t from, size_t n) {
    std::ifstream in("/usr/share/common-licenses/GPL-3");
    std::stringstream ss;
    ss << in.rdbuf();
    const auto ids = engine_->tokenizer().encode(ss.str());
    return {ids.begin() + from, ids.begin() + from + n};
  }
  static adakv::runtime::Worker* engine_;
};
adakv::runtime::Worker* PplModel::engine_ = nullptr;

CompressionConfig policy(Policy p, double ratio) {
  CompressionConfig c;
  c.policy = p;
  c.budget_ratio = ratio;
  return c;
}

TEST_F(PplModel, FullCacheScoresEqualOnePlainForwardAndFullBudgetChangesNothing) {
  adakv::runtime::GenerateRequest req;
  req.prompt = text(0, 600);
  const auto continuation = text(600, 40);
  const std::vector<CompressionConfig> policies = {
      policy(Policy::kFull, 1.0), policy(Policy::kAdaKV, 1.0), policy(Policy::kSnapKV, 0.2),
      policy(Policy::kAdaKV, 0.2)};
  const auto scores = adakv::runtime::score_continuation(*engine_, req, continuation, policies);
  ASSERT_EQ(scores.size(), 4u);

  // The same numbers from one forward over prompt + continuation in a contiguous cache.
  std::vector<int32_t> all = req.prompt;
  all.insert(all.end(), continuation.begin(), continuation.end());
  const auto& model = engine_->model();
  adakv::runtime::ContiguousKvCache cache(model.config(), all.size(), model.backend());
  const std::vector<float> logits =
      model.logits_to_host(model.forward(all.data(), all.size(), cache, continuation.size()));
  const size_t vocab = model.config().vocab_size;
  ASSERT_EQ(scores[0].nll.size(), continuation.size() - 1);
  double worst = 0;
  for (size_t i = 0; i + 1 < continuation.size(); ++i) {
    const float* row = logits.data() + i * vocab;
    const double max = *std::max_element(row, row + vocab);
    double sum = 0;
    for (size_t v = 0; v < vocab; ++v) sum += std::exp(double(row[v]) - max);
    const double nll = max + std::log(sum) - row[continuation[i + 1]];
    worst = std::max(worst, std::fabs(nll - scores[0].nll[i]));
  }
  std::printf("full cache vs one plain forward: max |nll diff| = %.2e over %zu tokens\n", worst,
              scores[0].nll.size());
  EXPECT_LT(worst, 1e-3);
  for (size_t i = 0; i < scores[0].kl.size(); ++i) {
    EXPECT_EQ(scores[0].kl[i], 0.0);
    EXPECT_EQ(scores[0].agrees[i], 1);
  }
  // Ada-KV with the whole prompt as budget compresses nothing: the same numbers exactly.
  EXPECT_EQ(scores[1].nll, scores[0].nll);
  EXPECT_EQ(scores[1].kl, scores[0].kl);
  EXPECT_EQ(scores[1].kv_after_prefill_bytes, scores[1].kv_full_after_prefill_bytes);
  // 20% changes the predictions a little, and holds about a fifth of the bytes.
  for (size_t p : {2, 3}) {
    double kl = 0;
    for (double x : scores[p].kl) kl += x;
    std::printf("policy %zu: mean KL %.5f, held %zu of %zu bytes\n", p, kl / scores[p].kl.size(),
                scores[p].kv_after_prefill_bytes, scores[p].kv_full_after_prefill_bytes);
    EXPECT_GT(kl, 0.0);
    EXPECT_LT(kl / scores[p].kl.size(), 2.0);  // nats per token: perturbed, not destroyed
    EXPECT_LE(double(scores[p].kv_after_prefill_bytes),
              0.22 * double(scores[p].kv_full_after_prefill_bytes));
  }
}

TEST_F(PplModel, BadContinuationsNameTheProblem) {
  adakv::runtime::GenerateRequest req;
  req.prompt = text(0, 100);
  const std::vector<CompressionConfig> policies = {policy(Policy::kFull, 1.0)};
  try {
    adakv::runtime::score_continuation(*engine_, req, text(100, 1), policies);
    FAIL() << "a 1-token continuation was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("at least 2 tokens"), std::string::npos) << e.what();
  }
  req.prompt.assign(8190, 42);
  try {
    adakv::runtime::score_continuation(*engine_, req, text(100, 10), policies);
    FAIL() << "a continuation past the context was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("do not fit the model's context of 8192"),
              std::string::npos)
        << e.what();
  }
  req.prompt = text(0, 100);
  EXPECT_THROW(adakv::runtime::score_continuation(*engine_, req, {1, -3}, policies),
               std::invalid_argument);
}

// eval passkey/niah score a right answer in each policy's cache from the same prefill that
// generates: the numbers equal score_continuation's, which prefills on its own.
TEST_F(PplModel, GeneratePoliciesScoresTheReferenceLikeScoreContinuation) {
  adakv::runtime::GenerateRequest req;
  req.prompt = text(0, 600);
  req.max_tokens = 4;
  req.reference = text(600, 20);
  const std::vector<CompressionConfig> policies = {policy(Policy::kFull, 1.0),
                                                   policy(Policy::kAdaKV, 0.2)};
  const auto results = adakv::runtime::generate_policies(*engine_, req, policies);
  const auto scores = adakv::runtime::score_continuation(*engine_, req, req.reference, policies);
  for (size_t p = 0; p < 2; ++p) {
    ASSERT_EQ(results[p].reference_nll.size(), 20u);
    // Token 0 comes from the prefill's logits: the same for every policy.
    EXPECT_EQ(results[p].reference_nll[0], results[0].reference_nll[0]);
    const std::vector<double> rest(results[p].reference_nll.begin() + 1,
                                   results[p].reference_nll.end());
    EXPECT_EQ(rest, scores[p].nll) << "policy " << p;
  }
  EXPECT_NE(results[1].reference_nll, results[0].reference_nll);
  req.reference.assign(8000, 42);
  EXPECT_THROW(adakv::runtime::generate_policies(*engine_, req, policies), std::invalid_argument);
}

TEST(PplCli, EvalPplWritesTheTableAndJson) {
  const fs::path out = fs::temp_directory_path() / ("adakv-ppl-" + std::to_string(::getpid()));
  fs::remove_all(out);
  const auto r = adakv::test::adakv(
      "eval ppl --model '" + adakv::test::model_path() +
      "' --lengths 300 --trials 2 --continuation 24 --budgets 0.2 --policies snapkv,adakv "
      "--threads 1 --out '" +
      out.string() + "'");
  ASSERT_EQ(r.rc, 0) << r.err;
  std::printf("%s", r.out.c_str());
  EXPECT_NE(r.out.find("adakv @ 20% vs snapkv: perplexity"), std::string::npos) << r.out;
  const auto j = nlohmann::json::parse(adakv::test::slurp(out / "ppl_results.json"));
  ASSERT_EQ(j["runs"].size(), 3u);
  ASSERT_EQ(j["records"].size(), 2u);
  EXPECT_EQ(j["runs"][0]["policy"], "full");
  EXPECT_EQ(j["runs"][0]["mean_kl"].get<double>(), 0.0);
  EXPECT_EQ(j["runs"][0]["top1_agreement"].get<double>(), 1.0);
  // The two contexts start at different offsets and each scores 23 tokens.
  EXPECT_NE(j["records"][0]["offset"], j["records"][1]["offset"]);
  for (const auto& rec : j["records"]) EXPECT_EQ(rec["runs"][1]["tokens"].get<size_t>(), 23u);
  for (size_t i = 1; i < 3; ++i) {
    const double ppl = j["runs"][i]["perplexity"].get<double>();
    EXPECT_TRUE(std::isfinite(ppl) && ppl > 1) << ppl;
    EXPECT_GT(j["runs"][i]["mean_kl"].get<double>(), 0.0);
    EXPECT_LT(j["runs"][i]["kv_kept"].get<double>(), 0.3);
  }
  EXPECT_TRUE(fs::exists(out / "ppl_table.txt"));
  fs::remove_all(out);

  const auto bad = adakv::test::adakv("eval ppl --model '" + adakv::test::model_path() +
                                      "' --lengths 8100 --continuation 128");
  EXPECT_NE(bad.rc, 0);
  EXPECT_NE(bad.err.find("does not fit the model's context of 8192"), std::string::npos) << bad.err;
}

}  // namespace

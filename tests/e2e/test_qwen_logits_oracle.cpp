// The real Qwen2.5 GGUF (qwen2: q/k/v biases, RoPE on halves, 151,936 tokens) against HF
// transformers (fp32) loading the same file: logits within kLogitsRel of the largest at every
// checked position of 5 prompts, one of 8192 tokens (past the default model's context), and
// 64 greedy tokens identical, on both decode paths. Goldens: tests/data/logits_goldens_qwen2.bin
// (tests/tools/gen_logits_goldens.py, version 2). Skipped without the model
// (tests/e2e/qwen_model.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "kernels/quant.h"
#include "model/llama.h"
#include "runtime/contiguous_kv_cache.h"
#include "runtime/sampler.h"
#include "tests/e2e/decode_dots_scope.h"
#include "tests/e2e/logits_goldens.h"
#include "tests/e2e/qwen_model.h"
#include "tests/unit/tolerances.h"

namespace {

using adakv::model::LlamaModel;
using adakv::runtime::ContiguousKvCache;
using adakv::test::GoldenPosition;
using adakv::test::GoldenPrompt;
using adakv::test::LogitGoldens;
namespace k = adakv::kernels;

LlamaModel load_qwen() {
  return LlamaModel::load(adakv::test::qwen_model_path(), k::cpu_backend());
}

class QwenLogits : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    goldens_ = std::make_unique<LogitGoldens>(adakv::test::load_logit_goldens(
        std::string(ADAKV_TEST_DATA_DIR) + "/logits_goldens_qwen2.bin"));
  }
  static void TearDownTestSuite() { goldens_.reset(); }
  void SetUp() override { ADAKV_SKIP_WITHOUT_QWEN(); }

  // Feeds the prompt in chunks that end at its checked positions (a run of consecutive ones in
  // one chunk whose last rows they are) and calls check(position golden, logits row) for each.
  template <class Check>
  static void prefill_checked(const LlamaModel& model, const GoldenPrompt& pr, Check&& check) {
    ContiguousKvCache cache(model.config(), pr.ids.size(), model.backend());
    const size_t V = model.config().vocab_size;
    size_t fed = 0;
    for (size_t i = 0; i < pr.positions.size();) {
      size_t j = i + 1;
      while (j < pr.positions.size() &&
             pr.positions[j].position == pr.positions[j - 1].position + 1) {
        ++j;
      }
      const size_t end = pr.positions[j - 1].position + 1, rows = j - i;
      const auto logits =
          model.logits_to_host(model.forward(pr.ids.data() + fed, end - fed, cache, rows));
      for (size_t r = 0; r < rows; ++r) check(pr.positions[i + r], logits.data() + r * V);
      fed = end;
      i = j;
    }
  }

  static std::unique_ptr<LogitGoldens> goldens_;
};
std::unique_ptr<LogitGoldens> QwenLogits::goldens_;

TEST_F(QwenLogits, CheckedPositionsMatchTransformers) {
  ASSERT_EQ(goldens_->prompts.size(), 5u);
  const LlamaModel model = load_qwen();
  const size_t V = model.config().vocab_size;
  size_t longest = 0;
  for (const auto& pr : goldens_->prompts) {
    longest = std::max(longest, pr.ids.size());
    float worst = 0;
    prefill_checked(model, pr, [&](const GoldenPosition& ref, const float* row) {
      worst = std::max(worst, goldens_->row_error(row, ref));
      EXPECT_EQ(adakv::runtime::argmax(row, V), ref.argmax)
          << "prompt of " << pr.ids.size() << " tokens, position " << ref.position;
    });
    EXPECT_LE(worst, adakv::test::kLogitsRel) << "prompt of " << pr.ids.size() << " tokens";
    std::printf(
        "qwen2 prompt %5zu tokens, %4zu positions checked: max |diff| / max |logit| = "
        "%.2e\n",
        pr.ids.size(), pr.positions.size(), worst);
  }
  EXPECT_GE(longest, 8192u);
}

constexpr k::MatmulPath kDecodePaths[] = {k::MatmulPath::kInt16Dots, k::MatmulPath::kFloatDots};

const char* path_name(k::MatmulPath path) {
  return path == k::MatmulPath::kInt16Dots ? "int16 dots (the default)"
                                           : "float dots (--decode-dots float)";
}

// Greedy decoding from every prompt gives the transformers tokens, on both decode paths; the
// prompt's last rows, decoded one token at a time, match the goldens too.
TEST_F(QwenLogits, Greedy64TokensIdenticalAndDecodeRowsMatch) {
  for (const auto path : kDecodePaths) {
    SCOPED_TRACE(path_name(path));
    const adakv::test::DecodeDotsScope dots(path);
    const LlamaModel model = load_qwen();
    const size_t V = model.config().vocab_size;
    float worst = 0;
    size_t rows = 0;
    for (const auto& pr : goldens_->prompts) {
      const size_t n = pr.ids.size();
      // Decode rows: the last min(n, 32) prompt tokens one at a time.
      const size_t first = n > 32 ? n - 32 : 0;
      ContiguousKvCache cache(model.config(), n + pr.greedy.size(), model.backend());
      std::vector<float> logits;
      if (first > 0) model.forward(pr.ids.data(), first, cache);
      auto ref =
          std::lower_bound(pr.positions.begin(), pr.positions.end(), first,
                           [](const GoldenPosition& p, size_t pos) { return p.position < pos; });
      for (size_t t = first; t < n; ++t) {
        logits = model.logits_to_host(model.forward(&pr.ids[t], 1, cache));
        if (ref != pr.positions.end() && ref->position == t) {
          worst = std::max(worst, goldens_->row_error(logits.data(), *ref));
          EXPECT_EQ(adakv::runtime::argmax(logits.data(), V), ref->argmax)
              << "prompt of " << n << " tokens, position " << t;
          ++ref;
          ++rows;
        }
      }
      std::vector<int32_t> got;
      for (size_t i = 0; i < pr.greedy.size(); ++i) {
        const int32_t next = adakv::runtime::argmax(logits.data(), V);
        got.push_back(next);
        logits = model.logits_to_host(model.forward(&next, 1, cache));
      }
      EXPECT_EQ(got, pr.greedy) << "prompt of " << n << " tokens";
      std::printf("%s: prompt %5zu tokens, greedy %zu tokens identical: %s\n", path_name(path), n,
                  pr.greedy.size(), got == pr.greedy ? "yes" : "no");
    }
    EXPECT_LE(worst, adakv::test::kLogitsRel);
    std::printf("%s: %zu decode rows, max |diff| / max |logit| = %.2e\n", path_name(path), rows,
                worst);
  }
}

}  // namespace

// adakv's logits and greedy continuations against HF transformers (fp32) on the same GGUF.
// Goldens: tests/tools/gen_logits_goldens.py (format documented there).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "kernels/quant.h"
#include "model/llama.h"
#include "runtime/contiguous_kv_cache.h"
#include "runtime/sampler.h"
#include "tests/e2e/decode_dots_scope.h"
#include "tests/e2e/logits_goldens.h"
#include "tests/e2e/model_fixture.h"
#include "tests/unit/tolerances.h"

namespace {

using Goldens = adakv::test::LogitGoldens;
using Position = adakv::test::GoldenPosition;
using Prompt = adakv::test::GoldenPrompt;

Goldens load_goldens() {
  return adakv::test::load_logit_goldens(std::string(ADAKV_TEST_DATA_DIR) + "/logits_goldens.bin");
}

class LogitsOracle : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    goldens_ = new Goldens(load_goldens());
    model_ = new adakv::model::LlamaModel(
        adakv::model::LlamaModel::load(adakv::test::model_path(), adakv::kernels::cpu_backend()));
  }
  static void TearDownTestSuite() {
    delete goldens_;
    delete model_;
  }
  // Greedy decoding from every golden prompt gives the transformers tokens.
  static void expect_greedy_goldens(const adakv::model::LlamaModel& model);
  // max |row[id] - want| / max |logit| over the position's checked ids (top and probes).
  static float row_error(const float* row, const Position& ref) {
    return goldens_->row_error(row, ref);
  }
  static Goldens* goldens_;
  static adakv::model::LlamaModel* model_;
};
Goldens* LogitsOracle::goldens_ = nullptr;
adakv::model::LlamaModel* LogitsOracle::model_ = nullptr;

TEST_F(LogitsOracle, EveryPositionMatchesTransformers) {
  ASSERT_EQ(goldens_->prompts.size(), 5u);
  size_t longest = 0;
  const size_t V = model_->config().vocab_size;
  for (const auto& pr : goldens_->prompts) {
    longest = std::max(longest, pr.ids.size());
    adakv::runtime::ContiguousKvCache cache(model_->config(), pr.ids.size(), model_->backend());
    const std::vector<float> logits =
        model_->logits_to_host(model_->forward(pr.ids.data(), pr.ids.size(), cache, pr.ids.size()));
    float worst = 0;
    for (size_t t = 0; t < pr.ids.size(); ++t) {
      const float* row = logits.data() + t * V;
      worst = std::max(worst, row_error(row, pr.positions[t]));
      ASSERT_EQ(adakv::runtime::argmax(row, V), pr.positions[t].argmax)
          << "prompt of " << pr.ids.size() << " tokens, position " << t;
    }
    EXPECT_LE(worst, adakv::test::kLogitsRel) << "prompt of " << pr.ids.size() << " tokens";
    std::printf("prompt %5zu tokens: max |diff| / max |logit| over checked ids = %.2e\n",
                pr.ids.size(), worst);
  }
  EXPECT_GE(longest, 2000u);
}

constexpr adakv::kernels::MatmulPath kDecodePaths[] = {adakv::kernels::MatmulPath::kInt16Dots,
                                                       adakv::kernels::MatmulPath::kFloatDots};

const char* path_name(adakv::kernels::MatmulPath path) {
  return path == adakv::kernels::MatmulPath::kInt16Dots ? "int16 dots (the default)"
                                                        : "float dots (--decode-dots float)";
}

// The goldens hold on both decode paths.
TEST_F(LogitsOracle, Greedy64TokensIdentical) {
  for (const auto path : kDecodePaths) {
    SCOPED_TRACE(path_name(path));
    const adakv::test::DecodeDotsScope dots(path);
    const auto model =
        adakv::model::LlamaModel::load(adakv::test::model_path(), adakv::kernels::cpu_backend());
    expect_greedy_goldens(model);
  }
}

// The rows a generated token takes (one token per forward: the decode dots, int16 activations
// by default) against the transformers logits at every position, within the tolerance and with
// the argmax of the prompt's float32 GEMM path above. The long prompt is prefilled up to its last
// 100 tokens, which are then decoded at 2000 tokens of context.
TEST_F(LogitsOracle, DecodeRowsMatchTransformers) {
  const size_t V = model_->config().vocab_size;
  for (const auto path : kDecodePaths) {
    SCOPED_TRACE(path_name(path));
    const adakv::test::DecodeDotsScope dots(path);
    const auto model =
        adakv::model::LlamaModel::load(adakv::test::model_path(), adakv::kernels::cpu_backend());
    float worst = 0;
    size_t rows = 0;
    for (const auto& pr : goldens_->prompts) {
      const size_t n = pr.ids.size(), first = n > 200 ? n - 100 : 0;
      adakv::runtime::ContiguousKvCache cache(model.config(), n, model.backend());
      std::vector<float> logits;
      if (first > 0) model.forward(pr.ids.data(), first, cache);
      for (size_t t = first; t < n; ++t, ++rows) {
        logits = model.logits_to_host(model.forward(&pr.ids[t], 1, cache));
        worst = std::max(worst, row_error(logits.data(), pr.positions[t]));
        EXPECT_EQ(adakv::runtime::argmax(logits.data(), V), pr.positions[t].argmax)
            << "prompt of " << n << " tokens, position " << t;
      }
    }
    EXPECT_LE(worst, adakv::test::kLogitsRel);
    std::printf("%s: %zu decode rows, max |diff| / max |logit| over checked ids = %.2e\n",
                path_name(path), rows, worst);
  }
}

void LogitsOracle::expect_greedy_goldens(const adakv::model::LlamaModel& model) {
  for (const auto& pr : goldens_->prompts) {
    adakv::runtime::ContiguousKvCache cache(model.config(), pr.ids.size() + pr.greedy.size(),
                                            model.backend());
    std::vector<float> logits =
        model.logits_to_host(model.forward(pr.ids.data(), pr.ids.size(), cache));
    std::vector<int32_t> got;
    for (size_t i = 0; i < pr.greedy.size(); ++i) {
      const int32_t next = adakv::runtime::argmax(logits.data(), model.config().vocab_size);
      got.push_back(next);
      logits = model.logits_to_host(model.forward(&next, 1, cache));
    }
    EXPECT_EQ(got, pr.greedy) << "prompt of " << pr.ids.size() << " tokens";
  }
}

// forward_batch decodes several sequences at different positions in one pass; each must get
// the logits it gets alone (the batched GEMM may round differently, hence the tolerance) and
// the same greedy tokens as the transformers goldens.
TEST_F(LogitsOracle, BatchedDecodeMatchesOneSequenceAtATime) {
  using adakv::runtime::ContiguousKvCache;
  const size_t V = model_->config().vocab_size, steps = 16;
  std::vector<const Prompt*> prompts;
  for (const auto& pr : goldens_->prompts) {
    if (prompts.size() < 3 && pr.greedy.size() >= steps) prompts.push_back(&pr);
  }
  ASSERT_GE(prompts.size(), 2u);
  const size_t B = prompts.size();
  std::vector<std::unique_ptr<ContiguousKvCache>> batched, alone;
  std::vector<std::vector<float>> alone_logits(B);
  std::vector<float> batch_logits(B * V);
  for (size_t b = 0; b < B; ++b) {
    const auto& ids = prompts[b]->ids;
    batched.push_back(std::make_unique<ContiguousKvCache>(model_->config(), ids.size() + steps,
                                                          model_->backend()));
    alone.push_back(std::make_unique<ContiguousKvCache>(model_->config(), ids.size() + steps,
                                                        model_->backend()));
    const auto lg = model_->logits_to_host(model_->forward(ids.data(), ids.size(), *batched[b]));
    std::copy(lg.begin(), lg.end(), batch_logits.begin() + b * V);
    alone_logits[b] = model_->logits_to_host(model_->forward(ids.data(), ids.size(), *alone[b]));
  }
  for (size_t step = 0; step < steps; ++step) {
    std::vector<int32_t> next(B);
    std::vector<adakv::model::KvCache*> caches(B);
    for (size_t b = 0; b < B; ++b) {
      next[b] = adakv::runtime::argmax(batch_logits.data() + b * V, V);
      EXPECT_EQ(next[b], prompts[b]->greedy[step]) << "sequence " << b << ", step " << step;
      caches[b] = batched[b].get();
    }
    batch_logits = model_->logits_to_host(model_->forward_batch(next.data(), caches.data(), B));
    ASSERT_EQ(batch_logits.size(), B * V);
    for (size_t b = 0; b < B; ++b) {
      alone_logits[b] = model_->logits_to_host(model_->forward(&next[b], 1, *alone[b]));
      float worst = 0, scale = 0;
      for (size_t i = 0; i < V; ++i) {
        worst = std::max(worst, std::fabs(batch_logits[b * V + i] - alone_logits[b][i]));
        scale = std::max(scale, std::fabs(alone_logits[b][i]));
      }
      EXPECT_LE(worst, 1e-5f * scale) << "sequence " << b << ", step " << step;
    }
  }
}

}  // namespace

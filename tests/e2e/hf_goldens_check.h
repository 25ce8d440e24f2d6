// A loaded tiny model against transformers' goldens of its checkpoint
// (tests/data/hf_goldens/<name>.bin, tests/tools/gen_hf_goldens.py): the logits at every checked
// position of each prompt within kHfRel of the largest |logit|, the same argmax, and
// transformers' 64 greedy tokens after the 24-token prompt, one decode step at a time. Shared by
// the checkpoint-directory and the GGUF oracle tests, which load the same weights two ways.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "model/llama.h"
#include "runtime/contiguous_kv_cache.h"
#include "tests/e2e/logits_goldens.h"

namespace adakv::test {

// adakv and transformers both compute in float32 from the same weights (bf16 and f16 ones
// decoded exactly), in other summation orders: relative to the largest |logit|.
constexpr float kHfRel = 1e-5f;
// The greedy tokens the goldens hold after the short prompt.
constexpr size_t kHfGreedyTokens = 64;

// Checks `model` against the goldens of checkpoint `name` (gtest failures name `label`) and
// returns the largest relative logit error it saw.
inline float check_against_hf_goldens(const model::LlamaModel& model, const std::string& name,
                                      const std::string& label) {
  const LogitGoldens goldens =
      load_logit_goldens(std::string(ADAKV_TEST_DATA_DIR) + "/hf_goldens/" + name + ".bin");
  const size_t V = model.config().vocab_size;
  size_t greedy_prompts = 0;
  float worst = 0;
  for (const GoldenPrompt& pr : goldens.prompts) {
    if (!pr.greedy.empty()) {
      ++greedy_prompts;
      EXPECT_EQ(pr.greedy.size(), kHfGreedyTokens) << name << ": stale goldens?";
    }
    runtime::ContiguousKvCache cache(model.config(), pr.ids.size() + pr.greedy.size(),
                                     model.backend());
    const std::vector<float> logits =
        model.logits_to_host(model.forward(pr.ids.data(), pr.ids.size(), cache, pr.ids.size()));
    EXPECT_EQ(logits.size(), pr.ids.size() * V);
    if (logits.size() != pr.ids.size() * V) return worst;
    for (const GoldenPosition& g : pr.positions) {
      const float* row = logits.data() + g.position * V;
      const float err = goldens.row_error(row, g);
      worst = std::max(worst, err);
      EXPECT_LE(err, kHfRel) << label << " position " << g.position << " of " << pr.ids.size();
      EXPECT_EQ(std::max_element(row, row + V) - row, g.argmax)
          << label << " position " << g.position;
    }
    std::vector<float> last(logits.end() - static_cast<ptrdiff_t>(V), logits.end());
    for (size_t i = 0; i < pr.greedy.size(); ++i) {
      const int32_t next =
          static_cast<int32_t>(std::max_element(last.begin(), last.end()) - last.begin());
      EXPECT_EQ(next, pr.greedy[i]) << label << " greedy token " << i;
      if (next != pr.greedy[i]) break;
      last = model.logits_to_host(model.forward(&next, 1, cache));
    }
  }
  EXPECT_EQ(greedy_prompts, 1u) << name;
  return worst;
}

}  // namespace adakv::test

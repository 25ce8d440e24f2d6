// adakv generate's defaults never hurt a short prompt: with no compression flag, the model's
// preset (configs/compression/smollm2-135m.yaml) and the per-head floor (min_keep 512) keep a
// chat prompt of up to 512 tokens whole, so its greedy answer is the full cache's, token for
// token. Without the floor, 20% of a 37-token prompt is below the 32-token window: every head
// kept the window alone, the system line and the attention sink were evicted, and "What is the
// capital of France?" was answered "The capital of France is 2 Hugging Face".
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "model/gguf/gguf.h"
#include "runtime/compression/model_presets.h"
#include "runtime/engine.h"
#include "runtime/worker.h"
#include "tests/e2e/model_fixture.h"
#include "tests/e2e/run_adakv.h"

namespace {

using adakv::compression::CompressionConfig;
using adakv::compression::Policy;

constexpr size_t kMaxTokens = 24;

const char* kPassage =
    "The lighthouse on the northern cape was built in 1871 from granite quarried two miles "
    "inland. For ninety years a keeper and his family lived in the cottage beside it, trimming "
    "the wick every four hours and winding the clockwork that turned the lens. In 1962 the lamp "
    "was electrified and the last keeper, Margaret Ellison, moved to the village, where she "
    "taught sailing to children until she retired. The tower was painted with red and white "
    "bands in 1980 so that ships could see it by day. Today the light is automatic and is "
    "checked once a month by an engineer who arrives by boat when the road is flooded. The "
    "cottage has become a small museum with the original lens, a logbook from the great storm "
    "of 1903 and photographs of the keepers and their families.";

const char* kRecipe =
    "To make the bread, mix 500 grams of flour with 10 grams of salt and 7 grams of dried yeast. "
    "Add 320 millilitres of warm water and knead the dough for ten minutes until it is smooth. "
    "Leave it covered in a warm place for an hour, until it has doubled in size. Shape it into a "
    "loaf, let it rise for another 45 minutes, then bake it at 220 degrees for 30 minutes.";

// The recipe's first two sentences.
const char* kRecipeStart =
    "To make the bread, mix 500 grams of flour with 10 grams of salt and 7 grams of dried yeast. "
    "Add 320 millilitres of warm water and knead the dough for ten minutes until it is smooth.";

// Chat prompts of every length from a few words to ~300 tokens with the template.
std::vector<std::string> chat_prompts() {
  const std::string passage = kPassage, recipe = kRecipe, recipe_start = kRecipeStart;
  return {
      "Hi!",
      "What is the capital of France?",
      "How many legs does a spider have?",
      "Name three primary colors.",
      "Translate 'good morning' into Spanish.",
      "What is 12 times 7?",
      "Write a haiku about autumn leaves.",
      "Who wrote the play Romeo and Juliet?",
      "Explain in one sentence why the sky is blue.",
      "Give me a short tip for sleeping better at night.",
      "I have a meeting at 3 pm and it takes 45 minutes. My next appointment is at 4 pm and it "
      "is a ten minute walk away. Will I make it on time? Explain briefly.",
      "You are helping a beginner learn to program. They ask: what is the difference between a "
      "list and a tuple in Python? Answer with a short explanation and one example of each.",
      "Write a polite email to my landlord saying that the kitchen tap has been dripping for a "
      "week, that I would like someone to repair it, and that I am at home on weekday "
      "afternoons.",
      recipe + "\n\nHow long does the dough rest in total?",
      recipe + "\n\nWhat temperature is the oven set to?",
      "Summarize this recipe in one sentence: " + recipe,
      passage + "\n\nWhen was the lamp electrified?",
      passage + "\n\nWho was the last keeper of the lighthouse?",
      "Read the text and answer the question.\n\n" + passage +
          "\n\nQuestion: what can visitors see in the museum?",
      passage + "\n\nGive the text a short title.",
      passage + "\n\n" + recipe_start + "\n\nWhich of the two texts is about a building?",
      "Here are two paragraphs.\n\n" + passage + "\n\n" + recipe_start +
          "\n\nSummarize both paragraphs in one sentence each.",
  };
}

class DefaultCompression : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    path_ = new std::string(adakv::test::model_path());
    engine_ = new adakv::runtime::Worker(*path_);
    const auto file = adakv::gguf::GgufFile::open(*path_);
    names_ = new std::vector<std::string>(
        adakv::compression::model_preset_names(file.get_string("general.basename", ""),
                                               file.get_string("general.size_label", ""), *path_));
  }
  static void TearDownTestSuite() {
    delete engine_;
    delete path_;
    delete names_;
  }
  // What `adakv generate` starts from when no flag is given (launcher/compression_flags.cpp):
  // the model's preset, found where the adakv binary looks for it, and the floor.
  static adakv::compression::ModelDefaults defaults() {
    return adakv::compression::model_defaults(
        *names_, adakv::compression::config_dirs(std::getenv("ADAKV_CONFIGS"), ADAKV_BINARY,
                                                 ADAKV_TEST_DATA_DIR "/../../configs"));
  }
  static adakv::runtime::GenerateResult run(const std::string& text, const CompressionConfig& c) {
    adakv::runtime::GenerateRequest req;
    req.prompt = engine_->encode_prompt(text, /*chat=*/true);
    req.max_tokens = kMaxTokens;
    req.compression = c;
    return adakv::runtime::generate(*engine_, req);
  }
  static bool default_model() { return !names_->empty() && names_->front() == "smollm2-135m"; }

  static adakv::runtime::Worker* engine_;
  static std::string* path_;
  static std::vector<std::string>* names_;
};
adakv::runtime::Worker* DefaultCompression::engine_ = nullptr;
std::string* DefaultCompression::path_ = nullptr;
std::vector<std::string>* DefaultCompression::names_ = nullptr;

TEST_F(DefaultCompression, ShortChatPromptsAnswerAsTheFullCache) {
  const auto d = defaults();
  std::printf("defaults: %s; from %s\n", adakv::compression::describe(d.config).c_str(),
              d.source.c_str());
  if (default_model()) {
    EXPECT_NE(d.source.find("smollm2-135m.yaml"), std::string::npos) << d.source;
    EXPECT_EQ(d.config.lookahead, 16u);  // the preset's scorer is in force...
  }
  EXPECT_EQ(d.config.min_keep, adakv::compression::kGenerateMinKeep);  // ...with the floor
  CompressionConfig full = d.config;
  full.policy = Policy::kFull;

  const auto prompts = chat_prompts();
  ASSERT_GE(prompts.size(), 20u);
  size_t shortest = SIZE_MAX, longest = 0;
  for (const auto& text : prompts) {
    const auto want = run(text, full);
    const auto got = run(text, d.config);
    const size_t n = got.prompt_tokens;
    shortest = std::min(shortest, n);
    longest = std::max(longest, n);
    std::printf("%3zu tokens: %s | %s\n", n, got.tokens == want.tokens ? "same" : "DIFFERENT",
                got.text.substr(0, 60).c_str());
    EXPECT_EQ(got.tokens, want.tokens) << n << "-token prompt: \"" << text << "\"\n default: \""
                                       << got.text << "\"\n full:    \"" << want.text << "\"";
    for (const auto& layer : got.compression.kept) {
      for (size_t k : layer) EXPECT_EQ(k, n) << "a prompt under the floor is kept whole";
    }
    EXPECT_EQ(got.compression.lookahead_tokens, 0u) << "no look-ahead cost when nothing is evicted";
  }
  std::printf("%zu chat prompts of %zu-%zu tokens\n", prompts.size(), shortest, longest);
  EXPECT_LE(shortest, 40u);
  EXPECT_GE(longest, 250u);
  EXPECT_LE(longest, 300u);
}

// Past the floor the default still compresses, and keeps min_keep tokens per head on average.
TEST_F(DefaultCompression, LongerPromptsKeepTheFloorPerHead) {
  std::ifstream in("/usr/share/common-licenses/GPL-3");
  std::stringstream ss;
  ss << in.rdbuf();
  auto ids = engine_->tokenizer().encode(ss.str());
  ASSERT_GE(ids.size(), 1200u);
  ids.resize(1200);  // 20% = 240 tokens per head, below the floor
  adakv::runtime::GenerateRequest req;
  req.prompt = ids;
  req.max_tokens = 4;  // the tokens after the first decode from the compressed cache
  req.compression = defaults().config;
  const auto r = adakv::runtime::generate(*engine_, req);
  size_t kept = 0, heads = 0;
  for (const auto& layer : r.compression.kept) {
    for (size_t k : layer) {
      kept += k;
      ++heads;
      EXPECT_LT(k, ids.size());
    }
  }
  const double mean = double(kept) / heads;
  std::printf("1200-token prompt: %.1f tokens kept per head on average\n", mean);
  EXPECT_NEAR(mean, 512.0, 2.0);  // Ada-KV's rounding moves the total by under half a token/head
}

// The CLI with no compression flag: the same answer as the full cache, the settings line and
// "compression" in --json; --min-keep 0 (the official behaviour) reports what it evicts.
TEST_F(DefaultCompression, CliDefaultsAndKvLine) {
  const std::string question = "What is the capital of France?";
  CompressionConfig full;
  full.policy = Policy::kFull;
  const auto want = run(question, full);
  ASSERT_EQ(want.prompt_tokens, 37u);

  const std::string args = "generate --model " + *path_ + " --chat --prompt '" + question +
                           "' --max-tokens " + std::to_string(kMaxTokens);
  const auto j = adakv::test::adakv(args + " --json");
  ASSERT_EQ(j.rc, 0) << j.err;
  const auto out = nlohmann::json::parse(j.out);
  EXPECT_EQ(out["tokens"].get<std::vector<int32_t>>(), want.tokens) << out["text"];
  EXPECT_EQ(out["compression"]["min_keep"], adakv::compression::kGenerateMinKeep);
  EXPECT_EQ(out["compression"]["policy"], "adakv");
  EXPECT_DOUBLE_EQ(out["kv"]["kept_tokens_per_head"].get<double>(), 37.0);
  if (default_model()) {
    EXPECT_NE(out["compression"]["source"].get<std::string>().find("smollm2-135m.yaml"),
              std::string::npos)
        << out["compression"];
    EXPECT_EQ(out["compression"]["lookahead"], 16);
    EXPECT_EQ(out["compression"]["pooling"], "avgpool");
  }

  const auto h = adakv::test::adakv(args + " --min-keep 0");
  ASSERT_EQ(h.rc, 0) << h.err;
  std::printf("--min-keep 0: %s\n%s", h.out.c_str(), h.err.c_str());
  EXPECT_NE(h.err.find("[adakv] compression: policy adakv, budget 20%, min_keep 0"),
            std::string::npos)
      << h.err;
  // 20% of 37 is below the window: each head keeps the 32-token window alone.
  EXPECT_NE(h.err.find("kept 32 of 37 prompt tokens per head on average (86.5%), evicted 5"),
            std::string::npos)
      << h.err;
}

}  // namespace

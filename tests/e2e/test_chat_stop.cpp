// Generation ends at the chat template's end-of-turn token, not only at the vocabulary's eos,
// and the stop token's text never reaches the output, on the real default model (SmolLM2) and,
// where it is there, Qwen2.5. SmolLM2's eos is its template's <|im_end|>, so the in-process
// tests give its tokenizer <|endoftext|> as eos: <|im_end|> then ends generation only as the
// template's token.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/gguf/gguf.h"
#include "model/tokenizer/tokenizer.h"
#include "runtime/engine.h"
#include "runtime/policy_fork.h"
#include "runtime/worker.h"
#include "tests/e2e/model_fixture.h"
#include "tests/e2e/qwen_model.h"
#include "tests/e2e/run_adakv.h"

namespace {

using adakv::compression::CompressionConfig;
using adakv::compression::Policy;
using adakv::runtime::GenerateRequest;
using adakv::runtime::GenerateResult;
using adakv::runtime::Worker;
using adakv::tokenizer::Tokenizer;

constexpr const char* kQuestion = "What is the capital of France?";

class ChatStop : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string path = adakv::test::model_path();
    worker_ = new Worker(path);
    adakv::tokenizer::Vocab v =
        adakv::tokenizer::vocab_from_gguf(adakv::gguf::GgufFile::open(path));
    im_end_ = v.eos_id;
    ASSERT_EQ(v.tokens.at(im_end_), "<|im_end|>");
    v.eos_id = 0;
    ASSERT_EQ(v.tokens.at(0), "<|endoftext|>");
    worker_->tokenizer() = Tokenizer(std::move(v));
  }
  static void TearDownTestSuite() { delete worker_; }

  static GenerateRequest request(bool stop_at_eos) {
    GenerateRequest r;
    r.prompt = worker_->tokenizer().encode_chat({{"user", kQuestion}});
    r.max_tokens = 48;
    r.stop_at_eos = stop_at_eos;
    r.compression.policy = Policy::kFull;
    return r;
  }

  static Worker* worker_;
  static int32_t im_end_;
};

Worker* ChatStop::worker_ = nullptr;
int32_t ChatStop::im_end_ = -1;

TEST_F(ChatStop, TheTemplatesEndOfTurnIsAStopToken) {
  EXPECT_EQ(worker_->tokenizer().stop_ids(), (std::vector<int32_t>{0, im_end_}));
}

TEST_F(ChatStop, TheServingLoopEndsAtEndOfTurnWithoutItsText) {
  const GenerateResult r = adakv::runtime::generate(*worker_, request(true));
  EXPECT_EQ(r.finish_reason, "stop");
  ASSERT_FALSE(r.tokens.empty());
  EXPECT_EQ(r.tokens.back(), im_end_);
  EXPECT_LT(r.tokens.size(), 48u);
  EXPECT_NE(r.text.find("Paris"), std::string::npos) << r.text;
  EXPECT_EQ(r.text.find("<|im_end|>"), std::string::npos) << r.text;
  EXPECT_EQ(r.text, worker_->tokenizer().decode({r.tokens.begin(), r.tokens.end() - 1}));
}

TEST_F(ChatStop, IgnoreEosGoesPastEndOfTurn) {
  const GenerateResult stopped = adakv::runtime::generate(*worker_, request(true));
  const GenerateResult r = adakv::runtime::generate(*worker_, request(false));
  EXPECT_EQ(r.finish_reason, "length");
  EXPECT_EQ(r.tokens.size(), 48u);
  // The same greedy tokens up to the stop, which is now generated as text.
  ASSERT_GE(r.tokens.size(), stopped.tokens.size());
  EXPECT_TRUE(std::equal(stopped.tokens.begin(), stopped.tokens.end(), r.tokens.begin()));
  EXPECT_NE(r.text.find("<|im_end|>"), std::string::npos) << r.text;
}

TEST_F(ChatStop, PolicyForksEndAtEndOfTurn) {
  CompressionConfig full, snap;
  full.policy = Policy::kFull;
  snap.policy = Policy::kSnapKV;
  snap.budget_ratio = 0.5;
  const auto results = adakv::runtime::generate_policies(*worker_, request(true), {full, snap});
  for (const GenerateResult& r : results) {
    EXPECT_EQ(r.finish_reason, "stop");
    ASSERT_FALSE(r.tokens.empty());
    EXPECT_EQ(r.tokens.back(), im_end_);
    EXPECT_EQ(r.text.find("<|im_end|>"), std::string::npos) << r.text;
  }
}

// The CLI on the real files: the chat stops at the template's token, whose text is not printed.
void expect_cli_chat_stops(const std::string& model, int32_t end_of_turn) {
  const auto run = adakv::test::adakv("generate --model " + model + " --chat --prompt '" +
                                      kQuestion + "' --max-tokens 64 --json --policy full");
  ASSERT_EQ(run.rc, 0) << run.err;
  const auto j = nlohmann::json::parse(run.out);
  EXPECT_EQ(j["finish_reason"], "stop");
  EXPECT_EQ(j["tokens"].back().get<int32_t>(), end_of_turn);
  EXPECT_EQ(j["text"].get<std::string>().find("<|im_end|>"), std::string::npos) << j["text"];
}

TEST(ChatStopCli, SmolLm2) {
  expect_cli_chat_stops(adakv::test::model_path(), 2);
}

TEST(ChatStopCli, Qwen25) {
  ADAKV_SKIP_WITHOUT_QWEN();
  expect_cli_chat_stops(adakv::test::qwen_model_path(), 151645);
}

TEST(ChatStopCli, InspectNamesTheTemplateAndTheStopTokens) {
  const auto r = adakv::test::adakv("inspect " + adakv::test::model_path());
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("chat template     smollm2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("stop tokens       2 <|im_end|>"), std::string::npos) << r.out;
}

TEST(ChatStopCli, AnUnknownTemplateNameListsTheKnownOnes) {
  for (const char* cmd :
       {"generate --chat --prompt x", "batch /dev/null", "serve", "eval passkey"}) {
    const auto r = adakv::test::adakv(std::string(cmd) + " --model " + adakv::test::model_path() +
                                      " --chat-template llama9");
    EXPECT_NE(r.rc, 0) << cmd;
    EXPECT_NE(r.err.find("unknown chat template 'llama9'"), std::string::npos) << cmd << r.err;
    EXPECT_NE(r.err.find("mistral-tekken"), std::string::npos) << cmd << r.err;
  }
}

TEST(ChatStopCli, ANamedTemplateOverridesTheFilesOwn) {
  // Llama 3's template on SmolLM2: its header tokens are plain text to this vocabulary, and the
  // prompt grows by them (SmolLM2's default system turn is gone).
  const std::string base = "generate --model " + adakv::test::model_path() +
                           " --chat --prompt hi --max-tokens 1 --json --policy full";
  const auto own = adakv::test::adakv(base);
  const auto llama3 = adakv::test::adakv(base + " --chat-template llama3");
  ASSERT_EQ(own.rc, 0) << own.err;
  ASSERT_EQ(llama3.rc, 0) << llama3.err;
  EXPECT_NE(nlohmann::json::parse(own.out)["prompt_tokens"],
            nlohmann::json::parse(llama3.out)["prompt_tokens"]);
}

}  // namespace

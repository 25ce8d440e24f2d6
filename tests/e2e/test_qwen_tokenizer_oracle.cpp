// Qwen2.5's tokenizer (tokenizer.ggml.pre "qwen2", 151,936 tokens) against the goldens of HF
// tokenizers (tests/data/tokenizer_goldens_qwen2.jsonl, written by
// tests/tools/gen_tokenizer_goldens.py from the same GGUF), and its chat template and end of
// generation as the file defines them. Skipped without the model (tests/e2e/qwen_model.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "model/gguf/gguf.h"
#include "model/tokenizer/tokenizer.h"
#include "tests/e2e/qwen_model.h"
#include "tests/e2e/tokenizer_goldens.h"

namespace {

using adakv::tokenizer::Tokenizer;
using Ids = std::vector<int32_t>;

class QwenTokenizer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!adakv::test::qwen_model_missing().empty()) return;
    const auto file = adakv::gguf::GgufFile::open(adakv::test::qwen_model_path());
    tok_ = std::make_unique<Tokenizer>(adakv::tokenizer::vocab_from_gguf(file));
  }
  static void TearDownTestSuite() { tok_.reset(); }
  void SetUp() override { ADAKV_SKIP_WITHOUT_QWEN(); }

  static std::unique_ptr<Tokenizer> tok_;
};
std::unique_ptr<Tokenizer> QwenTokenizer::tok_;

TEST_F(QwenTokenizer, VocabularyMetadata) {
  const auto& v = tok_->vocab();
  EXPECT_EQ(tok_->vocab_size(), 151936u);
  EXPECT_EQ(v.merges.size(), 151387u);
  EXPECT_EQ(v.pre, "qwen2");
  EXPECT_EQ(tok_->token_bytes(tok_->bos_id()), "<|endoftext|>");
  EXPECT_EQ(tok_->token_bytes(tok_->eos_id()), "<|im_end|>");
  EXPECT_FALSE(v.add_bos);
  // Every byte has a token: every byte string round-trips.
  EXPECT_TRUE(adakv::test::unencodable_bytes(*tok_).empty());
}

TEST_F(QwenTokenizer, MatchesGoldens) {
  const auto n = adakv::test::check_tokenizer_goldens(
      *tok_, std::string(ADAKV_TEST_DATA_DIR) + "/tokenizer_goldens_qwen2.jsonl");
  std::cout << "[qwen2 tokenizer goldens] " << n.lines << " lines (" << n.invalid_utf8
            << " invalid UTF-8, " << n.chats << " chat templates): encode matches on "
            << n.encode_ok << ", round trip on " << n.round_trip_ok << "\n";
  RecordProperty("golden_lines", n.lines);
  EXPECT_GE(n.lines, 600);
  EXPECT_GE(n.invalid_utf8, 20);
  EXPECT_GE(n.chats, 5);
  EXPECT_EQ(tok_->chat_template().name, "qwen2.5");
}

// <|im_end|> is the file's end of generation: a chat turn ends on it, and as a token id it
// never enters the text (runtime/engine.cpp stops before decoding it).
TEST_F(QwenTokenizer, ChatTurnsEndOnTheFilesEos) {
  const Ids ids = tok_->encode_chat({{"user", "Hi"}});
  const int32_t start = tok_->encode("<|im_start|>", true).at(0);
  EXPECT_EQ(tok_->encode("<|im_end|>", true), (Ids{tok_->eos_id()}));
  EXPECT_EQ(ids.front(), start);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), tok_->eos_id()), 2);  // system and user turns
  EXPECT_EQ(tok_->decode(ids),
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
            "assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

}  // namespace

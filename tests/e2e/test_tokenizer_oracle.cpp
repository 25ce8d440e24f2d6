// The tokenizer of the default model against committed oracle goldens
// (tests/data/tokenizer_goldens.jsonl, written by tests/tools/gen_tokenizer_goldens.py).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "model/gguf/gguf.h"
#include "model/tokenizer/byte_unicode.h"
#include "model/tokenizer/tokenizer.h"
#include "tests/e2e/tokenizer_goldens.h"

namespace {

using adakv::tokenizer::Tokenizer;

std::string model_path() {
  if (const char* m = std::getenv("ADAKV_MODEL"); m != nullptr && *m != '\0') return m;
  std::string home;
  if (const char* h = std::getenv("ADAKV_HOME"); h != nullptr && *h != '\0') {
    home = h;
  } else {
    const char* user_home = std::getenv("HOME");
    home = std::string(user_home != nullptr ? user_home : "") + "/.cache/adakv";
  }
  return home + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

// The model file and its tokenizer, loaded once for all tests here.
class TokenizerOracle : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string path = model_path();
    if (!std::filesystem::exists(path)) {
      error_ = "model file not found: " + path +
               " (set ADAKV_MODEL, or ADAKV_HOME; the setup fetches the default model into "
               "$ADAKV_HOME/models)";
      return;
    }
    try {
      file_ = std::make_unique<adakv::gguf::GgufFile>(adakv::gguf::GgufFile::open(path));
      tok_ = std::make_unique<Tokenizer>(adakv::tokenizer::vocab_from_gguf(*file_));
    } catch (const std::exception& e) {
      error_ = "cannot load the tokenizer of " + path + ": " + e.what();
    }
  }
  static void TearDownTestSuite() {
    tok_.reset();
    file_.reset();
  }
  void SetUp() override { ASSERT_NE(tok_, nullptr) << error_; }

  static std::unique_ptr<adakv::gguf::GgufFile> file_;
  static std::unique_ptr<Tokenizer> tok_;
  static std::string error_;
};

std::unique_ptr<adakv::gguf::GgufFile> TokenizerOracle::file_;
std::unique_ptr<Tokenizer> TokenizerOracle::tok_;
std::string TokenizerOracle::error_;

using adakv::test::unencodable_bytes;

TEST_F(TokenizerOracle, VocabularyMetadata) {
  const auto& v = tok_->vocab();
  EXPECT_EQ(tok_->vocab_size(), 49152u);
  EXPECT_EQ(v.merges.size(), 48900u);
  EXPECT_EQ(v.pre, "smollm");
  EXPECT_EQ(tok_->bos_id(), 1);
  EXPECT_EQ(tok_->eos_id(), 2);
  EXPECT_EQ(v.pad_id, 2);
  EXPECT_FALSE(v.add_bos);
  for (int32_t id = 0; id <= 16; ++id) EXPECT_TRUE(tok_->is_control(id)) << id;
  EXPECT_FALSE(tok_->is_control(17));
  EXPECT_EQ(tok_->token_bytes(1), "<|im_start|>");
  EXPECT_EQ(tok_->token_bytes(198), "\n");
  // 21 bytes have no token in SmolLM2's vocabulary (0x04 ... 0xFF); the golden script and the
  // round-trip check below depend on exactly this set.
  const std::set<unsigned char> expected = {0x04, 0x06, 0x13, 0x14, 0x16, 0x1D, 0xC0,
                                            0xC1, 0xF1, 0xF2, 0xF5, 0xF6, 0xF7, 0xF8,
                                            0xF9, 0xFA, 0xFB, 0xFC, 0xFD, 0xFE, 0xFF};
  EXPECT_EQ(unencodable_bytes(*tok_), expected);
}

TEST_F(TokenizerOracle, SmokeIds) {
  EXPECT_EQ(tok_->encode("The capital of France is"),
            (std::vector<int32_t>{504, 3575, 282, 4649, 314}));
  EXPECT_EQ(tok_->encode("\n"), (std::vector<int32_t>{198}));
}

TEST_F(TokenizerOracle, MatchesGoldens) {
  const auto n = adakv::test::check_tokenizer_goldens(
      *tok_, std::string(ADAKV_TEST_DATA_DIR) + "/tokenizer_goldens.jsonl");
  std::cout << "[tokenizer goldens] " << n.lines << " lines (" << n.invalid_utf8
            << " invalid UTF-8, " << n.chats << " chat templates): encode matches on "
            << n.encode_ok << ", round trip on " << n.round_trip_ok << "\n";
  RecordProperty("golden_lines", n.lines);
  EXPECT_GE(n.lines, 300);
  EXPECT_GE(n.invalid_utf8, 20);
  EXPECT_GE(n.chats, 5);
  // The template the goldens' chat lines were rendered with is the one recognised in the file.
  EXPECT_EQ(tok_->chat_template().name, "smollm2");
}

TEST_F(TokenizerOracle, ChatTemplateIsTheModels) {
  // apply_chat_template implements exactly this Jinja template; a different one here means the
  // model changed and the C++ template must follow.
  const std::string expected =
      "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
      "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
      "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
      "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
      "{{ '<|im_start|>assistant\n' }}{% endif %}";
  EXPECT_EQ(file_->get_string("tokenizer.chat_template"), expected);
}

TEST_F(TokenizerOracle, StreamDecoderRebuildsText) {
  const std::string text = "Zoë says 你好 👨‍👩‍👧 🇫🇷 — ok.\n";
  const std::vector<int32_t> ids = tok_->encode(text);
  adakv::tokenizer::StreamDecoder dec(*tok_);
  std::string out;
  for (int32_t id : ids) {
    const std::string piece = dec.push(id);
    // Every emitted piece ends on a character boundary.
    EXPECT_EQ(adakv::tokenizer::utf8_complete_prefix(piece), piece.size());
    out += piece;
  }
  out += dec.flush();
  EXPECT_EQ(out, text);
}

TEST_F(TokenizerOracle, LongPromptTiming) {
  // About 8000 tokens of mixed text; the time is printed, not asserted (timings do not belong in
  // assertions), but it should be far below 100 ms.
  std::string unit =
      "Ada-KV gives each attention head its own budget of cached tokens. In 2024, it saved "
      "1.5x memory at equal quality; see https://arxiv.org/abs/2407.11550 (Table 3).\n"
      "def f(x):\n    return {'k': [x, 3.14159]}  # 東京 🗼 café\n\n";
  std::string text;
  while (tok_->encode(text).size() < 8000) text += unit;
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<int32_t> ids = tok_->encode(text);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "[tokenizer timing] " << ids.size() << " tokens (" << text.size()
            << " bytes) encoded in " << ms << " ms\n";
  RecordProperty("encode_8k_ms", std::to_string(ms));
  EXPECT_EQ(tok_->decode(ids), text);
}

}  // namespace

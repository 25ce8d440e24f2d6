// Mistral 7B v0.1's SentencePiece vocabulary (tokenizer.ggml.model "llama", 32,000 tokens with
// byte fallback) against the goldens of the sentencepiece library
// (tests/data/tokenizer_goldens_spm.jsonl, written by tests/tools/gen_spm_goldens.py). The
// vocabulary GGUF is not committed: `cluster/setup-node.sh model mistral-spm-vocab` makes it
// from the tokenizer.model in the PyPI package mistral_common. Skipped, saying why, without it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/gguf/gguf.h"
#include "model/tokenizer/tokenizer.h"
#include "tests/e2e/tokenizer_goldens.h"

namespace {

using adakv::tokenizer::Tokenizer;
using Ids = std::vector<int32_t>;

std::string vocab_path() {
  if (const char* env = std::getenv("ADAKV_SPM_VOCAB"); env && *env) return env;
  const char* home = std::getenv("ADAKV_HOME");
  const std::string base =
      home && *home ? home
                    : std::string(std::getenv("HOME") ? std::getenv("HOME") : "") + "/.cache/adakv";
  return base + "/models/mistral-v0.1-spm-vocab.gguf";
}

class SpmOracle : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(vocab_path())) {
      GTEST_SKIP() << "the SentencePiece vocabulary is not at " << vocab_path()
                   << " (make it with `bash cluster/setup-node.sh model mistral-spm-vocab`, or "
                      "set ADAKV_SPM_VOCAB)";
    }
    const auto file = adakv::gguf::GgufFile::open(vocab_path());
    tok_ = std::make_unique<Tokenizer>(adakv::tokenizer::vocab_from_gguf(file));
  }
  std::unique_ptr<Tokenizer> tok_;
};

TEST_F(SpmOracle, VocabularyMetadata) {
  const auto& v = tok_->vocab();
  EXPECT_EQ(v.model, "llama");
  EXPECT_EQ(tok_->vocab_size(), 32000u);
  EXPECT_EQ(tok_->token_bytes(tok_->bos_id()), "<s>");
  EXPECT_EQ(tok_->token_bytes(tok_->eos_id()), "</s>");
  EXPECT_TRUE(v.add_bos);
  EXPECT_TRUE(v.add_space_prefix);
}

// Every golden line: the ids of sentencepiece (BOS first), and decode of the ids after BOS
// giving the text back wherever sentencepiece's own decode does.
TEST_F(SpmOracle, MatchesGoldens) {
  const std::string path = std::string(ADAKV_TEST_DATA_DIR) + "/tokenizer_goldens_spm.jsonl";
  std::ifstream in(path);
  ASSERT_TRUE(in) << "cannot read " << path;
  int lines = 0, encode_ok = 0, round_trips = 0, round_trip_ok = 0;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    ++lines;
    const auto j = nlohmann::json::parse(line);
    const std::string text = adakv::test::base64_decode(j.at("text_b64").get<std::string>());
    const auto expected = j.at("ids").get<Ids>();
    SCOPED_TRACE("line " + std::to_string(lines) + ": \"" + adakv::test::printable(text) + "\"");
    const Ids ids = tok_->encode(text, j.at("parse_special").get<bool>());
    EXPECT_EQ(ids, expected);
    encode_ok += ids == expected;
    if (j.at("round_trip").get<bool>() && !ids.empty()) {
      ++round_trips;
      const std::string back = tok_->decode(Ids(ids.begin() + 1, ids.end()));
      EXPECT_EQ(adakv::test::printable(back), adakv::test::printable(text));
      round_trip_ok += back == text;
    }
  }
  std::cout << "[spm tokenizer goldens] " << lines << " lines: encode matches on " << encode_ok
            << ", round trip on " << round_trip_ok << " of " << round_trips << "\n";
  EXPECT_GE(lines, 300);
}

}  // namespace

// adakv's tokenizer built from adakv::hf::tokenizer_metadata of Hugging Face tokenizer
// directories against HF `tokenizers` on the same tokenizer.json
// (tests/data/tokenizer_goldens_hf_<name>.jsonl, written by
// tests/tools/gen_hf_tokenizer_goldens.py): SmolLM2 and Qwen2.5 (made from their GGUFs, so the
// metadata must also equal the GGUF's), Llama 3.1 (tiktoken vocabulary) and Mistral 7B v0.1
// (SentencePiece vocabulary). The directories are not committed:
// `cluster/setup-node.sh model hf-tokenizers` makes them in $ADAKV_HOME/models/hf-tokenizers
// (or set ADAKV_HF_TOKENIZERS); each test is skipped, saying why, without its directory.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/gguf/gguf.h"
#include "model/gguf/writer.h"
#include "model/hf/hf_tokenizer.h"
#include "model/tokenizer/tokenizer.h"
#include "tests/e2e/tokenizer_goldens.h"

namespace {

using adakv::gguf::GgufFile;
using adakv::tokenizer::Tokenizer;
using Ids = std::vector<int32_t>;

std::string adakv_home() {
  const char* home = std::getenv("ADAKV_HOME");
  if (home && *home) return home;
  return std::string(std::getenv("HOME") ? std::getenv("HOME") : "") + "/.cache/adakv";
}

std::string tokenizers_dir() {
  if (const char* env = std::getenv("ADAKV_HF_TOKENIZERS"); env && *env) return env;
  return adakv_home() + "/models/hf-tokenizers";
}

// The metadata in a GgufFile, as the HF checkpoint loader hands it to vocab_from_gguf.
GgufFile metadata_file(const std::string& dir) {
  adakv::gguf::GgufWriter w;
  for (const auto& [key, value] : adakv::hf::tokenizer_metadata(dir)) w.add(key, value);
  const std::vector<uint8_t> bytes = w.bytes();
  return GgufFile::parse(bytes.data(), bytes.size(), dir);
}

#define SKIP_WITHOUT(path)                                                         \
  if (!std::filesystem::exists(path)) {                                            \
    GTEST_SKIP() << path                                                           \
                 << " is missing (make it with `bash cluster/setup-node.sh model " \
                    "hf-tokenizers`, or set ADAKV_HF_TOKENIZERS)";                 \
  }

// tokens, merges and token types as the GGUF the directory was made from has them.
void expect_metadata_of_gguf(const std::string& name, const std::string& gguf_name,
                             const std::string& pre) {
  const std::string dir = tokenizers_dir() + "/" + name;
  const std::string gguf_path = adakv_home() + "/models/" + gguf_name;
  SKIP_WITHOUT(dir);
  SKIP_WITHOUT(gguf_path);
  const GgufFile ours = metadata_file(dir);
  const GgufFile theirs = GgufFile::open(gguf_path);
  EXPECT_EQ(ours.get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(ours.get_string("tokenizer.ggml.pre"), pre);
  EXPECT_EQ(ours.get_string_array("tokenizer.ggml.tokens"),
            theirs.get_string_array("tokenizer.ggml.tokens"));
  EXPECT_EQ(ours.get_string_array("tokenizer.ggml.merges"),
            theirs.get_string_array("tokenizer.ggml.merges"));
  EXPECT_EQ(ours.get_int_array("tokenizer.ggml.token_type"),
            theirs.get_int_array("tokenizer.ggml.token_type"));
  for (const char* key : {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                          "tokenizer.ggml.padding_token_id", "tokenizer.ggml.unknown_token_id"}) {
    EXPECT_EQ(ours.get_int(key, -1), theirs.get_int(key, -1)) << key;
  }
  EXPECT_EQ(ours.get_bool("tokenizer.ggml.add_bos_token", false),
            theirs.get_bool("tokenizer.ggml.add_bos_token", false));
  EXPECT_EQ(ours.get_string("tokenizer.chat_template", ""),
            theirs.get_string("tokenizer.chat_template", ""));
}

TEST(HfTokenizerMetadata, SmolLM2EqualsItsGguf) {
  expect_metadata_of_gguf("smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "smollm");
}

TEST(HfTokenizerMetadata, Qwen25EqualsItsGguf) {
  expect_metadata_of_gguf("qwen2.5", "Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf", "qwen2");
}

struct Agreement {
  int lines = 0;
  int hf = 0;             // ids equal to HF tokenizers'
  int plain = 0;          // lines with special tokens not parsed
  int sentencepiece = 0;  // of those, ids equal to sentencepiece's (Mistral only)
  int round_trips = 0;    // decode gave the text back (after a BOS)
};

// Encodes every golden line; failures of `expect_hf` lines are gtest failures.
Agreement run_goldens(const Tokenizer& tok, const std::string& name, bool expect_hf) {
  const std::string path =
      std::string(ADAKV_TEST_DATA_DIR) + "/tokenizer_goldens_hf_" + name + ".jsonl";
  std::ifstream in(path);
  EXPECT_TRUE(in) << "cannot read " << path;
  Agreement a;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    ++a.lines;
    const auto j = nlohmann::json::parse(line);
    const std::string text = adakv::test::base64_decode(j.at("text_b64").get<std::string>());
    const bool parse_special = j.at("parse_special").get<bool>();
    const auto expected = j.at("ids").get<Ids>();
    SCOPED_TRACE(name + " line " + std::to_string(a.lines) + ": \"" + adakv::test::printable(text) +
                 "\"");
    const Ids ids = tok.encode(text, parse_special);
    if (expect_hf) {
      EXPECT_EQ(ids, expected);
    } else if (ids != expected) {
      std::cout << "[hf tokenizer goldens] " << name << " differs from HF on line " << a.lines
                << ": \"" << adakv::test::printable(text) << "\"\n";
    }
    a.hf += ids == expected;
    const auto sp = j.contains("sentencepiece_ids") ? j["sentencepiece_ids"].get<Ids>() : expected;
    a.plain += !parse_special;
    a.sentencepiece += !parse_special && ids == sp;
    Ids body = ids;
    if (!body.empty() && tok.vocab().add_bos && body.front() == tok.bos_id()) {
      body.erase(body.begin());
    }
    a.round_trips += tok.decode(body) == text;
  }
  std::cout << "[hf tokenizer goldens] " << name << ": " << a.lines << " lines, ids equal to HF "
            << "tokenizers' on " << a.hf;
  if (name == "mistral") {
    std::cout << ", to sentencepiece's on " << a.sentencepiece << " of " << a.plain;
  }
  std::cout << ", decode round-trips on " << a.round_trips << "\n";
  return a;
}

class HfTokenizerOracle : public ::testing::TestWithParam<const char*> {};

TEST_P(HfTokenizerOracle, IdsEqualHfTokenizers) {
  const std::string name = GetParam();
  const std::string dir = tokenizers_dir() + "/" + name;
  SKIP_WITHOUT(dir);
  const Tokenizer tok(adakv::tokenizer::vocab_from_gguf(metadata_file(dir)));
  const Agreement a = run_goldens(tok, name, true);
  EXPECT_GE(a.lines, 300);
  EXPECT_EQ(a.hf, a.lines);
}

INSTANTIATE_TEST_SUITE_P(ByteLevelBpe, HfTokenizerOracle,
                         ::testing::Values("smollm2", "qwen2.5", "llama3"), [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return n;
                         });

TEST(HfTokenizerOracleLlama3, Metadata) {
  const std::string dir = tokenizers_dir() + "/llama3";
  SKIP_WITHOUT(dir);
  const GgufFile f = metadata_file(dir);
  EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(f.get_string("tokenizer.ggml.pre"), "llama-bpe");
  EXPECT_EQ(f.get_string_array("tokenizer.ggml.tokens").size(), 128256u);
  EXPECT_EQ(f.get_int("tokenizer.ggml.bos_token_id"), 128000);
  EXPECT_EQ(f.get_int("tokenizer.ggml.eos_token_id"), 128009);
  EXPECT_TRUE(f.get_bool("tokenizer.ggml.add_bos_token", false));
  EXPECT_EQ(f.get_int_array("tokenizer.ggml.token_type")[128009], 3);
}

// The byte-fallback tokenizer.json made from Mistral's tokenizer.model against the vocabulary
// GGUF made from the same file (`cluster/setup-node.sh model mistral-spm-vocab`): the same
// tokens and types, and scores that order the tokens some merge makes as sentencepiece's scores
// do (higher first, ties by id).
TEST(HfTokenizerOracleMistral, MetadataMatchesTheSentencePieceGguf) {
  const std::string dir = tokenizers_dir() + "/mistral";
  const std::string gguf_path = adakv_home() + "/models/mistral-v0.1-spm-vocab.gguf";
  SKIP_WITHOUT(dir);
  SKIP_WITHOUT(gguf_path);
  const GgufFile ours = metadata_file(dir);
  const GgufFile theirs = GgufFile::open(gguf_path);
  const auto tokens = ours.get_string_array("tokenizer.ggml.tokens");
  EXPECT_EQ(tokens, theirs.get_string_array("tokenizer.ggml.tokens"));
  EXPECT_EQ(ours.get_int_array("tokenizer.ggml.token_type"),
            theirs.get_int_array("tokenizer.ggml.token_type"));
  const auto score = ours.get_float_array("tokenizer.ggml.scores");
  const auto sp_score = theirs.get_float_array("tokenizer.ggml.scores");
  ASSERT_EQ(score.size(), sp_score.size());
  std::vector<size_t> made;
  for (size_t i = 0; i < score.size(); ++i) {
    if (score[i] > -1e8) made.push_back(i);
  }
  auto by = [](const std::vector<double>& s) {
    return [&s](size_t a, size_t b) { return s[a] != s[b] ? s[a] > s[b] : a < b; };
  };
  std::vector<size_t> ours_order = made, sp_order = made;
  std::sort(ours_order.begin(), ours_order.end(), by(score));
  std::sort(sp_order.begin(), sp_order.end(), by(sp_score));
  EXPECT_GT(made.size(), 28000u);
  EXPECT_EQ(ours_order, sp_order);
}

// Mistral's byte-fallback BPE: sentencepiece is the reference (the goldens carry its ids where
// HF's fast tokenizer differs: on runs of spaces when the merges are in id order, on no line with
// the score-ordered merges of the setup's tokenizer.json). adakv (scores from the merges' ranks)
// must equal both.
TEST(HfTokenizerOracleMistral, AgreesWithHfAndSentencepiece) {
  const std::string dir = tokenizers_dir() + "/mistral";
  SKIP_WITHOUT(dir);
  const GgufFile f = metadata_file(dir);
  EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "llama");
  EXPECT_TRUE(f.get_bool("tokenizer.ggml.add_space_prefix", false));
  EXPECT_TRUE(f.get_bool("tokenizer.ggml.add_bos_token", false));
  EXPECT_EQ(f.get_int("tokenizer.ggml.unknown_token_id"), 0);
  EXPECT_EQ(f.get_int("tokenizer.ggml.bos_token_id"), 1);
  EXPECT_EQ(f.get_int("tokenizer.ggml.eos_token_id"), 2);
  const Tokenizer tok(adakv::tokenizer::vocab_from_gguf(f));
  const Agreement a = run_goldens(tok, "mistral", false);
  EXPECT_GE(a.lines, 300);
  EXPECT_EQ(a.hf, a.lines);
  EXPECT_EQ(a.sentencepiece, a.plain);
}

}  // namespace

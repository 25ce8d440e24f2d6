// adakv::hf::tokenizer_metadata on small hand-written tokenizer.json files: the GGUF metadata
// of a byte-level BPE and of a SentencePiece-style (byte-fallback) BPE, what the pre-tokenizer
// section maps to, special tokens and chat templates, and the errors naming file and field.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/gguf/gguf.h"
#include "model/gguf/writer.h"
#include "model/hf/hf_tokenizer.h"
#include "model/tokenizer/pretokenizer.h"
#include "model/tokenizer/tokenizer.h"

namespace {

using nlohmann::json;
namespace fs = std::filesystem;
using adakv::gguf::GgufFile;
using adakv::tokenizer::Tokenizer;

const std::string kSpace = "\xE2\x96\x81";  // U+2581

class HfTokenizerDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("adakv_hf_tok_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  void write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name, std::ios::binary) << text;
  }
  void write(const std::string& name, const json& j) { write(name, j.dump()); }

  // The metadata as a GgufFile, the way the checkpoint loader hands it to vocab_from_gguf.
  GgufFile gguf() {
    adakv::gguf::GgufWriter w;
    for (const auto& [key, value] : adakv::hf::tokenizer_metadata(dir_.string())) w.add(key, value);
    const std::vector<uint8_t> bytes = w.bytes();
    return GgufFile::parse(bytes.data(), bytes.size());
  }

  std::string error() {
    try {
      adakv::hf::tokenizer_metadata(dir_.string());
    } catch (const std::runtime_error& e) {
      return e.what();
    }
    return "(no error)";
  }

  fs::path dir_;
};

json byte_level_tokenizer() {
  return {
      {"model",
       {{"type", "BPE"},
        {"byte_fallback", false},
        {"vocab",
         {{"a", 0},
          {"b", 1},
          {"ab", 2},
          {"\xC4\xA0", 3},
          {"\xC4\xA0"
           "ab",
           6}}},
        {"merges", json::array({json::array({"a", "b"}), json::array({"\xC4\xA0", "ab"})})}}},
      {"added_tokens", json::array({{{"id", 4}, {"content", "<|endoftext|>"}, {"special", true}},
                                    {{"id", 5}, {"content", "<tool>"}, {"special", false}},
                                    {{"id", 7}, {"content", "<|fim|>"}, {"special", false}}})},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"post_processor", {{"type", "ByteLevel"}}},
  };
}

TEST_F(HfTokenizerDir, ByteLevelBpe) {
  write("tokenizer.json", byte_level_tokenizer());
  write("tokenizer_config.json", json{{"bos_token", {{"content", "<|endoftext|>"}}},
                                      {"eos_token", "<|endoftext|>"},
                                      {"add_bos_token", false},
                                      {"chat_template", "{{ messages }}"}});
  write("config.json", json{{"vocab_size", 10}});
  const GgufFile f = gguf();
  EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(f.get_string("tokenizer.ggml.pre"), "gpt-2");
  const std::vector<std::string> tokens = {"a",
                                           "b",
                                           "ab",
                                           "\xC4\xA0",
                                           "<|endoftext|>",
                                           "<tool>",
                                           "\xC4\xA0"
                                           "ab",
                                           "<|fim|>",
                                           "[PAD8]",
                                           "[PAD9]"};
  EXPECT_EQ(f.get_string_array("tokenizer.ggml.tokens"), tokens);
  // Special -> control; added but not special -> user-defined, unless it looks special.
  EXPECT_EQ(f.get_int_array("tokenizer.ggml.token_type"),
            (std::vector<int64_t>{1, 1, 1, 1, 3, 4, 1, 3, 5, 5}));
  EXPECT_EQ(f.get_string_array("tokenizer.ggml.merges"),
            (std::vector<std::string>{"a b", "\xC4\xA0 ab"}));
  EXPECT_EQ(f.get_int("tokenizer.ggml.bos_token_id"), 4);
  EXPECT_EQ(f.get_int("tokenizer.ggml.eos_token_id"), 4);
  EXPECT_FALSE(f.get_bool("tokenizer.ggml.add_bos_token", true));
  EXPECT_EQ(f.get_string("tokenizer.chat_template"), "{{ messages }}");

  const Tokenizer tok(adakv::tokenizer::vocab_from_gguf(f));
  EXPECT_EQ(tok.encode("ab ab<tool>"), (std::vector<int32_t>{2, 6, 5}));
  EXPECT_EQ(tok.encode("<|endoftext|>ab", true), (std::vector<int32_t>{4, 2}));
}

TEST_F(HfTokenizerDir, MergesAsStringsAndSpacesInsidePairs) {
  json t = byte_level_tokenizer();
  t["model"]["merges"] = json::array({"a b", json::array({"a b", "ab"})});
  write("tokenizer.json", t);
  EXPECT_EQ(gguf().get_string_array("tokenizer.ggml.merges"), (std::vector<std::string>{"a b",
                                                                                        "a\xC4\xA0"
                                                                                        "b ab"}));
}

TEST_F(HfTokenizerDir, PreTokenizerNames) {
  auto split_then_byte_level = [](const std::string& pattern) {
    return json{
        {"type", "Sequence"},
        {"pretokenizers",
         json::array(
             {{{"type", "Split"},
               {"pattern", {{"Regex", pattern}}},
               {"behavior", "Isolated"},
               {"invert", false}},
              {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}};
  };
  const std::string llama3 =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  const std::string qwen2 =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  const json smollm = {
      {"type", "Sequence"},
      {"pretokenizers",
       json::array({{{"type", "Digits"}, {"individual_digits", true}},
                    {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}})}};
  const std::vector<std::pair<json, std::string>> cases = {
      {split_then_byte_level(llama3), "llama-bpe"},
      {split_then_byte_level(qwen2), "qwen2"},
      {smollm, "smollm"},
  };
  for (const auto& [pre, name] : cases) {
    json t = byte_level_tokenizer();
    t["pre_tokenizer"] = pre;
    write("tokenizer.json", t);
    EXPECT_EQ(gguf().get_string("tokenizer.ggml.pre"), name);
  }
}

// Llama 3 (pre "llama-bpe") takes a piece that is a token whole, as its ignore_merges says;
// with the GPT-2 pre-tokenizer the merges decide.
TEST_F(HfTokenizerDir, Llama3IgnoresMergesForWholeTokens) {
  json t = byte_level_tokenizer();
  t["model"]["vocab"] = {{"a", 0}, {"b", 1}, {"c", 2}, {"bc", 3}, {"abc", 4}};
  t["model"]["merges"] = json::array({"b c"});
  t["model"]["ignore_merges"] = true;
  t["added_tokens"] = json::array();
  write("tokenizer.json", t);
  std::string e = error();
  EXPECT_NE(e.find("tokenizer.json: model.ignore_merges is true with the pre-tokenizer 'gpt-2'"),
            std::string::npos)
      << e;
  t["model"]["ignore_merges"] = false;
  write("tokenizer.json", t);
  EXPECT_EQ(Tokenizer(adakv::tokenizer::vocab_from_gguf(gguf())).encode("abc"),
            (std::vector<int32_t>{0, 3}));
  t["model"]["ignore_merges"] = true;
  t["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       json::array(
           {{{"type", "Split"},
             {"pattern",
              {{"Regex",
                R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}}},
             {"behavior", "Isolated"},
             {"invert", false}},
            {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}};
  write("tokenizer.json", t);
  EXPECT_EQ(Tokenizer(adakv::tokenizer::vocab_from_gguf(gguf())).encode("abc"),
            (std::vector<int32_t>{4}));
}

// HF tokenizers' Split with Llama 3's pattern gives "a", "'\u017F", "x": the contractions match
// caselessly in the Unicode sense (long s is s).
TEST(HfLlama3Pattern, LongSIsAContraction) {
  std::vector<std::string_view> pieces;
  adakv::tokenizer::PreTokenizer("llama-bpe").split("a'\xC5\xBFx IT'S", pieces);
  EXPECT_EQ(pieces, (std::vector<std::string_view>{"a", "'\xC5\xBF", "x", " IT", "'S"}));
}

TEST_F(HfTokenizerDir, UnrecognisedSplitPatternIsAnErrorQuotingIt) {
  json t = byte_level_tokenizer();
  t["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers", json::array({{{"type", "Split"},
                                      {"pattern", {{"Regex", R"(\p{L}+|\s+)"}}},
                                      {"behavior", "Isolated"},
                                      {"invert", false}},
                                     {{"type", "ByteLevel"}, {"use_regex", false}}})}};
  write("tokenizer.json", t);
  const std::string e = error();
  EXPECT_NE(e.find("tokenizer.json"), std::string::npos) << e;
  EXPECT_NE(e.find(R"(Split pattern '\p{L}+|\s+')"), std::string::npos) << e;
}

TEST_F(HfTokenizerDir, Errors) {
  write("tokenizer.json", std::string("{\"model\": "));
  std::string e = error();
  EXPECT_NE(e.find("tokenizer.json: not valid JSON"), std::string::npos) << e;

  json t = byte_level_tokenizer();
  t["model"]["type"] = "WordPiece";
  write("tokenizer.json", t);
  e = error();
  EXPECT_NE(e.find("model.type 'WordPiece'"), std::string::npos) << e;
  t["model"]["type"] = "Unigram";
  write("tokenizer.json", t);
  e = error();
  EXPECT_NE(e.find("model.type 'Unigram'"), std::string::npos) << e;

  write("tokenizer.json", byte_level_tokenizer());
  write("tokenizer_config.json", json{{"bos_token", "<s>"}});
  e = error();
  EXPECT_NE(e.find("tokenizer_config.json: bos_token '<s>' is not a token"), std::string::npos)
      << e;

  fs::remove(dir_ / "tokenizer.json");
  e = error();
  EXPECT_NE(e.find("tokenizer.json: cannot open"), std::string::npos) << e;
}

TEST_F(HfTokenizerDir, ChatTemplateListTakesDefault) {
  write("tokenizer.json", byte_level_tokenizer());
  write("tokenizer_config.json",
        json{{"chat_template", json::array({{{"name", "tool_use"}, {"template", "T"}},
                                            {{"name", "default"}, {"template", "D"}}})}});
  const GgufFile f = gguf();
  EXPECT_EQ(f.get_string("tokenizer.chat_template"), "D");
  EXPECT_EQ(f.get_string("tokenizer.chat_template.tool_use"), "T");
}

TEST_F(HfTokenizerDir, ChatTemplateFromJinjaFile) {
  write("tokenizer.json", byte_level_tokenizer());
  write("chat_template.jinja", std::string("{{ bos_token }}"));
  EXPECT_EQ(gguf().get_string("tokenizer.chat_template"), "{{ bos_token }}");
}

// A Llama 2 / Mistral style tokenizer.json: byte fallback, "▁" for spaces, merges made from the
// SentencePiece scores.
json spm_tokenizer() {
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    vocab[name] = 3 + b;
  }
  int id = 259;
  for (const std::string t : {kSpace, std::string("a"), std::string("b"), kSpace + "a",
                              std::string("ab"), kSpace + "ab"}) {
    vocab[t] = id++;
  }
  return {
      {"model",
       {{"type", "BPE"},
        {"byte_fallback", true},
        {"unk_token", "<unk>"},
        {"vocab", vocab},
        {"merges", json::array({kSpace + " a", "a b", kSpace + "a b", kSpace + " ab"})}}},
      {"added_tokens", json::array({{{"id", 0}, {"content", "<unk>"}, {"special", true}},
                                    {{"id", 1}, {"content", "<s>"}, {"special", true}},
                                    {{"id", 2}, {"content", "</s>"}, {"special", true}}})},
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers",
         json::array(
             {{{"type", "Prepend"}, {"prepend", kSpace}},
              {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kSpace}}})}}},
      {"pre_tokenizer", nullptr},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                                {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})}}},
  };
}

TEST_F(HfTokenizerDir, SentencePieceStyleBpe) {
  write("tokenizer.json", spm_tokenizer());
  write("tokenizer_config.json", json{{"bos_token", "<s>"}, {"eos_token", "</s>"}});
  const GgufFile f = gguf();
  EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "llama");
  EXPECT_TRUE(f.get_bool("tokenizer.ggml.add_space_prefix", false));
  EXPECT_TRUE(f.get_bool("tokenizer.ggml.add_bos_token", false));
  EXPECT_EQ(f.get_int("tokenizer.ggml.unknown_token_id"), 0);
  EXPECT_EQ(f.get_int("tokenizer.ggml.bos_token_id"), 1);
  EXPECT_EQ(f.get_int("tokenizer.ggml.eos_token_id"), 2);
  const auto types = f.get_int_array("tokenizer.ggml.token_type");
  EXPECT_EQ(types[0], 2);
  EXPECT_EQ(types[1], 3);
  EXPECT_EQ(types[3 + 0x41], 6);
  EXPECT_EQ(types[259], 1);
  // Made by merge r: -r; not made by a merge: lowest.
  const auto scores = f.get_float_array("tokenizer.ggml.scores");
  EXPECT_EQ(scores[262], 0);   // ▁a, merge 0
  EXPECT_EQ(scores[263], -1);  // ab, merge 1
  EXPECT_EQ(scores[264], -2);  // ▁ab, merge 2 (merge 3 makes it too)
  EXPECT_LT(scores[260], -1e8);

  const Tokenizer tok(adakv::tokenizer::vocab_from_gguf(f));
  // "▁ab" merges ▁+a first (rank 0), then ▁a+b.
  EXPECT_EQ(tok.encode("ab b"), (std::vector<int32_t>{1, 264, 259, 261}));
  EXPECT_EQ(tok.encode("\xC3\xA9"), (std::vector<int32_t>{1, 259, 3 + 0xC3, 3 + 0xA9}));
  // The unknown token written in the text is that token when special tokens are parsed.
  EXPECT_EQ(tok.encode("<unk>", true), (std::vector<int32_t>{1, 0}));
}

TEST_F(HfTokenizerDir, MetaspaceDecidesTheSpacePrefix) {
  json t = spm_tokenizer();
  t["normalizer"] = nullptr;
  t["pre_tokenizer"] = {{"type", "Metaspace"},
                        {"replacement", kSpace},
                        {"prepend_scheme", "never"},
                        {"split", false}};
  write("tokenizer.json", t);
  EXPECT_FALSE(gguf().get_bool("tokenizer.ggml.add_space_prefix", true));
  t["pre_tokenizer"]["prepend_scheme"] = "first";
  write("tokenizer.json", t);
  EXPECT_TRUE(gguf().get_bool("tokenizer.ggml.add_space_prefix", false));
}

TEST_F(HfTokenizerDir, ByteFallbackWithoutSpaceHandlingIsAnError) {
  json t = spm_tokenizer();
  t["normalizer"] = nullptr;
  write("tokenizer.json", t);
  const std::string e = error();
  EXPECT_NE(e.find("tokenizer.json: neither normalizer nor pre_tokenizer"), std::string::npos) << e;
}

}  // namespace

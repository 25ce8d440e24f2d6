// SentencePiece-style BPE ("llama" vocabularies) on a tiny hand-made vocabulary: no model file.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "model/gguf/gguf.h"
#include "model/gguf/writer.h"
#include "model/tokenizer/tokenizer.h"

namespace {

using adakv::tokenizer::Tokenizer;
using adakv::tokenizer::Vocab;
using Ids = std::vector<int32_t>;

constexpr int32_t kUnk = 0, kBos = 1, kEos = 2, kFirstByte = 3;
const std::string kSp = "\xE2\x96\x81";  // "▁"

// <unk>, <s>, </s>, the 256 byte tokens, then `pieces` (spelling, score) in order.
Vocab make_spm(const std::vector<std::pair<std::string, float>>& pieces, bool bytes = true) {
  Vocab v;
  v.model = "llama";
  v.tokens = {"<unk>", "<s>", "</s>"};
  v.token_types = {2, 3, 3};
  if (bytes) {
    for (int b = 0; b < 256; ++b) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "<0x%02X>", b);
      v.tokens.push_back(buf);
      v.token_types.push_back(6);
    }
  }
  for (const auto& [s, score] : pieces) {
    v.tokens.push_back(s);
    v.token_types.push_back(1);
  }
  v.scores.assign(v.tokens.size(), 0.0f);
  for (size_t i = 0; i < pieces.size(); ++i) {
    v.scores[v.tokens.size() - pieces.size() + i] = pieces[i].second;
  }
  v.unk_id = kUnk;
  v.bos_id = kBos;
  v.eos_id = kEos;
  v.add_space_prefix = false;
  return v;
}

int32_t id_of(const Vocab& v, const std::string& s) {
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    if (v.tokens[i] == s) return static_cast<int32_t>(i);
  }
  ADD_FAILURE() << "no token " << s;
  return -1;
}

TEST(SpmTokenizer, MergesTheHighestScoringPairFirst) {
  // "ab" and "bc" compete for the b: the higher score wins, whichever side it is on.
  Vocab bc_wins = make_spm({{"a", -1}, {"b", -1}, {"c", -1}, {"ab", -5}, {"bc", -2}});
  EXPECT_EQ(Tokenizer(bc_wins).encode("abc"), (Ids{id_of(bc_wins, "a"), id_of(bc_wins, "bc")}));
  Vocab ab_wins = make_spm({{"a", -1}, {"b", -1}, {"c", -1}, {"ab", -2}, {"bc", -5}});
  EXPECT_EQ(Tokenizer(ab_wins).encode("abc"), (Ids{id_of(ab_wins, "ab"), id_of(ab_wins, "c")}));
}

TEST(SpmTokenizer, MergesRepeatUntilNoPairIsAToken) {
  Vocab v = make_spm({{"a", -1}, {"b", -1}, {"c", -1}, {"ab", -5}, {"bc", -2}, {"abc", -9}});
  EXPECT_EQ(Tokenizer(v).encode("abc"), (Ids{id_of(v, "abc")}));
}

TEST(SpmTokenizer, TiesGoToTheLeftmostPair) {
  Vocab v = make_spm({{"a", -1}, {"aa", -2}});
  EXPECT_EQ(Tokenizer(v).encode("aaa"), (Ids{id_of(v, "aa"), id_of(v, "a")}));
}

TEST(SpmTokenizer, SpacesBecomeTheMetaSymbolAndAPrefixIsAdded) {
  Vocab v = make_spm({{kSp, -1}, {"a", -1}, {"b", -1}, {kSp + "a", -2}, {kSp + "b", -2}});
  EXPECT_EQ(Tokenizer(v).encode("a b"), (Ids{id_of(v, "a"), id_of(v, kSp + "b")}));
  v.add_space_prefix = true;
  const Tokenizer tok(v);
  const Ids ids = tok.encode("a b");
  EXPECT_EQ(ids, (Ids{id_of(v, kSp + "a"), id_of(v, kSp + "b")}));
  // The prefix's space is dropped when decoding, as HF does; the spaces of the text are kept.
  EXPECT_EQ(tok.decode(ids), "a b");
  EXPECT_EQ(tok.decode(tok.encode("  a  ")), "  a  ");
  EXPECT_EQ(tok.token_bytes(id_of(v, kSp + "b")), " b");
  EXPECT_EQ(tok.encode(""), Ids{});
}

TEST(SpmTokenizer, UnknownCharactersFallBackToTheirBytes) {
  Vocab v = make_spm({{"a", -1}});
  const Tokenizer tok(v);
  const Ids ids = tok.encode("a\xC3\xA9");  // é is not a token
  EXPECT_EQ(ids, (Ids{id_of(v, "a"), kFirstByte + 0xC3, kFirstByte + 0xA9}));
  EXPECT_EQ(tok.decode(ids), "a\xC3\xA9");
  // Invalid UTF-8 round-trips too: each stray byte is a character of its own.
  EXPECT_EQ(tok.decode(tok.encode("\xFF"
                                  "a\x80")),
            "\xFF"
            "a\x80");
}

TEST(SpmTokenizer, WithoutByteTokensUnknownCharactersAreTheUnknownToken) {
  Vocab v = make_spm({{"a", -1}}, /*bytes=*/false);
  EXPECT_EQ(Tokenizer(v).encode("a\xC3\xA9"), (Ids{id_of(v, "a"), kUnk, kUnk}));
}

TEST(SpmTokenizer, BosAndSpecialTokens) {
  Vocab v = make_spm({{kSp, -1}, {"a", -1}, {kSp + "a", -2}});
  v.add_space_prefix = true;
  v.add_bos = true;
  const Tokenizer tok(v);
  EXPECT_EQ(tok.encode("a"), (Ids{kBos, id_of(v, kSp + "a")}));
  // Text after a special token gets the prefix again, as in llama.cpp.
  EXPECT_EQ(tok.encode("a</s>a", /*parse_special=*/true),
            (Ids{kBos, id_of(v, kSp + "a"), kEos, id_of(v, kSp + "a")}));
  EXPECT_TRUE(tok.is_control(kBos));
}

TEST(SpmTokenizer, VocabFromGgufReadsScoresAndFlags) {
  const Vocab src = make_spm({{kSp, -1}, {"a", -1}, {kSp + "a", -2}});
  adakv::gguf::GgufWriter w;
  w.add_string("general.architecture", "llama");
  w.add_string("tokenizer.ggml.model", "llama");
  w.add_string_array("tokenizer.ggml.tokens", src.tokens);
  w.add_f32_array("tokenizer.ggml.scores", src.scores);
  w.add_i32_array("tokenizer.ggml.token_type", src.token_types);
  w.add_u32("tokenizer.ggml.bos_token_id", kBos);
  w.add_u32("tokenizer.ggml.eos_token_id", kEos);
  w.add_u32("tokenizer.ggml.unknown_token_id", kUnk);
  const auto bytes = w.bytes();
  const auto file = adakv::gguf::GgufFile::parse(bytes.data(), bytes.size());
  const Vocab v = adakv::tokenizer::vocab_from_gguf(file);
  EXPECT_EQ(v.model, "llama");
  EXPECT_EQ(v.scores, src.scores);
  EXPECT_EQ(v.unk_id, kUnk);
  EXPECT_TRUE(v.add_bos);           // llama.cpp's default for SentencePiece files
  EXPECT_TRUE(v.add_space_prefix);  // and sentencepiece's
  EXPECT_EQ(Tokenizer(v).encode("a"), (Ids{kBos, id_of(v, kSp + "a")}));
}

TEST(SpmTokenizer, VocabFromGgufNeedsScores) {
  adakv::gguf::GgufWriter w;
  w.add_string("general.architecture", "llama");
  w.add_string("tokenizer.ggml.model", "llama");
  w.add_string_array("tokenizer.ggml.tokens", {"<unk>", "a"});
  const auto bytes = w.bytes();
  const auto file = adakv::gguf::GgufFile::parse(bytes.data(), bytes.size());
  EXPECT_THROW(adakv::tokenizer::vocab_from_gguf(file), std::runtime_error);
}

}  // namespace

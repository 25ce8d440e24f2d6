// Tokenizer on small synthetic vocabularies: no model file needed.
#include <gtest/gtest.h>

#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/gguf/gguf.h"
#include "model/gguf/writer.h"
#include "model/tokenizer/byte_unicode.h"
#include "model/tokenizer/pretokenizer.h"
#include "model/tokenizer/tokenizer.h"

namespace {

using adakv::tokenizer::bytes_to_unicode;
using adakv::tokenizer::PreTokenizer;
using adakv::tokenizer::StreamDecoder;
using adakv::tokenizer::Tokenizer;
using adakv::tokenizer::Vocab;
using Ids = std::vector<int32_t>;

// All 256 byte tokens (id = byte value), then the merge results in the order given, then the
// control tokens. Merges are written in raw bytes and spelled here.
Vocab make_vocab(const std::vector<std::pair<std::string, std::string>>& merges,
                 const std::string& pre = "smollm") {
  Vocab v;
  for (int b = 0; b < 256; ++b) {
    v.tokens.push_back(bytes_to_unicode(std::string(1, static_cast<char>(b))));
  }
  for (const auto& [a, b] : merges) {
    v.merges.push_back(bytes_to_unicode(a) + " " + bytes_to_unicode(b));
    v.tokens.push_back(bytes_to_unicode(a + b));
  }
  v.token_types.assign(v.tokens.size(), 1);
  for (const char* s : {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|im_start|>x"}) {
    v.tokens.push_back(s);
    v.token_types.push_back(3);
  }
  v.tokens.push_back("<tool>");
  v.token_types.push_back(4);
  v.pre = pre;
  v.eos_id = 256 + static_cast<int32_t>(merges.size());
  return v;
}

// The id of a merged token of make_vocab (the i-th merge).
int32_t merged(int i) {
  return 256 + i;
}

int32_t byte_id(char c) {
  return static_cast<unsigned char>(c);
}

std::vector<std::string> pieces(const std::string& pre, const std::string& text) {
  std::vector<std::string_view> views;
  PreTokenizer(pre).split(text, views);
  return {views.begin(), views.end()};
}

using Pieces = std::vector<std::string>;

TEST(ByteUnicode, GptTwoAlphabet) {
  EXPECT_EQ(adakv::tokenizer::byte_to_unicode(' '), "Ġ");
  EXPECT_EQ(adakv::tokenizer::byte_to_unicode('\n'), "Ċ");
  EXPECT_EQ(adakv::tokenizer::byte_to_unicode('\t'), "ĉ");
  EXPECT_EQ(adakv::tokenizer::byte_to_unicode(0), "Ā");
  EXPECT_EQ(adakv::tokenizer::byte_to_unicode('a'), "a");
  EXPECT_EQ(adakv::tokenizer::byte_to_unicode(0xAD), "Ń");  // soft hyphen is not printable
  EXPECT_EQ(adakv::tokenizer::byte_to_unicode(0xE9), "é");
  EXPECT_EQ(adakv::tokenizer::byte_to_unicode(0xFF), "ÿ");
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  EXPECT_EQ(adakv::tokenizer::unicode_to_bytes(bytes_to_unicode(all)), all);
  // Characters outside the alphabet survive as their own UTF-8.
  EXPECT_EQ(adakv::tokenizer::unicode_to_bytes("aĠ€"), "a €");
}

TEST(ByteUnicode, CompletePrefix) {
  using adakv::tokenizer::utf8_complete_prefix;
  EXPECT_EQ(utf8_complete_prefix("abc"), 3u);
  EXPECT_EQ(utf8_complete_prefix("a\xC3"), 1u);  // é cut after its lead byte
  EXPECT_EQ(utf8_complete_prefix("a\xC3\xA9"), 3u);
  EXPECT_EQ(utf8_complete_prefix("\xF0\x9F\x98"), 0u);  // 😀 missing its last byte
  EXPECT_EQ(utf8_complete_prefix("\xF0\x9F\x98\x80"), 4u);
  EXPECT_EQ(utf8_complete_prefix("x\xFF"), 2u);      // never valid: not held back
  EXPECT_EQ(utf8_complete_prefix("x\x80"), 2u);      // stray continuation byte
  EXPECT_EQ(utf8_complete_prefix("x\xE0\x80"), 3u);  // overlong start: never valid
  EXPECT_EQ(utf8_complete_prefix("x\xED\xA0"), 3u);  // surrogate: never valid
  EXPECT_EQ(utf8_complete_prefix("x\xE0\xA0"), 1u);
}

TEST(PreTokenizer, DigitsAreSplitOneByOne) {
  EXPECT_EQ(pieces("smollm", "12345"), (Pieces{"1", "2", "3", "4", "5"}));
  EXPECT_EQ(pieces("smollm", "x 42"), (Pieces{"x", " ", "4", "2"}));
  EXPECT_EQ(pieces("smollm", "3.14"), (Pieces{"3", ".", "1", "4"}));
  EXPECT_EQ(pieces("smollm", "a²"), (Pieces{"a", "²"}));  // any \p{N}, not only ASCII
  EXPECT_EQ(pieces("gpt2", "x 42"), (Pieces{"x", " 42"}));
}

TEST(PreTokenizer, GptTwoPattern) {
  EXPECT_EQ(pieces("gpt2", "Hello world"), (Pieces{"Hello", " world"}));
  EXPECT_EQ(pieces("gpt2", "don't we'll"), (Pieces{"don", "'t", " we", "'ll"}));
  EXPECT_EQ(pieces("gpt2", "a!!?b"), (Pieces{"a", "!!?", "b"}));
  EXPECT_EQ(pieces("gpt2", "a  b"), (Pieces{"a", " ", " b"}));
  EXPECT_EQ(pieces("gpt2", "a \tb"), (Pieces{"a", " ", "\t", "b"}));  // the final |\s+
  EXPECT_EQ(pieces("gpt2", "a   "), (Pieces{"a", "   "}));            // trailing run whole
  EXPECT_EQ(pieces("gpt2", "a\n\n b"), (Pieces{"a", "\n\n", " b"}));
  EXPECT_EQ(pieces("gpt2", "é ñ"), (Pieces{"é", " ñ"}));
  EXPECT_EQ(pieces("gpt2", "日本"), (Pieces{"日本"}));
  // U+180E is not white space for HF tokenizers and llama.cpp (PCRE2's plain \s says it is).
  EXPECT_EQ(pieces("gpt2", "a \u180Eb"), (Pieces{"a", " \u180E", "b"}));
  EXPECT_EQ(pieces("gpt2", "a\u00A0\u3000b"), (Pieces{"a", "\u00A0", "\u3000", "b"}));
  EXPECT_EQ(pieces("gpt2", ""), (Pieces{}));
}

TEST(PreTokenizer, InvalidUtf8BytesFormTheirOwnPieces) {
  EXPECT_EQ(pieces("gpt2",
                   "abc\xFF\xFE"
                   "def"),
            (Pieces{"abc", "\xFF\xFE", "def"}));
  EXPECT_EQ(pieces("gpt2", "\xE4\xBD"), (Pieces{"\xE4\xBD"}));
  EXPECT_EQ(pieces("gpt2", "  \x80"), (Pieces{"  ", "\x80"}));
  EXPECT_EQ(pieces("smollm",
                   "1\x80"
                   "2"),
            (Pieces{"1", "\x80", "2"}));
}

TEST(PreTokenizer, OtherNames) {
  EXPECT_EQ(pieces("llama-bpe", "x 12345"), (Pieces{"x", " ", "123", "45"}));
  EXPECT_EQ(pieces("default", "a,b"), (Pieces{"a", ",", "b"}));
  try {
    PreTokenizer("no-such-pre");
    FAIL() << "an unknown pre-tokenizer must throw";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("no-such-pre"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("smollm"), std::string::npos) << e.what();
  }
}

// Qwen2's pattern: Llama 3's with one digit per piece and case-insensitive contractions.
TEST(PreTokenizer, Qwen2) {
  EXPECT_EQ(pieces("qwen2", "x 12345"), (Pieces{"x", " ", "1", "2", "3", "4", "5"}));
  EXPECT_EQ(pieces("qwen2", "v1.25"), (Pieces{"v", "1", ".", "2", "5"}));
  EXPECT_EQ(pieces("qwen2", "I'M here, don'T"), (Pieces{"I", "'M", " here", ",", " don", "'T"}));
  EXPECT_EQ(pieces("qwen2", "Hello world"), (Pieces{"Hello", " world"}));
  EXPECT_EQ(pieces("qwen2", "a\n\n  b"), (Pieces{"a", "\n\n", " ", " b"}));
  EXPECT_EQ(pieces("qwen2", "x = {1};\n"), (Pieces{"x", " =", " {", "1", "};\n"}));
  EXPECT_EQ(pieces("qwen2", "  indented"), (Pieces{" ", " indented"}));
  EXPECT_EQ(pieces("qwen2", "日本語"), (Pieces{"日本語"}));
}

TEST(Tokenizer, MergesApplyByRank) {
  // "abc": with "a b" ranked first we get ab|c, with "b c" first a|bc.
  const Tokenizer ab_first(make_vocab({{"a", "b"}, {"b", "c"}}));
  EXPECT_EQ(ab_first.encode("abc"), (Ids{merged(0), byte_id('c')}));
  const Tokenizer bc_first(make_vocab({{"b", "c"}, {"a", "b"}}));
  EXPECT_EQ(bc_first.encode("abc"), (Ids{byte_id('a'), merged(0)}));
}

TEST(Tokenizer, MergesChainAndTieBreakLeftmost) {
  const Tokenizer tok(make_vocab({{"a", "a"}, {"aa", "aa"}, {" ", "t"}, {"h", "e"}, {" t", "he"}}));
  EXPECT_EQ(tok.encode("aaa"), (Ids{merged(0), byte_id('a')}));
  EXPECT_EQ(tok.encode("aaaa"), (Ids{merged(1)}));
  EXPECT_EQ(tok.encode("aaaaa"), (Ids{merged(1), byte_id('a')}));
  EXPECT_EQ(tok.encode("the the"), (Ids{byte_id('t'), merged(3), merged(4)}));
}

TEST(Tokenizer, DigitsNeverMerge) {
  // The vocabulary could merge "1 2" and " 1", but the smollm pre-tokenizer never lets it.
  const Tokenizer smollm(make_vocab({{"1", "2"}, {" ", "1"}}));
  EXPECT_EQ(smollm.encode("12 1"), (Ids{byte_id('1'), byte_id('2'), byte_id(' '), byte_id('1')}));
  const Tokenizer gpt2(make_vocab({{"1", "2"}, {" ", "1"}}, "gpt2"));
  EXPECT_EQ(gpt2.encode("12 1"), (Ids{merged(0), merged(1)}));
}

TEST(Tokenizer, SpecialTokensOnlyWhenAsked) {
  const Tokenizer tok(make_vocab({}));
  const int32_t start = tok.vocab_size() - 4;  // "<|im_start|>"
  const int32_t end = start + 1, start_x = start + 2, tool = start + 3;
  EXPECT_EQ(tok.encode("<|im_start|>hi<|im_end|>", true),
            (Ids{start, byte_id('h'), byte_id('i'), end}));
  // Longest match first: "<|im_start|>x" is a token of its own.
  EXPECT_EQ(tok.encode("<|im_start|>x<|im_start|>y", true), (Ids{start_x, start, byte_id('y')}));
  EXPECT_EQ(tok.encode("a<tool>b", true), (Ids{byte_id('a'), tool, byte_id('b')}));
  // Without parse_special control tokens are plain text; user-defined ones are still matched.
  EXPECT_EQ(tok.encode("a<tool>b", false), (Ids{byte_id('a'), tool, byte_id('b')}));
  const Ids plain = tok.encode("<|im_end|>", false);
  EXPECT_EQ(plain.size(), std::string("<|im_end|>").size());
  EXPECT_EQ(tok.decode(plain), "<|im_end|>");
  EXPECT_EQ(tok.decode({start, end}), "<|im_start|><|im_end|>");
  EXPECT_TRUE(tok.is_control(start));
  EXPECT_FALSE(tok.is_control(tool));
  EXPECT_FALSE(tok.is_control(byte_id('a')));
}

TEST(Tokenizer, TextAroundSpecialTokensIsPreTokenizedApart) {
  // "a " before a special token ends its subject: the space is not glued to what follows.
  const Tokenizer tok(make_vocab({{" ", "b"}}, "gpt2"));
  const int32_t end = tok.vocab_size() - 4 + 1;
  EXPECT_EQ(tok.encode("a <|im_end|>b", true),
            (Ids{byte_id('a'), byte_id(' '), end, byte_id('b')}));
  EXPECT_EQ(tok.encode("a b", true), (Ids{byte_id('a'), merged(0)}));
}

TEST(Tokenizer, AnyByteStringRoundTrips) {
  const Tokenizer tok(make_vocab({{"a", "b"}, {" ", "a"}, {"\xC3", "\xA9"}, {"1", "2"}}));
  std::mt19937 rng(12345);
  for (int i = 0; i < 2000; ++i) {
    std::string s(rng() % 40, '\0');
    for (char& c : s) {
      const uint32_t r = rng();
      c = static_cast<char>(r % 3 == 0 ? r >> 8 : "ab 1\xC3\xA9<|>\n"[(r >> 8) % 10]);
    }
    EXPECT_EQ(tok.decode(tok.encode(s, false)), s);
    EXPECT_EQ(tok.decode(tok.encode(s, true)), s);
  }
}

TEST(Tokenizer, BytesWithoutTokenAreDropped) {
  // As HF tokenizers: the byte is dropped before merging, so "!" and "!" still merge.
  Vocab v = make_vocab({{"!", "!"}});
  v.tokens[0x04] = "unused-0x04";
  const Tokenizer tok(std::move(v));
  EXPECT_EQ(tok.encode("!\x04!"), (Ids{merged(0)}));
  EXPECT_EQ(tok.encode("\x04"), (Ids{}));
}

TEST(Tokenizer, AddsBosWhenTheVocabularySaysSo) {
  Vocab v = make_vocab({});
  v.add_bos = true;
  v.bos_id = v.eos_id;
  const Tokenizer tok(std::move(v));
  EXPECT_EQ(tok.encode("a"), (Ids{tok.bos_id(), byte_id('a')}));
}

TEST(Tokenizer, RejectsBadInput) {
  const Tokenizer tok(make_vocab({}));
  EXPECT_THROW(tok.token_bytes(-1), std::out_of_range);
  EXPECT_THROW(tok.decode({static_cast<int32_t>(tok.vocab_size())}), std::out_of_range);
  Vocab bad_types = make_vocab({});
  bad_types.token_types.pop_back();
  EXPECT_THROW(Tokenizer{std::move(bad_types)}, std::runtime_error);
  Vocab bad_merge = make_vocab({});
  bad_merge.merges.push_back("nospace");
  EXPECT_THROW(Tokenizer{std::move(bad_merge)}, std::runtime_error);
  Vocab bad_pre = make_vocab({}, "unknown-pre");
  EXPECT_THROW(Tokenizer{std::move(bad_pre)}, std::runtime_error);
}

TEST(Tokenizer, LongRunsDoNotBlowUp) {
  const Tokenizer tok(make_vocab({{" ", " "}, {"a", "a"}, {"  ", "  "}}));
  for (const std::string& s : {std::string(200000, ' '), std::string(200000, 'a'),
                               std::string(200000, '!'), std::string(100000, '\xFF')}) {
    EXPECT_EQ(tok.decode(tok.encode(s)), s);
  }
}

TEST(StreamDecoder, HoldsBackSplitCharacters) {
  const Tokenizer tok(make_vocab({}));  // no merges: one token per byte
  StreamDecoder dec(tok);
  const std::string text = "é€😀!";
  std::vector<std::string> outs;
  for (int32_t id : tok.encode(text)) outs.push_back(dec.push(id));
  EXPECT_EQ(outs, (std::vector<std::string>{"", "é", "", "", "€", "", "", "", "😀", "!"}));
  EXPECT_EQ(dec.flush(), "");
}

TEST(StreamDecoder, FlushesIncompleteAndPassesInvalidBytes) {
  const Tokenizer tok(make_vocab({}));
  StreamDecoder dec(tok);
  EXPECT_EQ(dec.push(0xFF), "\xFF");  // can never become valid: not held back
  EXPECT_EQ(dec.push(0xE2), "");
  EXPECT_EQ(dec.push(0x82), "");
  EXPECT_EQ(dec.flush(), "\xE2\x82");
  EXPECT_EQ(dec.flush(), "");
  EXPECT_EQ(dec.push('a'), "a");
}

TEST(ChatTemplate, ChatMlWithDefaultSystem) {
  using adakv::tokenizer::apply_chat_template;
  EXPECT_EQ(apply_chat_template({{"user", "Hi"}}),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
            "Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(apply_chat_template({{"system", "S"}, {"user", "U"}, {"assistant", "A"}}, false),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n"
            "<|im_start|>assistant\nA<|im_end|>\n");
  EXPECT_EQ(apply_chat_template({}, true), "<|im_start|>assistant\n");
  EXPECT_EQ(apply_chat_template({}, false), "");
}

// Qwen2.5-Instruct's template without tools: its own default system line, rendered even for an
// empty conversation.
TEST(ChatTemplate, Qwen25) {
  const auto qwen = adakv::tokenizer::ChatTemplate::qwen25();
  const std::string system =
      "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
      "assistant.<|im_end|>\n";
  EXPECT_EQ(qwen.render({{"user", "Hi"}}),
            system + "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(qwen.render({{"system", "S"}, {"user", "U"}, {"assistant", "A"}}, false),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n"
            "<|im_start|>assistant\nA<|im_end|>\n");
  EXPECT_EQ(qwen.render({}, true), system + "<|im_start|>assistant\n");
}

TEST(ChatTemplate, RecognisedFromTheFilesSource) {
  using adakv::tokenizer::ChatTemplate;
  EXPECT_EQ(ChatTemplate::recognise("")->name, "smollm2");
  EXPECT_EQ(ChatTemplate::recognise("{{ '<|im_start|>system\nYou are a helpful AI assistant "
                                    "named SmolLM, trained by Hugging Face<|im_end|>' }}")
                ->name,
            "smollm2");
  EXPECT_EQ(ChatTemplate::recognise("{%- if tools %}<|im_start|>...{{- '<|im_start|>system\nYou "
                                    "are Qwen, created by Alibaba Cloud. You are a helpful "
                                    "assistant.<|im_end|>\n' }}")
                ->name,
            "qwen2.5");
  EXPECT_FALSE(ChatTemplate::recognise("{{ bos_token }}[INST] {{ m }} [/INST]").has_value());
  // ChatML with a default system line adakv does not know is another template.
  EXPECT_FALSE(
      ChatTemplate::recognise("<|im_start|>system\nYou are a pirate.<|im_end|>").has_value());
}

TEST(ChatTemplate, AnUnknownTemplateIsAnErrorOnlyForChat) {
  Vocab v = make_vocab({});
  v.chat_template = "{{ bos_token }}[INST] {{ messages[0]['content'] }} [/INST]";
  const Tokenizer tok(v);
  EXPECT_EQ(tok.encode("ab"), (Ids{'a', 'b'}));
  try {
    tok.encode_chat({{"user", "Hi"}});
    FAIL() << "an unknown template must not render";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("chat template"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("qwen2.5"), std::string::npos) << e.what();
  }
}

TEST(ChatTemplate, EncodeChatParsesTheSpecialTokens) {
  Vocab v = make_vocab({});
  const Tokenizer tok(v);
  const Ids ids = tok.encode_chat({{"system", "S"}, {"user", "U"}});
  const int32_t start = tok.encode("<|im_start|>", true).at(0),
                end = tok.encode("<|im_end|>", true).at(0);
  EXPECT_EQ(ids, (Ids{start, 's', 'y', 's', 't', 'e',  'm', '\n', 'S',  end,   '\n',
                      start, 'u', 's', 'e', 'r', '\n', 'U', end,  '\n', start, 'a',
                      's',   's', 'i', 's', 't', 'a',  'n', 't',  '\n'}));
}

adakv::gguf::GgufFile tokenizer_gguf(const std::string& model, bool with_merges) {
  adakv::gguf::GgufWriter w;
  w.add_string("general.architecture", "llama");
  w.add_string("tokenizer.ggml.model", model);
  w.add_string("tokenizer.ggml.pre", "smollm");
  const Vocab v = make_vocab({{"a", "b"}});
  w.add_string_array("tokenizer.ggml.tokens", v.tokens);
  if (with_merges) w.add_string_array("tokenizer.ggml.merges", v.merges);
  w.add_i32_array("tokenizer.ggml.token_type", v.token_types);
  w.add_u32("tokenizer.ggml.bos_token_id", 257);
  w.add_u32("tokenizer.ggml.eos_token_id", 258);
  w.add_bool("tokenizer.ggml.add_bos_token", false);
  const auto bytes = w.bytes();
  return adakv::gguf::GgufFile::parse(bytes.data(), bytes.size());
}

TEST(VocabFromGguf, ReadsTheTokenizerKeys) {
  const auto file = tokenizer_gguf("gpt2", true);
  const Vocab v = adakv::tokenizer::vocab_from_gguf(file);
  EXPECT_EQ(v.tokens.size(), 256u + 1 + 5);
  EXPECT_EQ(v.merges, (std::vector<std::string>{"a b"}));
  EXPECT_EQ(v.pre, "smollm");
  EXPECT_EQ(v.bos_id, 257);
  EXPECT_EQ(v.eos_id, 258);
  EXPECT_EQ(v.pad_id, -1);
  EXPECT_FALSE(v.add_bos);
  EXPECT_EQ(v.token_types[257], 3);
  const Tokenizer tok(v);
  EXPECT_EQ(tok.encode("ab"), (Ids{256}));
}

TEST(VocabFromGguf, ClearErrors) {
  auto message = [](const adakv::gguf::GgufFile& f) {
    try {
      adakv::tokenizer::vocab_from_gguf(f);
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(tokenizer_gguf("rwkv", true)).find("tokenizer.ggml.model"), std::string::npos);
  EXPECT_NE(message(tokenizer_gguf("gpt2", false)).find("tokenizer.ggml.merges"),
            std::string::npos);
}

}  // namespace

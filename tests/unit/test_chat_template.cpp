// The chat template families on hand-written conversations, their recognition from synthetic
// Jinja sources holding each family's markers, and the stop tokens the tokenizer derives. The
// renderings against transformers' apply_chat_template on the real templates are in
// test_chat_template_goldens.cpp.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "model/gguf/gguf.h"
#include "model/gguf/writer.h"
#include "model/tokenizer/byte_unicode.h"
#include "model/tokenizer/chat_template.h"
#include "model/tokenizer/tokenizer.h"

namespace {

using adakv::tokenizer::ChatMessage;
using adakv::tokenizer::ChatTemplate;
using adakv::tokenizer::Tokenizer;
using adakv::tokenizer::Vocab;
using Ids = std::vector<int32_t>;
using Chat = std::vector<ChatMessage>;

// The message of the std::invalid_argument `f` throws ("no error" when none).
template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "no error";
}

constexpr const char* kAlternate =
    "Conversation roles must alternate user/assistant/user/assistant/...";

TEST(ChatTemplateFamilies, Llama3) {
  const auto t = ChatTemplate::llama3();
  EXPECT_EQ(t.render({{"system", " S "}, {"user", "U\n"}, {"assistant", "A"}}, true),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nU<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nA<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(t.render({}, true), "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(t.end_of_turn, "<|eot_id|>");
}

TEST(ChatTemplateFamilies, Llama31HasTheDatedSystemTurn) {
  const auto t = ChatTemplate::llama31();
  const std::string head =
      "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: "
      "December 2023\nToday Date: 26 Jul 2024\n\n";
  EXPECT_EQ(t.render({{"user", "Hi"}}, false),
            head + "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>");
  EXPECT_EQ(t.render({{"system", "Be brief. "}, {"user", "Hi"}}, true),
            head +
                "Be brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_NE(error_of([&] { t.render({}); }).find("empty"), std::string::npos);
}

TEST(ChatTemplateFamilies, Llama2FoldsTheSystemMessageAndAlternates) {
  const auto t = ChatTemplate::llama2();
  // strip() applies to the folded text: the user message's own leading space stays.
  EXPECT_EQ(t.render({{"system", "S"}, {"user", " U "}, {"assistant", "A"}, {"user", "V"}}),
            "<s>[INST] <<SYS>>\nS\n<</SYS>>\n\n U [/INST] A </s><s>[INST] V [/INST]");
  EXPECT_EQ(t.render({{"user", "U"}}, true), "<s>[INST] U [/INST]");
  EXPECT_EQ(error_of([&] { t.render({{"assistant", "A"}}); }), kAlternate);
  EXPECT_EQ(error_of([&] { t.render({{"user", "U"}, {"user", "V"}}); }), kAlternate);
  EXPECT_EQ(error_of([&] {
              t.render({{"system", "S"}, {"system", "T"}, {"user", "U"}});
            }),
            kAlternate);
  EXPECT_EQ(t.end_of_turn, "</s>");
}

TEST(ChatTemplateFamilies, MistralV1) {
  const auto t = ChatTemplate::mistral_v1();
  EXPECT_EQ(t.render({{"system", "S"}, {"user", "U"}, {"assistant", "A"}, {"user", "V"}}),
            "<s> [INST] S\n\nU [/INST] A</s> [INST] V [/INST]");
  const std::string alternate = std::string("After the optional system message, ") +
                                "conversation roles must alternate user/assistant/user/"
                                "assistant/...";
  EXPECT_EQ(error_of([&] {
              t.render({{"user", "U"}, {"system", "S"}});
            }),
            "Only user and assistant roles are supported, with the exception of an initial "
            "optional system message!");
  EXPECT_EQ(error_of([&] { t.render({{"assistant", "A"}}); }), alternate);
  EXPECT_NE(error_of([&] { t.render({}); }).find("empty"), std::string::npos);
}

TEST(ChatTemplateFamilies, MistralTekkenPutsTheSystemMessageBeforeTheLastUserMessage) {
  const auto t = ChatTemplate::mistral_tekken();
  EXPECT_EQ(t.render({{"system", "S"}, {"user", "U"}, {"assistant", "A"}, {"user", "V"}}),
            "<s>[INST]U[/INST]A</s>[INST]S\n\nV[/INST]");
  // Ending on an assistant message, the system message is nowhere (as the template does).
  EXPECT_EQ(t.render({{"system", "S"}, {"user", "U"}, {"assistant", "A"}}),
            "<s>[INST]U[/INST]A</s>");
}

TEST(ChatTemplateFamilies, MistralV3IsTekkenWithSpacesAndTrimmedAnswers) {
  EXPECT_EQ(ChatTemplate::mistral_v3().render(
                {{"system", "S"}, {"user", "U"}, {"assistant", " A\n"}, {"user", "V"}}),
            "<s>[INST] U[/INST] A</s>[INST] S\n\nV[/INST]");
}

TEST(ChatTemplateFamilies, TrimIsPythonsStrip) {
  // U+3000 and U+00A0 are whitespace to str.strip(); U+200B (zero width space) is not.
  EXPECT_EQ(ChatTemplate::llama3().render({{"user", "\xe3\x80\x80\xc2\xa0 x\t\n"}}, false),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nx<|eot_id|>");
  EXPECT_EQ(ChatTemplate::llama3().render({{"user", "\xe2\x80\x8bx"}}, false),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n\xe2\x80\x8bx<|eot_id|>");
}

TEST(ChatTemplateRecognition, EachFamilyByItsMarkers) {
  auto name = [](const std::string& source) {
    const auto t = ChatTemplate::recognise(source);
    return t ? t->name : "none";
  };
  EXPECT_EQ(name("{% for m in messages %}{{ '<|start_header_id|>' + m['role'] + "
                 "'<|end_header_id|>\n\n' + m['content'] | trim + '<|eot_id|>' }}{% endfor %}"),
            "llama3");
  EXPECT_EQ(
      name(
          "{{- bos_token }}{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}"
          "{{- \"Cutting Knowledge Date: December 2023\\n\" }}{{- \"Today Date: \" + date_string }}"
          "{{ '<|eot_id|>' }}"),
      "llama3.1");
  EXPECT_EQ(
      name("{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ "
           "raise_exception('Conversation roles must alternate user/assistant/user/"
           "assistant/...') }}{% endif %}{% set content = '<<SYS>>\\n' + system_message + "
           "'\\n<</SYS>>\\n\\n' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"),
      "llama2");
  EXPECT_EQ(name("{{- ' [INST] ' + system_message + '\\n\\n' + message['content'] + ' [/INST]' "
                 "}}"),
            "mistral-v1");
  EXPECT_EQ(name("{%- if loop.last and system_message is defined %}{{- \"[INST]\" + "
                 "system_message + \"\\n\\n\" + message[\"content\"] + \"[/INST]\" }}"),
            "mistral-tekken");
  EXPECT_EQ(name("{%- if loop.last and system_message is defined %}{{- \"[INST] \" + "
                 "system_message + \"\\n\\n\" + message[\"content\"] + \"[/INST]\" }}"),
            "mistral-v3");
  // A Llama 2 fine-tune with its own default system message renders other text.
  EXPECT_EQ(name("{% set system_message = 'Vous etes Vigogne' %}Conversation roles must "
                 "alternate <<SYS>> <</SYS>> [INST] [/INST]"),
            "none");
  // Mistral's older template without a system message (and without the leading space).
  EXPECT_EQ(name("{{ '[INST] ' + message['content'] + ' [/INST]' }}"), "none");
  EXPECT_EQ(name("<start_of_turn>user"), "none");
  // Look-alikes that render more: SmolLM3 (SmolLM2's system line, then more), a Llama 3 fine-tune
  // with functions, Functionary's Llama 3.1 (no Today Date line), Llama 3.2 Vision.
  EXPECT_EQ(name("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
                 "Hugging Face. Your role <|im_end|>"),
            "none");
  EXPECT_EQ(name("<|start_header_id|><|end_header_id|><|eot_id|> call one of the functions"),
            "none");
  EXPECT_EQ(name("<|start_header_id|><|end_header_id|><|eot_id|>Cutting Knowledge Date"), "none");
  EXPECT_EQ(name("<|start_header_id|><|end_header_id|><|eot_id|>Cutting Knowledge Date Today "
                 "Date <|image|>"),
            "none");
}

TEST(ChatTemplateNames, NamedKnowsEveryNameAndListsThemOnError) {
  for (const std::string& n : ChatTemplate::names()) {
    EXPECT_EQ(ChatTemplate::named(n).name, n);
    EXPECT_NE(ChatTemplate::known_names().find(n), std::string::npos) << n;
  }
  const std::string e = error_of([] { ChatTemplate::named("llama4"); });
  EXPECT_NE(e.find("unknown chat template 'llama4'"), std::string::npos) << e;
  EXPECT_NE(e.find("llama3.1"), std::string::npos) << e;
  EXPECT_NE(e.find("mistral-v1"), std::string::npos) << e;
}

// A vocabulary of the 256 byte tokens (byte-level spelling) and then the given control tokens.
Vocab control_vocab(const std::vector<std::string>& controls) {
  Vocab v;
  for (int b = 0; b < 256; ++b) {
    v.tokens.push_back(adakv::tokenizer::bytes_to_unicode(std::string(1, static_cast<char>(b))));
  }
  v.token_types.assign(v.tokens.size(), 1);
  for (const auto& c : controls) {
    v.tokens.push_back(c);
    v.token_types.push_back(3);
  }
  return v;
}

TEST(StopTokens, EosEotEomAndTheTemplatesEndOfTurn) {
  Vocab v = control_vocab({"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|eot_id|>"});
  v.eos_id = 256;  // <|endoftext|>; the (default) smollm2 template ends turns with <|im_end|>
  Tokenizer tok(v);
  EXPECT_EQ(tok.stop_ids(), (Ids{256, 258}));
  EXPECT_TRUE(tok.is_stop(258));
  EXPECT_FALSE(tok.is_stop(257));
  // Another template: its end of turn instead.
  tok.set_chat_template(ChatTemplate::llama3());
  EXPECT_EQ(tok.stop_ids(), (Ids{256, 259}));
  EXPECT_EQ(tok.chat_template().name, "llama3");
  // The file's eot and eom ids join them.
  v.eot_id = 259;
  v.eom_id = 257;
  EXPECT_EQ(Tokenizer(v).stop_ids(), (Ids{256, 257, 258, 259}));
}

TEST(StopTokens, OnlyASpecialTokenIsTheTemplates) {
  // "</s>" as an ordinary (byte-level) token is text, not Llama 2's end of turn.
  Vocab v = control_vocab({"<|endoftext|>"});
  v.tokens.push_back("</s>");
  v.token_types.push_back(1);
  v.eos_id = 256;
  Tokenizer tok(v);
  tok.set_chat_template(ChatTemplate::llama2());
  EXPECT_EQ(tok.stop_ids(), (Ids{256}));
  // A template whose end of turn the vocabulary lacks: eos alone.
  tok.set_chat_template(ChatTemplate::llama3());
  EXPECT_EQ(tok.stop_ids(), (Ids{256}));
}

TEST(StopTokens, ReadFromTheGguf) {
  adakv::gguf::GgufWriter w;
  w.add_string("general.architecture", "llama");
  w.add_string("tokenizer.ggml.model", "gpt2");
  const Vocab v = control_vocab({"<|end_of_text|>", "<|eom_id|>", "<|eot_id|>"});
  w.add_string_array("tokenizer.ggml.tokens", v.tokens);
  w.add_string_array("tokenizer.ggml.merges", {});
  w.add_i32_array("tokenizer.ggml.token_type", v.token_types);
  w.add_u32("tokenizer.ggml.eos_token_id", 256);
  w.add_u32("tokenizer.ggml.eom_token_id", 257);
  w.add_u32("tokenizer.ggml.eot_token_id", 258);
  const auto bytes = w.bytes();
  const auto file = adakv::gguf::GgufFile::parse(bytes.data(), bytes.size());
  const Vocab read = adakv::tokenizer::vocab_from_gguf(file);
  EXPECT_EQ(read.eot_id, 258);
  EXPECT_EQ(read.eom_id, 257);
  EXPECT_EQ(Tokenizer(read).stop_ids(), (Ids{256, 257, 258}));
}

TEST(EncodeChat, ATemplatesTextBosIsNotAddedTwice) {
  Vocab v = control_vocab(
      {"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"});
  v.bos_id = 256;
  v.eos_id = 259;
  v.add_bos = true;
  Tokenizer tok(v);
  tok.set_chat_template(ChatTemplate::llama3());
  const Ids ids = tok.encode_chat({{"user", "x"}}, false);
  EXPECT_EQ(ids, (Ids{256, 257, 'u', 's', 'e', 'r', 258, '\n', '\n', 'x', 259}));
}

TEST(EncodeChat, ARoleOrderTheTemplateRefusesIsAnInvalidArgument) {
  Vocab v = control_vocab({"<s>", "</s>"});
  v.eos_id = 257;
  Tokenizer tok(v);
  tok.set_chat_template(ChatTemplate::mistral_v1());
  EXPECT_NE(error_of([&] {
              tok.encode_chat({{"user", "a"}, {"user", "b"}});
            }).find("alternate"),
            std::string::npos);
}

}  // namespace

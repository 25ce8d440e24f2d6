// The chat templates adakv renders, chosen from the GGUF's tokenizer.chat_template by
// recognising the family it belongs to (or named with --chat-template). Each family is
// rendered in C++ exactly as transformers' apply_chat_template renders the model's own Jinja
// template for conversations of system, user and assistant messages with string content; the
// tool-calling parts of those templates are not rendered (requests cannot carry tools).
//
//  smollm2, qwen2.5  ChatML: "<|im_start|>ROLE\nCONTENT<|im_end|>\n" per message after a
//                    default system turn, then "<|im_start|>assistant\n"
//                    (model/tokenizer/chat_template_chatml.cpp).
//  llama2            Llama 2 chat: "<s>[INST] USER [/INST] ASSISTANT </s>" per exchange, the
//                    system message folded into the first user message in <<SYS>> markers.
//  llama3            Llama 3 Instruct: "<|start_header_id|>ROLE<|end_header_id|>\n\nCONTENT
//                    <|eot_id|>" per message after "<|begin_of_text|>".
//  llama3.1          Llama 3.1 / 3.2 / 3.3 Instruct: llama3 with an always-present system turn
//                    that opens with "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul
//                    2024\n\n". The date is the template's own default (what it renders when the
//                    caller passes no date_string): adakv renders the same text on every day, so
//                    a prompt never depends on the clock (model/tokenizer/chat_template_llama.cpp).
//  mistral-v1        Mistral 7B Instruct v0.1 / v0.2: "<s> [INST] USER [/INST] ASSISTANT</s>",
//                    the system message before the first user message.
//  mistral-v3        Mistral 7B Instruct v0.3, Mistral Large 2407 (v3): "<s>[INST] USER[/INST]
//                    ASSISTANT</s>" (the assistant message trimmed), the system message before the
//                    last user message.
//  mistral-tekken    Mistral Nemo (v3 tekken): "<s>[INST]USER[/INST]ASSISTANT</s>", the system
//                    message before the last user message
//                    (model/tokenizer/chat_template_mistral.cpp).
// The families whose template refuses other role orders (llama2, mistral-*) throw
// std::invalid_argument with the template's own message.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace adakv::tokenizer {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant"
  std::string content;
};

enum class ChatFamily {
  kChatMl,
  kLlama2,
  kLlama3,
  kLlama31,
  kMistralV1,
  kMistralV3,
  kMistralTekken
};

struct ChatTemplate {
  std::string name;  // as --chat-template names it
  ChatFamily family = ChatFamily::kChatMl;
  std::string default_system;      // ChatML: the system turn's text when the first message is not
  bool system_when_empty = false;  // ChatML: an empty conversation still gets that turn
  // The token that ends an assistant turn: generation stops there too.
  std::string end_of_turn = "<|im_end|>";

  // SmolLM2-Instruct's template (also what files without a template get, the synthetic test
  // models among them).
  static ChatTemplate smollm2();
  // Qwen2.5-Instruct's (Qwen2.5-Coder's too) without tools.
  static ChatTemplate qwen25();
  static ChatTemplate llama2();
  static ChatTemplate llama3();
  static ChatTemplate llama31();
  static ChatTemplate mistral_v1();
  static ChatTemplate mistral_v3();
  static ChatTemplate mistral_tekken();

  // The known template whose Jinja source is `source`; smollm2() for an empty source (no
  // tokenizer.chat_template); nullopt for a template adakv does not render.
  static std::optional<ChatTemplate> recognise(const std::string& source);
  // The template called `name`; throws std::invalid_argument listing the known names.
  static ChatTemplate named(const std::string& name);
  // The names named() takes, in the order known_names() lists them.
  static std::vector<std::string> names();
  // The names with the models they belong to, for errors.
  static std::string known_names();

  // The text the template renders for `messages` (as transformers' apply_chat_template(...,
  // tokenize=False)). Throws std::invalid_argument for a role order the template refuses.
  std::string render(const std::vector<ChatMessage>& messages,
                     bool add_generation_prompt = true) const;
};

// SmolLM2's template: ChatTemplate::smollm2().render(messages, add_generation_prompt).
std::string apply_chat_template(const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt = true);

}  // namespace adakv::tokenizer

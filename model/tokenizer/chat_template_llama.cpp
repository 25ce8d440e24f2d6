// Meta's Llama chat templates, as their Jinja sources render system, user and assistant
// messages (BOS and EOS are written as text, "<s>" / "<|begin_of_text|>", as the templates do:
// Tokenizer::encode_chat parses them as special tokens).
//  Llama 2 chat: a first system message is removed and folded into the first remaining message
//  as "<<SYS>>\nSYSTEM\n<</SYS>>\n\nCONTENT"; the rest must alternate user/assistant; each
//  user message is "<s>[INST] " + strip(content) + " [/INST]", each assistant message " " +
//  strip(content) + " </s>"; later system messages render nothing; no generation prompt (the
//  text ends with " [/INST]" already).
//  Llama 3 Instruct: "<|begin_of_text|>" before the first message, every message
//  "<|start_header_id|>ROLE<|end_header_id|>\n\n" + trim(content) + "<|eot_id|>", then
//  the assistant header as the generation prompt.
//  Llama 3.1 Instruct: as Llama 3, but the system turn is always there and starts with the
//  knowledge and today dates; a first system message supplies its text (trimmed), else it is
//  empty. The template reads messages[0], so it fails on an empty conversation.
#include <stdexcept>

#include "model/tokenizer/chat_template_render.h"

namespace adakv::tokenizer::chat {

namespace {

void header(std::string& out, const std::string& role) {
  out += "<|start_header_id|>";
  out += role;
  out += "<|end_header_id|>\n\n";
}

}  // namespace

std::string render_llama2(const std::vector<ChatMessage>& messages) {
  require_messages(messages, "llama2");
  const bool has_system = messages.front().role == "system";
  const std::vector<ChatMessage> rest(messages.begin() + (has_system ? 1 : 0), messages.end());
  require_alternation(rest, "Conversation roles must alternate user/assistant/user/assistant/...");
  std::string out;
  for (size_t i = 0; i < rest.size(); ++i) {
    std::string content = rest[i].content;
    if (i == 0 && has_system) {
      content = "<<SYS>>\n" + messages.front().content + "\n<</SYS>>\n\n" + content;
    }
    if (rest[i].role == "user") {
      out += "<s>[INST] " + strip(content) + " [/INST]";
    } else if (rest[i].role == "assistant") {
      out += " " + strip(content) + " </s>";
    }
  }
  return out;
}

std::string render_llama3(const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
  std::string out;
  for (size_t i = 0; i < messages.size(); ++i) {
    if (i == 0) out += "<|begin_of_text|>";
    header(out, messages[i].role);
    out += strip(messages[i].content);
    out += "<|eot_id|>";
  }
  if (add_generation_prompt) header(out, "assistant");
  return out;
}

std::string render_llama31(const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
  require_messages(messages, "llama3.1");
  const bool has_system = messages.front().role == "system";
  std::string out = "<|begin_of_text|>";
  header(out, "system");
  out += "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n";
  if (has_system) out += strip(messages.front().content);
  out += "<|eot_id|>";
  for (size_t i = has_system ? 1 : 0; i < messages.size(); ++i) {
    header(out, messages[i].role);
    out += strip(messages[i].content);
    out += "<|eot_id|>";
  }
  if (add_generation_prompt) header(out, "assistant");
  return out;
}

}  // namespace adakv::tokenizer::chat

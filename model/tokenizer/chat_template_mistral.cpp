// Mistral's [INST] chat templates, as their Jinja sources render system, user and assistant
// messages. Both take a first system message out of the conversation, then require the rest to
// alternate user/assistant, and neither writes a generation prompt (a user message already
// ends in "[/INST]").
//  v1 (Mistral 7B Instruct v0.1 / v0.2): "<s>", then " [INST] " + content + " [/INST]" per user
//  message (the system message and "\n\n" before the first one's content) and " " + content +
//  "</s>" per assistant message.
//  v3 (Mistral 7B Instruct v0.3, Mistral Large 2407): "<s>", then "[INST] " + content +
//  "[/INST]" per user message (the system message and "\n\n" before the content of the
//  conversation's last message when that is a user message, nowhere otherwise) and " " +
//  trim(content) + "</s>" per assistant message.
//  v3 tekken (Mistral Nemo): as v3 without the spaces: "[INST]" + content + "[/INST]" and
//  content + "</s>" (untrimmed).
// Both read messages[0], so they fail on an empty conversation.
#include <stdexcept>

#include "model/tokenizer/chat_template_render.h"

namespace adakv::tokenizer::chat {

namespace {

constexpr const char* kAlternate =
    "After the optional system message, conversation roles must alternate "
    "user/assistant/user/assistant/...";
constexpr const char* kOnlyUserAssistant =
    "Only user and assistant roles are supported, with the exception of an initial optional "
    "system message!";

// The messages after a leading system message, checked as the templates check them.
std::vector<ChatMessage> loop_messages(const std::vector<ChatMessage>& messages,
                                       const std::string& name) {
  require_messages(messages, name);
  const bool has_system = messages.front().role == "system";
  std::vector<ChatMessage> rest(messages.begin() + (has_system ? 1 : 0), messages.end());
  require_alternation(rest, kAlternate);
  return rest;
}

}  // namespace

std::string render_mistral_v1(const std::vector<ChatMessage>& messages) {
  const std::vector<ChatMessage> rest = loop_messages(messages, "mistral-v1");
  const bool has_system = messages.front().role == "system";
  std::string out = "<s>";
  for (size_t i = 0; i < rest.size(); ++i) {
    if (rest[i].role == "user") {
      out += " [INST] ";
      if (i == 0 && has_system) out += messages.front().content + "\n\n";
      out += rest[i].content + " [/INST]";
    } else if (rest[i].role == "assistant") {
      out += " " + rest[i].content + "</s>";
    } else {
      throw std::invalid_argument(kOnlyUserAssistant);
    }
  }
  return out;
}

namespace {

// v3 (spaced) or v3 tekken.
std::string render_v3(const std::vector<ChatMessage>& messages, bool tekken) {
  const std::vector<ChatMessage> rest =
      loop_messages(messages, tekken ? "mistral-tekken" : "mistral-v3");
  const bool has_system = messages.front().role == "system";
  std::string out = "<s>";
  for (size_t i = 0; i < rest.size(); ++i) {
    if (rest[i].role == "user") {
      out += tekken ? "[INST]" : "[INST] ";
      if (i + 1 == rest.size() && has_system) out += messages.front().content + "\n\n";
      out += rest[i].content + "[/INST]";
    } else if (rest[i].role == "assistant") {
      out += tekken ? rest[i].content : " " + strip(rest[i].content);
      out += "</s>";
    } else {
      throw std::invalid_argument(kOnlyUserAssistant);
    }
  }
  return out;
}

}  // namespace

std::string render_mistral_v3(const std::vector<ChatMessage>& messages) {
  return render_v3(messages, false);
}

std::string render_mistral_tekken(const std::vector<ChatMessage>& messages) {
  return render_v3(messages, true);
}

}  // namespace adakv::tokenizer::chat

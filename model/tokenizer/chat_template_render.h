// What the family renderers of model/tokenizer/chat_template_*.cpp share.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "model/tokenizer/chat_template.h"

namespace adakv::tokenizer::chat {

// `s` without leading and trailing whitespace as Python's str.strip() (Jinja's trim) sees it:
// ASCII whitespace, \x1c-\x1f and the Unicode spaces and separators.
std::string strip(std::string_view s);

// Throws std::invalid_argument(message) unless `messages` alternate user, assistant, user, ...
// (the check the Llama 2 and Mistral templates make before rendering).
void require_alternation(const std::vector<ChatMessage>& messages, const char* message);

// Throws std::invalid_argument for an empty conversation: the templates that read
// messages[0] fail on one.
void require_messages(const std::vector<ChatMessage>& messages, const std::string& name);

std::string render_chatml(const ChatTemplate& t, const std::vector<ChatMessage>& messages,
                          bool add_generation_prompt);
std::string render_llama2(const std::vector<ChatMessage>& messages);
std::string render_llama3(const std::vector<ChatMessage>& messages, bool add_generation_prompt);
std::string render_llama31(const std::vector<ChatMessage>& messages, bool add_generation_prompt);
std::string render_mistral_v1(const std::vector<ChatMessage>& messages);
std::string render_mistral_v3(const std::vector<ChatMessage>& messages);
std::string render_mistral_tekken(const std::vector<ChatMessage>& messages);

}  // namespace adakv::tokenizer::chat

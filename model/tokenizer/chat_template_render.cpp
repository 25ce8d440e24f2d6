#include "model/tokenizer/chat_template_render.h"

#include <array>
#include <stdexcept>

namespace adakv::tokenizer::chat {

namespace {

// The UTF-8 encodings of the non-ASCII code points Python's str.isspace() accepts.
constexpr std::array<std::string_view, 17> kUnicodeSpaces = {
    "\xc2\x85",     "\xc2\xa0",     "\xe1\x9a\x80", "\xe2\x80\x80", "\xe2\x80\x81", "\xe2\x80\x82",
    "\xe2\x80\x83", "\xe2\x80\x84", "\xe2\x80\x85", "\xe2\x80\x86", "\xe2\x80\x87", "\xe2\x80\x88",
    "\xe2\x80\x89", "\xe2\x80\x8a", "\xe2\x80\xa8", "\xe2\x80\xa9", "\xe2\x80\xaf"};
constexpr std::array<std::string_view, 2> kMoreUnicodeSpaces = {"\xe2\x81\x9f", "\xe3\x80\x80"};

bool ascii_space(char c) {
  return c == ' ' || (c >= '\t' && c <= '\r') || (c >= '\x1c' && c <= '\x1f');
}

// Bytes of the whitespace character at the start (front) or end of `s`; 0 when none.
size_t space_at(std::string_view s, bool front) {
  if (s.empty()) return 0;
  if (ascii_space(front ? s.front() : s.back())) return 1;
  auto match = [&](std::string_view sp) {
    return s.size() >= sp.size() &&
           (front ? s.substr(0, sp.size()) : s.substr(s.size() - sp.size())) == sp;
  };
  for (std::string_view sp : kUnicodeSpaces) {
    if (match(sp)) return sp.size();
  }
  for (std::string_view sp : kMoreUnicodeSpaces) {
    if (match(sp)) return sp.size();
  }
  return 0;
}

}  // namespace

std::string strip(std::string_view s) {
  while (size_t n = space_at(s, true)) s.remove_prefix(n);
  while (size_t n = space_at(s, false)) s.remove_suffix(n);
  return std::string(s);
}

void require_alternation(const std::vector<ChatMessage>& messages, const char* message) {
  for (size_t i = 0; i < messages.size(); ++i) {
    if ((messages[i].role == "user") != (i % 2 == 0)) throw std::invalid_argument(message);
  }
}

void require_messages(const std::vector<ChatMessage>& messages, const std::string& name) {
  if (messages.empty()) {
    throw std::invalid_argument("the " + name +
                                " chat template needs at least one message; the conversation "
                                "is empty");
  }
}

}  // namespace adakv::tokenizer::chat

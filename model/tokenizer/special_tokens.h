// Finds control and user-defined tokens (e.g. "<|im_start|>") written in text.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace adakv::tokenizer {

class SpecialTokenMatcher {
 public:
  void add(std::string text, int32_t id);  // empty texts are ignored

  // Calls on_text(view) for each stretch of ordinary text and on_token(id) for each special
  // token, in order. Matching is leftmost-longest, as HF tokenizers' added-token splitting.
  template <typename OnText, typename OnToken>
  void split(std::string_view text, OnText&& on_text, OnToken&& on_token) const;

 private:
  struct Entry {
    std::string text;
    int32_t id;
  };
  // Candidates by first byte, longest first.
  std::array<std::vector<Entry>, 256> by_first_{};
  bool any_ = false;
};

template <typename OnText, typename OnToken>
void SpecialTokenMatcher::split(std::string_view text, OnText&& on_text, OnToken&& on_token) const {
  if (!any_) {
    if (!text.empty()) on_text(text);
    return;
  }
  size_t plain = 0;  // start of the ordinary text not yet handed out
  size_t pos = 0;
  while (pos < text.size()) {
    const auto& candidates = by_first_[static_cast<uint8_t>(text[pos])];
    const Entry* hit = nullptr;
    for (const Entry& e : candidates) {
      if (text.compare(pos, e.text.size(), e.text) == 0) {
        hit = &e;
        break;
      }
    }
    if (hit == nullptr) {
      ++pos;
      continue;
    }
    if (pos > plain) on_text(text.substr(plain, pos - plain));
    on_token(hit->id);
    pos += hit->text.size();
    plain = pos;
  }
  if (plain < text.size()) on_text(text.substr(plain));
}

}  // namespace adakv::tokenizer

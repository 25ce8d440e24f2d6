#include "model/tokenizer/special_tokens.h"

#include <algorithm>

namespace adakv::tokenizer {

void SpecialTokenMatcher::add(std::string text, int32_t id) {
  if (text.empty()) return;
  auto& list = by_first_[static_cast<uint8_t>(text[0])];
  list.push_back({std::move(text), id});
  std::stable_sort(list.begin(), list.end(),
                   [](const Entry& a, const Entry& b) { return a.text.size() > b.text.size(); });
  any_ = true;
}

}  // namespace adakv::tokenizer

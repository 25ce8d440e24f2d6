#include "runtime/eval/scoring.h"

#include <algorithm>

namespace adakv::eval {
namespace {

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

}  // namespace

std::vector<std::string> extract_numbers(const std::string& text) {
  std::vector<std::string> out;
  std::string cur;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (is_digit(c)) {
      cur += c;
    } else if (c == ',' && !cur.empty() && i + 1 < text.size() && is_digit(text[i + 1])) {
      continue;
    } else if (!cur.empty()) {
      out.push_back(std::move(cur));
      cur.clear();
    }
  }
  if (!cur.empty()) out.push_back(std::move(cur));
  return out;
}

bool is_correct(const std::string& output, const std::string& answer) {
  if (answer.empty()) return false;
  const auto numbers = extract_numbers(output);
  return std::any_of(numbers.begin(), numbers.end(),
                     [&](const std::string& n) { return n.find(answer) != std::string::npos; });
}

}  // namespace adakv::eval

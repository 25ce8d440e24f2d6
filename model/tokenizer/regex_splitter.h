// One PCRE2 pattern used to cut text into pieces (UTF + UCP, JIT when available).
//
// Subjects may hold invalid UTF-8: the pattern is compiled with PCRE2_MATCH_INVALID_UTF, so an
// invalid byte is never part of a match; it acts like the end of the subject for the pattern
// around it (no match spans it, lookaheads see nothing there).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace adakv::tokenizer {

class RegexSplitter {
 public:
  // Throws std::runtime_error naming the pattern and PCRE2's message if it does not compile.
  explicit RegexSplitter(const std::string& pattern);
  ~RegexSplitter();
  RegexSplitter(RegexSplitter&&) noexcept;
  RegexSplitter& operator=(RegexSplitter&&) noexcept;
  RegexSplitter(const RegexSplitter&) = delete;
  RegexSplitter& operator=(const RegexSplitter&) = delete;

  // Appends to out, in order, every match of the pattern in subject and every non-empty stretch
  // between matches (as in llama.cpp's regex splitting), so the appended views concatenate to
  // subject. Safe to call from several threads at once.
  void split(std::string_view subject, std::vector<std::string_view>& out) const;

  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8*
};

}  // namespace adakv::tokenizer

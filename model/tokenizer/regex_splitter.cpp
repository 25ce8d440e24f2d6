#include "model/tokenizer/regex_splitter.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <memory>
#include <stdexcept>
#include <utility>

namespace adakv::tokenizer {

namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  if (pcre2_get_error_message(code, buf, sizeof(buf)) < 0) return "error " + std::to_string(code);
  return reinterpret_cast<const char*>(buf);
}

struct MatchDataDeleter {
  void operator()(pcre2_match_data* md) const { pcre2_match_data_free(md); }
};

// Length of the character at s[pos] when it is a plausible UTF-8 lead, else 1; only used to
// step over an empty match, which the shipped patterns never produce.
size_t char_len(std::string_view s, size_t pos) {
  const auto c = static_cast<unsigned char>(s[pos]);
  size_t n = c < 0xC0 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
  return std::min(n, s.size() - pos);
}

}  // namespace

RegexSplitter::RegexSplitter(const std::string& pattern) : pattern_(pattern) {
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                    PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &err_offset, nullptr);
  if (code == nullptr) {
    throw std::runtime_error("tokenizer: bad pre-tokenizer pattern '" + pattern + "' at offset " +
                             std::to_string(err_offset) + ": " + pcre2_message(err));
  }
  // JIT is an optimisation only: without it (unsupported platform) the interpreter runs.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  code_ = code;
}

RegexSplitter::~RegexSplitter() {
  if (code_ != nullptr) pcre2_code_free(static_cast<pcre2_code*>(code_));
}

RegexSplitter::RegexSplitter(RegexSplitter&& o) noexcept
    : pattern_(std::move(o.pattern_)), code_(std::exchange(o.code_, nullptr)) {}

RegexSplitter& RegexSplitter::operator=(RegexSplitter&& o) noexcept {
  if (this != &o) {
    if (code_ != nullptr) pcre2_code_free(static_cast<pcre2_code*>(code_));
    pattern_ = std::move(o.pattern_);
    code_ = std::exchange(o.code_, nullptr);
  }
  return *this;
}

void RegexSplitter::split(std::string_view subject, std::vector<std::string_view>& out) const {
  const auto* code = static_cast<const pcre2_code*>(code_);
  std::unique_ptr<pcre2_match_data, MatchDataDeleter> md(
      pcre2_match_data_create_from_pattern(code, nullptr));
  if (!md) throw std::bad_alloc();
  const auto* data = reinterpret_cast<PCRE2_SPTR>(subject.data());
  size_t pos = 0;  // everything before pos has been emitted
  size_t start = 0;
  while (start < subject.size()) {
    const int rc = pcre2_match(code, data, subject.size(), start, 0, md.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      throw std::runtime_error("tokenizer: matching '" + pattern_ + "' failed at byte " +
                               std::to_string(start) + ": " + pcre2_message(rc));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    const size_t m0 = ov[0], m1 = ov[1];
    if (m1 == m0) {
      start = m0 + char_len(subject, m0);
      continue;
    }
    if (m0 > pos) out.push_back(subject.substr(pos, m0 - pos));
    out.push_back(subject.substr(m0, m1 - m0));
    pos = start = m1;
  }
  if (pos < subject.size()) out.push_back(subject.substr(pos));
}

}  // namespace adakv::tokenizer

#include "model/tokenizer/pretokenizer.h"

#include <algorithm>
#include <array>
#include <stdexcept>

namespace adakv::tokenizer {

namespace {

constexpr const char* kGpt2 =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Llama 3's pattern as its tokenizer.json writes it. The contractions are caseless in the
// Unicode sense, as in HF tokenizers (Oniguruma) and tiktoken: "'\u017F" (long s) is one, which
// an ASCII-only '[sS]' would miss.
constexpr const char* kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|)"
    R"(\s*[\r\n]+|\s+(?!\S)|\s+)";

// Qwen2's pattern (its tokenizer.json): Llama 3's with every digit its own piece, and the
// contractions matched case-insensitively as Hugging Face writes them.
constexpr const char* kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|)"
    R"(\s*[\r\n]+|\s+(?!\S)|\s+)";

constexpr std::array kDigitsThenGpt2 = {"smollm",    "starcoder", "refact",    "command-r",
                                        "codeshell", "exaone",    "minerva-7b"};
constexpr std::array kGpt2Names = {"gpt2",  "gpt-2",   "mpt",     "olmo",    "jais",
                                   "phi-2", "jina-es", "jina-de", "trillion"};
constexpr std::array kLlama3Names = {"llama3",  "llama-v3", "llama-bpe",
                                     "falcon3", "dbrx",     "smaug-bpe"};

template <size_t N>
bool one_of(const std::string& name, const std::array<const char*, N>& names) {
  return std::any_of(names.begin(), names.end(), [&](const char* n) { return name == n; });
}

// PCRE2's \s in UCP mode also matches U+180E MONGOLIAN VOWEL SEPARATOR (via \h), which
// Unicode no longer counts as white space; HF tokenizers (Oniguruma) and llama.cpp do not treat it
// as space. So \s and \S are rewritten to the White_Space property.
std::string white_space_property(const std::string& pattern) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '\\' && i + 1 < pattern.size()) {
      const char next = pattern[++i];
      if (next == 's') {
        out += R"(\p{White_Space})";
      } else if (next == 'S') {
        out += R"(\P{White_Space})";
      } else {
        out += '\\';
        out += next;
      }
    } else {
      out += pattern[i];
    }
  }
  return out;
}

}  // namespace

std::vector<std::string> pretokenizer_patterns(const std::string& name) {
  if (one_of(name, kDigitsThenGpt2)) return {R"(\p{N})", kGpt2};
  if (one_of(name, kGpt2Names)) return {kGpt2};
  if (one_of(name, kLlama3Names)) return {kLlama3};
  if (name == "qwen2") return {kQwen2};
  if (name == "default") {
    return {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2, R"(\p{N}+)", "[0-9][0-9][0-9]"};
  }
  std::string known = "default";
  for (const char* n : kDigitsThenGpt2) known += std::string(", ") + n;
  for (const char* n : kGpt2Names) known += std::string(", ") + n;
  for (const char* n : kLlama3Names) known += std::string(", ") + n;
  known += ", qwen2";
  throw std::runtime_error("tokenizer: unknown pre-tokenizer '" + name +
                           "' (tokenizer.ggml.pre); known: " + known);
}

bool pretokenizer_ignores_merges(const std::string& name) {
  return name == "llama3" || name == "llama-v3" || name == "llama-bpe" || name == "falcon3";
}

PreTokenizer::PreTokenizer(const std::string& name) : name_(name) {
  for (const auto& p : pretokenizer_patterns(name)) stages_.emplace_back(white_space_property(p));
}

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& pieces) const {
  if (text.empty()) return;
  std::vector<std::string_view> current{text};
  std::vector<std::string_view> next;
  for (size_t s = 0; s < stages_.size(); ++s) {
    std::vector<std::string_view>& dst = s + 1 == stages_.size() ? pieces : next;
    for (std::string_view piece : current) stages_[s].split(piece, dst);
    if (&dst == &next) {
      current.swap(next);
      next.clear();
    }
  }
}

}  // namespace adakv::tokenizer

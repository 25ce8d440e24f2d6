#include "model/hf/hf_tokenizer_pre.h"

#include <stdexcept>

#include "model/tokenizer/pretokenizer.h"

namespace adakv::hf {

namespace {

using nlohmann::json;

constexpr const char* kMetaSpace = "\xE2\x96\x81";  // U+2581

std::string type_of(const json& j) {
  if (!j.is_object()) return "";
  auto it = j.find("type");
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

bool flag(const json& j, const char* key, bool fallback) {
  auto it = j.find(key);
  return it != j.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

std::string string_field(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

[[noreturn]] void unsupported(const std::string& file, const std::string& what) {
  throw std::runtime_error(file + ": pre_tokenizer " + what +
                           " is not one adakv implements (known: ByteLevel; Digits then "
                           "ByteLevel; a Split of the gpt-2, llama-bpe or qwen2 pattern then "
                           "ByteLevel)");
}

// The name whose single-stage pattern is exactly `pattern`, "" when none.
std::string name_of_pattern(const std::string& pattern) {
  for (const char* name : {"llama-bpe", "qwen2", "gpt-2"}) {
    const auto stages = tokenizer::pretokenizer_patterns(name);
    if (stages.size() == 1 && stages[0] == pattern) return name;
  }
  return "";
}

}  // namespace

std::string byte_level_pre_name(const json& pre, const std::string& file) {
  const std::string type = type_of(pre);
  if (type == "ByteLevel") {
    if (!flag(pre, "use_regex", true)) unsupported(file, "ByteLevel without its regex");
    if (flag(pre, "add_prefix_space", false)) unsupported(file, "ByteLevel with add_prefix_space");
    return "gpt-2";
  }
  if (type != "Sequence") unsupported(file, "'" + (type.empty() ? pre.dump() : type) + "'");
  const json& stages = pre.value("pretokenizers", json::array());
  if (stages.size() != 2 || type_of(stages[1]) != "ByteLevel") {
    unsupported(file, "Sequence " + pre.dump());
  }
  const json& first = stages[0];
  const json& byte_level = stages[1];
  if (flag(byte_level, "add_prefix_space", false)) {
    unsupported(file, "ByteLevel with add_prefix_space");
  }
  const std::string first_type = type_of(first);
  if (first_type == "Digits") {
    if (!flag(first, "individual_digits", false) || !flag(byte_level, "use_regex", true)) {
      unsupported(file, "Sequence " + pre.dump());
    }
    return "smollm";
  }
  if (first_type == "Split") {
    const json pattern = first.value("pattern", json::object());
    if (!pattern.is_object() || !pattern.contains("Regex") || !pattern["Regex"].is_string()) {
      unsupported(file, "Split on " + pattern.dump() + " (not a Regex)");
    }
    if (string_field(first, "behavior") != "Isolated" || flag(first, "invert", false) ||
        flag(byte_level, "use_regex", true)) {
      unsupported(file, "Sequence " + pre.dump());
    }
    const std::string regex = pattern["Regex"].get<std::string>();
    const std::string name = name_of_pattern(regex);
    if (name.empty()) unsupported(file, "Split pattern '" + regex + "'");
    return name;
  }
  unsupported(file, "Sequence " + pre.dump());
}

bool spm_add_space_prefix(const json& normalizer, const json& pre, const std::string& file) {
  if (type_of(pre) == "Metaspace") {
    if (string_field(pre, "replacement") != kMetaSpace || flag(pre, "split", false)) {
      throw std::runtime_error(file + ": pre_tokenizer Metaspace " + pre.dump() +
                               " is not SentencePiece's (replacement \"\xE2\x96\x81\", no split)");
    }
    if (pre.contains("prepend_scheme") && pre["prepend_scheme"].is_string()) {
      return pre["prepend_scheme"].get<std::string>() != "never";
    }
    return flag(pre, "add_prefix_space", true);
  }
  if (!pre.is_null()) {
    throw std::runtime_error(file + ": pre_tokenizer " + pre.dump() +
                             " is not supported with a byte-fallback BPE (known: none, Metaspace)");
  }
  // Sequence[Prepend("▁"), Replace(" ", "▁")], the Prepend being optional.
  json steps = json::array();
  if (type_of(normalizer) == "Sequence") {
    steps = normalizer.value("normalizers", json::array());
  } else if (!normalizer.is_null()) {
    steps.push_back(normalizer);
  }
  bool prepend = false;
  bool replace = false;
  for (const json& step : steps) {
    const std::string type = type_of(step);
    if (type == "Prepend" && string_field(step, "prepend") == kMetaSpace) {
      prepend = true;
    } else if (type == "Replace" &&
               step.value("pattern", json::object()).value("String", "") == " " &&
               string_field(step, "content") == kMetaSpace) {
      replace = true;
    } else {
      throw std::runtime_error(file + ": normalizer step " + step.dump() +
                               " is not supported with a byte-fallback BPE (known: Prepend(\"" +
                               kMetaSpace + "\"), Replace(\" \", \"" + kMetaSpace + "\"))");
    }
  }
  if (!replace) {
    throw std::runtime_error(
        file +
        ": neither normalizer nor pre_tokenizer turns spaces into \"\xE2\x96\x81\" "
        "(a byte-fallback BPE needs Replace(\" \", \"\xE2\x96\x81\") or Metaspace)");
  }
  return prepend;
}

}  // namespace adakv::hf

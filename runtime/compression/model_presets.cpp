#include "runtime/compression/model_presets.h"

#include <algorithm>
#include <cctype>
#include <filesystem>

namespace adakv::compression {
namespace {

namespace fs = std::filesystem;

// Lower case; characters outside [a-z0-9._-] become '-'; no leading dots (no "..").
std::string preset_name(const std::string& s) {
  std::string out;
  for (unsigned char ch : s) {
    const char c = static_cast<char>(std::tolower(ch));
    const bool keep =
        std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
    out += keep ? c : '-';
  }
  out.erase(0, out.find_first_not_of('.'));
  return out;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  return s;
}

// "q4_1", "Q4_K_M", "iq2_xs", "f16", "bf16", "f32": a quantisation tag of a file name.
bool quant_tag(std::string t) {
  t = lower(t);
  if (t == "f16" || t == "f32" || t == "bf16") return true;
  if (t.rfind("iq", 0) == 0) t.erase(0, 1);
  return t.size() >= 2 && t[0] == 'q' && std::isdigit(static_cast<unsigned char>(t[1]));
}

// Normal form without a trailing separator ("/a/b/../c/" -> "/a/c").
std::string normal(const fs::path& p) {
  std::string s = p.lexically_normal().string();
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

}  // namespace

std::vector<std::string> model_preset_names(const std::string& basename,
                                            const std::string& size_label,
                                            const std::string& model_path) {
  std::vector<std::string> names;
  auto add = [&names](const std::string& raw) {
    const std::string n = preset_name(raw);
    if (!n.empty() && std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
  };
  if (!basename.empty()) {
    if (!size_label.empty()) add(basename + "-" + size_label);
    add(basename);
  }
  std::string stem = fs::path(model_path).filename().string();
  if (stem.size() > 5 && lower(stem.substr(stem.size() - 5)) == ".gguf") {
    stem.resize(stem.size() - 5);
  }
  if (const size_t dot = stem.rfind('.');
      dot != std::string::npos && quant_tag(stem.substr(dot + 1))) {
    stem.resize(dot);
  }
  for (;;) {
    add(stem);
    const size_t dash = stem.rfind('-');
    if (dash == std::string::npos || dash == 0) break;
    stem.resize(dash);
  }
  return names;
}

std::vector<std::string> config_dirs(const char* env, const std::string& exe_path,
                                     const std::string& builtin) {
  if (env && *env) return {env};
  std::vector<std::string> dirs;
  if (!exe_path.empty()) {
    const fs::path bin = fs::path(exe_path).parent_path();
    dirs.push_back(normal(bin / ".." / "configs"));
    dirs.push_back(normal(bin / ".." / "share" / "adakv" / "configs"));
  }
  if (!builtin.empty()) {
    const std::string b = normal(builtin);
    if (std::find(dirs.begin(), dirs.end(), b) == dirs.end()) dirs.push_back(b);
  }
  return dirs;
}

std::optional<PresetMatch> find_preset(const std::vector<std::string>& names,
                                       const std::vector<std::string>& dirs) {
  for (const auto& dir : dirs) {
    for (const auto& name : names) {
      const fs::path p = fs::path(dir) / "compression" / (name + ".yaml");
      std::error_code ec;
      if (fs::is_regular_file(p, ec)) return PresetMatch{name, p.lexically_normal().string()};
    }
  }
  return std::nullopt;
}

CompressionConfig generate_builtin_defaults() {
  CompressionConfig c;
  c.min_keep = kGenerateMinKeep;
  return c;
}

ModelDefaults model_defaults(const std::vector<std::string>& names,
                             const std::vector<std::string>& dirs,
                             const CompressionConfig& defaults) {
  ModelDefaults g{defaults, ""};
  if (const auto match = find_preset(names, dirs)) {
    g.config = load_preset(match->path, defaults);
    g.source = "preset " + match->path + " (model " + match->name + ")";
    return g;
  }
  std::string looked;
  for (const auto& d : dirs) looked += (looked.empty() ? "" : ", ") + d + "/compression";
  g.source = "built-in defaults (no preset " +
             (names.empty() ? std::string("for the model") : names.front() + ".yaml") +
             (looked.empty() ? std::string(")") : " in " + looked + ")");
  return g;
}

}  // namespace adakv::compression

// The compression preset a model gets by default (adakv generate): configs/compression/<name>.yaml
// where <name> is what the GGUF calls the model. SmolLM2-135M-Instruct (general.basename
// "smollm2", general.size_label "135M") -> configs/compression/smollm2-135m.yaml.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "runtime/compression/config.h"

namespace adakv::compression {

// Preset names a model may go by, most specific first, lower case, every character outside
// [a-z0-9._] turned into '-': "<basename>-<size_label>" and "<basename>" from the GGUF metadata
// (either may be empty), then the file name without ".gguf" and its quantisation suffix, with
// trailing "-part"s dropped one by one (SmolLM2-135M-Instruct.Q4_1.gguf -> smollm2-135m-instruct,
// smollm2-135m, smollm2). No duplicates.
std::vector<std::string> model_preset_names(const std::string& basename,
                                            const std::string& size_label,
                                            const std::string& model_path);

// The folders that may hold compression/<name>.yaml, in search order: `env` ($ADAKV_CONFIGS)
// alone when it is set and not empty; else <folder of exe>/../configs (build/adakv ->
// configs/), <folder of exe>/../share/adakv/configs (an install), then `builtin` (the source
// tree's configs/, compiled in) when not empty. Folders that do not exist are kept: the
// caller reports where it looked.
std::vector<std::string> config_dirs(const char* env, const std::string& exe_path,
                                     const std::string& builtin);

struct PresetMatch {
  std::string name;  // the preset's name ("smollm2-135m")
  std::string path;  // <dir>/compression/<name>.yaml
};
// The first <dir>/compression/<name>.yaml that is a regular file, names tried in order in each
// folder before the next folder.
std::optional<PresetMatch> find_preset(const std::vector<std::string>& names,
                                       const std::vector<std::string>& dirs);

// The built-in settings of `adakv generate`: the official ones with min_keep kGenerateMinKeep.
CompressionConfig generate_builtin_defaults();

// The settings a model starts from before the command line's flags: its preset when one is
// found in `dirs` (keys it leaves out keep their value in `defaults`), else `defaults`.
// With the default `defaults`, what `adakv generate` uses when no flag is given.
struct ModelDefaults {
  CompressionConfig config;
  // "preset /x/configs/compression/smollm2-135m.yaml (model smollm2-135m)", or
  // "built-in defaults (no preset smollm2-135m.yaml in /x/configs/compression)".
  std::string source;
};
ModelDefaults model_defaults(const std::vector<std::string>& names,
                             const std::vector<std::string>& dirs,
                             const CompressionConfig& defaults = generate_builtin_defaults());

}  // namespace adakv::compression

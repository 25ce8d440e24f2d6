// Where models live: `--model` takes a path or the name of the default model, which the setup
// fetches into $ADAKV_HOME/models (default ~/.cache/adakv/models).
#pragma once

#include <string>

namespace adakv::runtime {

inline constexpr const char* kDefaultModelName = "SmolLM2-135M-Instruct";
inline constexpr const char* kDefaultModelFile = "SmolLM2-135M-Instruct.Q4_1.gguf";

// $ADAKV_HOME, or ~/.cache/adakv.
std::string adakv_home();

// A path that exists, the default model's name (or file name), or "" for the default model.
// Throws std::runtime_error saying how to fetch the model when it is not there.
std::string resolve_model(const std::string& spec);

}  // namespace adakv::runtime

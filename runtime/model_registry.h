// Where models live: `--model` takes a path (a GGUF file or a Hugging Face checkpoint directory)
// or the name of a model the setup fetches into
// $ADAKV_HOME/models (default ~/.cache/adakv/models): the default model, or one of the others
// cluster/setup-node.sh knows.
#pragma once

#include <string>
#include <vector>

namespace adakv::runtime {

inline constexpr const char* kDefaultModelName = "SmolLM2-135M-Instruct";
inline constexpr const char* kDefaultModelFile = "SmolLM2-135M-Instruct.Q4_1.gguf";

// A model the setup fetches by name.
struct KnownModel {
  const char* name;  // what `--model` takes (the file name works too)
  const char* file;  // under $ADAKV_HOME/models
  const char* what;  // one line for errors and help
};

// The default model first.
const std::vector<KnownModel>& known_models();

// $ADAKV_HOME, or ~/.cache/adakv.
std::string adakv_home();

// A path that exists (a GGUF file or a checkpoint directory, model/model_file.h), a known
// model's name (or file name), or "" for the default model.
// Throws std::runtime_error saying how to fetch a known model that is not there, and naming the
// known models when spec is neither a file nor one of them.
std::string resolve_model(const std::string& spec);

// $ADAKV_HOME/models/FILE of the known model `name` (or file name), whether or not it is there;
// "" when no known model has that name.
std::string known_model_path(const std::string& name);

}  // namespace adakv::runtime

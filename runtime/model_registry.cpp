#include "runtime/model_registry.h"

#include <cstdlib>
#include <filesystem>
#include <stdexcept>

namespace adakv::runtime {

namespace {

const KnownModel* find_known(const std::string& spec) {
  for (const KnownModel& m : known_models()) {
    if (spec == m.name || spec == m.file) return &m;
  }
  return nullptr;
}

// How cluster/setup-node.sh fetches `m`.
std::string fetch_command(const KnownModel& m) {
  if (&m == &known_models().front()) {
    return "`make setup` (cluster/setup-node.sh)";
  }
  return std::string("`bash cluster/setup-node.sh model ") + m.name + "`";
}

}  // namespace

const std::vector<KnownModel>& known_models() {
  static const std::vector<KnownModel> models = {
      {kDefaultModelName, kDefaultModelFile, "the default model (llama, 8k context)"},
      {"qwen2.5-coder-0.5b", "Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf",
       "Qwen2.5-Coder-0.5B-Instruct, Q4_K_M (qwen2, 32k context)"},
  };
  return models;
}

std::string adakv_home() {
  if (const char* h = std::getenv("ADAKV_HOME"); h && *h) return h;
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : ".") + "/.cache/adakv";
}

std::string known_model_path(const std::string& name) {
  const KnownModel* m = find_known(name);
  return m ? adakv_home() + "/models/" + m->file : std::string();
}

std::string resolve_model(const std::string& spec) {
  namespace fs = std::filesystem;
  const KnownModel* m = spec.empty() ? &known_models().front() : find_known(spec);
  if (m == nullptr) {
    if (fs::exists(spec)) return spec;
    std::string known;
    for (const KnownModel& k : known_models()) {
      known += std::string(known.empty() ? "" : ", ") + k.name;
    }
    throw std::runtime_error("model not found: " + spec +
                             " is neither a GGUF file, a Hugging Face checkpoint directory, nor "
                             "a model name (" +
                             known + ")");
  }
  const std::string path = adakv_home() + "/models/" + m->file;
  if (!fs::exists(path)) {
    const std::string which =
        m == &known_models().front() ? "the default model" : std::string("the model ") + m->name;
    throw std::runtime_error(which + " is not at " + path + "; fetch it with " + fetch_command(*m));
  }
  return path;
}

}  // namespace adakv::runtime

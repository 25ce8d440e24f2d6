#include "runtime/model_registry.h"

#include <cstdlib>
#include <filesystem>
#include <stdexcept>

namespace adakv::runtime {

std::string adakv_home() {
  if (const char* h = std::getenv("ADAKV_HOME"); h && *h) return h;
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : ".") + "/.cache/adakv";
}

std::string resolve_model(const std::string& spec) {
  namespace fs = std::filesystem;
  if (!spec.empty() && spec != kDefaultModelName && spec != kDefaultModelFile) {
    if (!fs::exists(spec)) throw std::runtime_error("model file not found: " + spec);
    return spec;
  }
  const std::string path = adakv_home() + "/models/" + kDefaultModelFile;
  if (!fs::exists(path)) {
    throw std::runtime_error("the default model is not at " + path +
                             "; fetch it with `make setup` (cluster/setup-node.sh)");
  }
  return path;
}

}  // namespace adakv::runtime

// YAML cluster configs (configs/cluster/*.yaml): parse_cluster_config gives a validated config
// or throws ConfigError naming the file and key; no other exception (a yaml-cpp conversion error
// would reach the user without the file's name), no crash.
#include "launcher/cluster/cluster_config.h"

#include <cstddef>
#include <cstdint>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const adakv::cluster::ClusterConfig c =
        adakv::cluster::parse_cluster_config(text, "fuzz.yaml", "/nonexistent-base");
    c.validate();
  } catch (const adakv::cluster::ConfigError&) {
  }
  return 0;
}

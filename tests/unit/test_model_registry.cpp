// `--model` names: the models the setup fetches resolve under $ADAKV_HOME/models; a name that is
// neither a file nor a known model is an error listing the known ones.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include "runtime/model_registry.h"

namespace adakv::runtime {
namespace {

// $ADAKV_HOME pointed at a fresh directory for the test's life.
class ScopedHome {
 public:
  ScopedHome() : dir_(std::filesystem::temp_directory_path() / "adakv-registry-test") {
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_ / "models");
    if (const char* h = std::getenv("ADAKV_HOME")) saved_ = h;
    setenv("ADAKV_HOME", dir_.c_str(), 1);
  }
  ~ScopedHome() {
    if (saved_.empty()) {
      unsetenv("ADAKV_HOME");
    } else {
      setenv("ADAKV_HOME", saved_.c_str(), 1);
    }
    std::filesystem::remove_all(dir_);
  }
  std::filesystem::path models() const { return dir_ / "models"; }

 private:
  std::filesystem::path dir_;
  std::string saved_;
};

std::string error_of(const std::string& spec) {
  try {
    resolve_model(spec);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "no error";
}

TEST(ModelRegistry, KnownNamesResolveUnderTheHome) {
  const ScopedHome home;
  const std::string qwen = (home.models() / "Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf").string();
  EXPECT_EQ(known_model_path("qwen2.5-coder-0.5b"), qwen);
  EXPECT_EQ(known_model_path("Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf"), qwen);
  EXPECT_EQ(known_model_path("no-such-model"), "");
  // Not fetched yet: the error says how.
  const std::string e = error_of("qwen2.5-coder-0.5b");
  EXPECT_NE(e.find("cluster/setup-node.sh model qwen2.5-coder-0.5b"), std::string::npos) << e;
  EXPECT_NE(error_of("").find("make setup"), std::string::npos);
  std::ofstream(qwen) << "x";
  EXPECT_EQ(resolve_model("qwen2.5-coder-0.5b"), qwen);
  const std::string smol = (home.models() / kDefaultModelFile).string();
  std::ofstream(smol) << "x";
  EXPECT_EQ(resolve_model(""), smol);
  EXPECT_EQ(resolve_model(kDefaultModelName), smol);
}

TEST(ModelRegistry, ADirectoryResolvesToItself) {
  const ScopedHome home;
  const std::string dir = (home.models() / "tiny-checkpoint").string();
  std::filesystem::create_directories(dir);
  EXPECT_EQ(resolve_model(dir), dir);
}

TEST(ModelRegistry, AnUnknownNameListsTheKnownOnes) {
  const ScopedHome home;
  const std::string e = error_of("qwen3-moe");
  for (const char* want : {"qwen3-moe", "SmolLM2-135M-Instruct", "qwen2.5-coder-0.5b"}) {
    EXPECT_NE(e.find(want), std::string::npos) << e;
  }
}

}  // namespace
}  // namespace adakv::runtime

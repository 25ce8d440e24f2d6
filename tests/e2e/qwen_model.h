// The real Qwen2.5 model for the qwen2 oracle tests: $ADAKV_QWEN_MODEL, else the file
// `cluster/setup-node.sh model qwen2.5-coder-0.5b` fetches. Unlike the default model it is
// optional: its tests report Skipped (with this reason) where it is not there.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "runtime/model_registry.h"

namespace adakv::test {

inline constexpr const char* kQwenModelName = "qwen2.5-coder-0.5b";

inline std::string qwen_model_path() {
  const char* env = std::getenv("ADAKV_QWEN_MODEL");
  return env && *env ? env : adakv::runtime::known_model_path(kQwenModelName);
}

// "" when the model is there, else why its tests skip.
inline std::string qwen_model_missing() {
  const std::string path = qwen_model_path();
  if (std::filesystem::exists(path)) return "";
  return "the Qwen2.5 model is not at " + path +
         " (fetch it with `bash cluster/setup-node.sh model qwen2.5-coder-0.5b`, or set "
         "ADAKV_QWEN_MODEL)";
}

}  // namespace adakv::test

// In a test body or SetUp(): skips the test, saying why, without the Qwen model.
#define ADAKV_SKIP_WITHOUT_QWEN()                                                \
  do {                                                                           \
    if (const std::string why = adakv::test::qwen_model_missing(); !why.empty()) \
      GTEST_SKIP() << why;                                                       \
  } while (0)

// The real default model for end-to-end tests: $ADAKV_MODEL, else the file the setup fetched.
// A missing model is a test failure with the fix in the message, never a silent skip.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "runtime/model_registry.h"

namespace adakv::test {

inline std::string model_path() {
  const char* env = std::getenv("ADAKV_MODEL");
  return adakv::runtime::resolve_model(env && *env ? env : "");
}

}  // namespace adakv::test

// GGUF files of the tiny Hugging Face checkpoints (tests/e2e/tiny_hf_models.h), written once per
// test process beside them by tests/tools/make_tiny_gguf_models.py, which proves them equal in
// content to llama.cpp's own conversion (tests/data/tiny_gguf_manifest.json) before the tests
// use them. Without the checkpoints or a python with numpy and gguf ($ADAKV_HOME/venv's, which
// `bash cluster/setup-node.sh tiny-hf` prepares, else python3) the tests skip, saying why; a
// GGUF that differs from llama.cpp's conversion fails them.
#pragma once

#include <string>

#include "runtime/model_registry.h"
#include "tests/e2e/run_adakv.h"
#include "tests/e2e/tiny_hf_models.h"

namespace adakv::test {

class TinyGgufModels {
 public:
  TinyGgufModels() {
    const TinyHfModels& hf = tiny_hf_models();
    if (!hf.missing().empty()) {
      missing_ = hf.missing();
      return;
    }
    std::string python;
    for (const std::string& py :
         {runtime::adakv_home() + "/venv/bin/python", std::string("python3")}) {
      if (run_command(py + " -c 'import numpy, gguf'").rc == 0) {
        python = py;
        break;
      }
    }
    if (python.empty()) {
      missing_ =
          "no python with numpy and gguf to write the tiny GGUFs (run `bash "
          "cluster/setup-node.sh tiny-hf`)";
      return;
    }
    // Inside the checkpoints' temp directory, which TinyHfModels removes at exit.
    const std::string out = hf.root() + "/gguf";
    const std::string script =
        std::string(ADAKV_TEST_DATA_DIR) + "/../tools/make_tiny_gguf_models.py";
    const Run r = run_command(python + " " + script + " " + hf.root() + " " + out);
    if (r.rc != 0) {
      error_ = "make_tiny_gguf_models.py failed:\n" + r.err;
      return;
    }
    root_ = out;
  }

  // "" when the files can be made, else why not (skip).
  const std::string& missing() const { return missing_; }
  // "" unless the files were made wrong, e.g. not as llama.cpp converts (fail).
  const std::string& error() const { return error_; }
  std::string file(const std::string& model) const { return root_ + "/" + model + ".gguf"; }

 private:
  std::string root_, missing_, error_;
};

inline const TinyGgufModels& tiny_gguf_models() {
  static const TinyGgufModels models;
  return models;
}

}  // namespace adakv::test

// In SetUp(): skips the test, saying why, without the tiny GGUFs; fails it where they were
// written wrong.
#define ADAKV_REQUIRE_TINY_GGUF()                                                   \
  do {                                                                              \
    const adakv::test::TinyGgufModels& tiny_gguf = adakv::test::tiny_gguf_models(); \
    if (!tiny_gguf.missing().empty()) GTEST_SKIP() << tiny_gguf.missing();          \
    if (!tiny_gguf.error().empty()) GTEST_FAIL() << tiny_gguf.error();              \
  } while (0)

// The tiny Hugging Face checkpoints of tests/tools/make_tiny_hf_models.py, made once per test
// process in a temp directory (removed at exit) by a python that has numpy and tokenizers
// ($ADAKV_HOME/venv's, which `bash cluster/setup-node.sh tiny-hf` prepares, else python3).
// Tests skip, saying why, where no python has them.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

#include "runtime/model_registry.h"
#include "tests/e2e/run_adakv.h"

namespace adakv::test {

class TinyHfModels {
 public:
  TinyHfModels() {
    const std::string script =
        std::string(ADAKV_TEST_DATA_DIR) + "/../tools/make_tiny_hf_models.py";
    std::string python;
    for (const std::string& py :
         {runtime::adakv_home() + "/venv/bin/python", std::string("python3")}) {
      if (run_command(py + " -c 'import numpy, tokenizers'").rc == 0) {
        python = py;
        break;
      }
    }
    if (python.empty()) {
      missing_ =
          "no python with numpy and tokenizers to make the tiny checkpoints (run `bash "
          "cluster/setup-node.sh tiny-hf`)";
      return;
    }
    const auto root =
        std::filesystem::temp_directory_path() / ("adakv-tiny-hf-" + std::to_string(::getpid()));
    const Run r = run_command(python + " " + script + " " + root.string());
    if (r.rc != 0) {
      missing_ = "make_tiny_hf_models.py failed: " + r.err;
      return;
    }
    root_ = root.string();
  }
  ~TinyHfModels() {
    std::error_code ec;
    if (!root_.empty()) std::filesystem::remove_all(root_, ec);
  }
  TinyHfModels(const TinyHfModels&) = delete;
  TinyHfModels& operator=(const TinyHfModels&) = delete;

  // "" when the models are there, else why not.
  const std::string& missing() const { return missing_; }
  std::string dir(const std::string& model) const { return root_ + "/" + model; }
  // The directory holding every checkpoint's ("" when missing).
  const std::string& root() const { return root_; }

 private:
  std::string root_, missing_;
};

inline const TinyHfModels& tiny_hf_models() {
  static const TinyHfModels models;
  return models;
}

}  // namespace adakv::test

// In a test body or SetUp(): skips the test, saying why, without the tiny checkpoints.
#define ADAKV_SKIP_WITHOUT_TINY_HF()                                                    \
  do {                                                                                  \
    if (const std::string& why = adakv::test::tiny_hf_models().missing(); !why.empty()) \
      GTEST_SKIP() << why;                                                              \
  } while (0)

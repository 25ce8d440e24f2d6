// eval, eval ppl and profile with an --out they cannot write: a clear error naming the path and
// the OS's reason, before the run when the folder itself is the problem, and at the write when
// the disk is full (a result file that is a link to /dev/full).
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "tests/e2e/model_fixture.h"
#include "tests/e2e/run_adakv.h"

namespace {

namespace fs = std::filesystem;
using adakv::test::adakv;
using Result = adakv::test::Run;

class OutputErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("adakv-out-errors-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    // A regular file where --out expects a folder.
    not_a_dir_ = dir_ / "results.txt";
    std::ofstream(not_a_dir_) << "not a folder\n";
  }
  void TearDown() override { fs::remove_all(dir_); }

  static std::string model() { return "--model '" + adakv::test::model_path() + "'"; }
  // A folder whose result file `name` is a link to /dev/full: every write to it fails ENOSPC.
  fs::path full_disk_out(const std::string& name) {
    const fs::path out = dir_ / "full";
    fs::create_directories(out);
    fs::create_symlink("/dev/full", out / name);
    return out;
  }
  static void expect_names(const Result& r, const std::string& path, const std::string& reason) {
    EXPECT_NE(r.rc, 0) << r.err;
    EXPECT_NE(r.err.find("cannot write " + path + ": " + reason), std::string::npos) << r.err;
  }

  fs::path dir_, not_a_dir_;
};

// Many long contexts: minutes of work if the folder were checked only at the end.
const char* kLongPpl = " --lengths 4096 --trials 50 --continuation 128 --threads 1";

TEST_F(OutputErrors, EvalPplRefusesAFileAsItsFolderBeforeTheRun) {
  const std::string out = (not_a_dir_ / "ppl").string();
  const Result r = adakv("eval ppl " + model() + kLongPpl + " --out '" + out + "'");
  expect_names(r, out, std::strerror(ENOTDIR));
  EXPECT_EQ(r.err.find("[eval]"), std::string::npos) << "the run started:\n" << r.err;
}

// sysfs takes no regular files, root or not: the folder exists, the probe file cannot be made.
TEST_F(OutputErrors, EvalPplRefusesAFolderItCannotCreateFilesIn) {
  const Result r = adakv("eval ppl " + model() + kLongPpl + " --out /sys");
  EXPECT_NE(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("cannot write /sys: "), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("[eval]"), std::string::npos) << "the run started:\n" << r.err;
}

TEST_F(OutputErrors, EvalPplNamesTheFileOnAFullDisk) {
  const fs::path out = full_disk_out("ppl_table.txt");
  const Result r = adakv("eval ppl " + model() +
                         " --lengths 64 --trials 1 --continuation 8 --policies full --threads 1"
                         " --out '" +
                         out.string() + "'");
  expect_names(r, (out / "ppl_table.txt").string(), std::strerror(ENOSPC));
}

TEST_F(OutputErrors, EvalRefusesAFileAsItsFolderBeforeTheRun) {
  const std::string out = (not_a_dir_ / "passkey").string();
  const Result r = adakv("eval passkey " + model() +
                         " --lengths 4000 --trials 20 --threads 1 --out '" + out + "'");
  expect_names(r, out, std::strerror(ENOTDIR));
  EXPECT_EQ(r.err.find("[eval]"), std::string::npos) << "the run started:\n" << r.err;
}

TEST_F(OutputErrors, EvalNamesTheFileOnAFullDisk) {
  const fs::path out = full_disk_out("passkey_table.txt");
  const Result r =
      adakv("eval passkey " + model() +
            " --lengths 200 --depths 50 --trials 1 --policies full --threads 1 --out '" +
            out.string() + "'");
  expect_names(r, (out / "passkey_table.txt").string(), std::strerror(ENOSPC));
}

TEST_F(OutputErrors, ProfileRefusesAFileAsItsFolderBeforeThePrefill) {
  // About 7,000 tokens: a prefill of many seconds on CPU if the folder were checked after it.
  const std::string gpl = adakv::test::slurp("/usr/share/common-licenses/GPL-3");
  ASSERT_GT(gpl.size(), 30000u) << "/usr/share/common-licenses/GPL-3 is missing";
  const fs::path prompt = dir_ / "prompt.txt";
  std::ofstream(prompt, std::ios::binary) << gpl.substr(0, 30000);
  const std::string out = (not_a_dir_ / "profile").string();
  const auto t0 = std::chrono::steady_clock::now();
  const Result r = adakv("profile " + model() + " --threads 1 --prompt-file '" + prompt.string() +
                         "' --out '" + out + "'");
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  expect_names(r, out, std::strerror(ENOTDIR));
  EXPECT_EQ(r.out, "");
  EXPECT_LT(took, 10.0) << "the error came after the prefill";
}

TEST_F(OutputErrors, ProfileNamesTheFileOnAFullDisk) {
  const fs::path out = full_disk_out("head_budgets.svg");
  const fs::path prompt = dir_ / "prompt.txt";  // longer than the observation window
  std::ofstream(prompt) << "The capital of France is Paris, and the capital of Italy is Rome. "
                           "The capital of Spain is Madrid, and the capital of Portugal is "
                           "Lisbon. The capital of Germany is Berlin, and the capital of Austria "
                           "is Vienna. The capital of Greece is";
  const Result r = adakv("profile " + model() + " --threads 1 --prompt-file '" + prompt.string() +
                         "' --out '" + out.string() + "'");
  expect_names(r, (out / "head_budgets.svg").string(), std::strerror(ENOSPC));
}

}  // namespace

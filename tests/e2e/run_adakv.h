// Runs the `adakv` binary as a user would, for end-to-end tests.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

namespace adakv::test {

struct Run {
  int rc;
  std::string out, err;
};

inline std::string slurp(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// `adakv ARGS` through the shell, capturing stdout, stderr and the exit code.
inline Run adakv(const std::string& args) {
  const auto err_path = std::filesystem::temp_directory_path() /
                        ("adakv-test-" + std::to_string(::getpid()) + ".err");
  const std::string cmd = std::string(ADAKV_BINARY) + " " + args + " 2>" + err_path.string();
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (!pipe) throw std::runtime_error("popen failed");
  Run r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) r.out.append(buf, n);
  const int status = ::pclose(pipe);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.err = slurp(err_path);
  std::filesystem::remove(err_path);
  return r;
}

}  // namespace adakv::test

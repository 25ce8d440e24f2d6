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

// A shell command, capturing stdout, stderr and the exit code.
inline Run run_command(const std::string& command) {
  const auto err_path = std::filesystem::temp_directory_path() /
                        ("adakv-test-" + std::to_string(::getpid()) + ".err");
  const std::string cmd = command + " 2>" + err_path.string();
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

// `adakv ARGS` as a user would run it.
inline Run adakv(const std::string& args) {
  return run_command(std::string(ADAKV_BINARY) + " " + args);
}

// `adakv ARGS` as the `np` ranks of an mpirun job (np = 1 still goes through mpirun).
inline Run adakv_mpi(int np, const std::string& args) {
  return run_command("OMPI_MCA_btl_vader_single_copy_mechanism=none " + std::string(ADAKV_MPIRUN) +
                     " -np " + std::to_string(np) + " " + ADAKV_BINARY + " " + args);
}

}  // namespace adakv::test

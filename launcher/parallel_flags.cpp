#include "launcher/parallel_flags.h"

#include <cstdlib>
#include <stdexcept>
#include <string>

namespace adakv::cli {
namespace {

// `flag` when given, else the environment variable `env` (a positive integer), else 1.
int size_from(int flag, const char* option, const char* env) {
  if (flag != 0) {
    if (flag < 1) {
      throw std::invalid_argument(std::string(option) + " must be >= 1, got " +
                                  std::to_string(flag));
    }
    return flag;
  }
  const char* value = std::getenv(env);
  if (!value || !*value) return 1;
  char* end = nullptr;
  const long n = std::strtol(value, &end, 10);
  if (end == value || *end != '\0' || n < 1 || n > 1 << 20) {
    throw std::invalid_argument(std::string(env) + " is '" + value + "', not a positive integer");
  }
  return static_cast<int>(n);
}

}  // namespace

void ParallelFlags::add_to(CLI::App* app) {
  app->add_option("--pp", pp,
                  "Pipeline stages: each holds a contiguous range of layers, a tensor-parallel "
                  "group of ranks / pp ranks (default: ADAKV_PP_SIZE, else 1)");
  app->add_option(
      "--dp", dp,
      "Data-parallel replicas, each an engine of its own behind one endpoint (serve only; "
      "default: ADAKV_DP_SIZE, else 1)");
}

int ParallelFlags::stages() const {
  return size_from(pp, "--pp", "ADAKV_PP_SIZE");
}

int ParallelFlags::replicas() const {
  return size_from(dp, "--dp", "ADAKV_DP_SIZE");
}

int ParallelFlags::pipeline_stages() const {
  if (replicas() != 1) {
    throw std::invalid_argument(
        "--dp " + std::to_string(replicas()) +
        ": this command runs one engine; data-parallel replicas are for `adakv serve`");
  }
  return stages();
}

}  // namespace adakv::cli

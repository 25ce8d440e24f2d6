// Compression presets (configs/compression/*.yaml): load_preset gives a validated config or
// throws std::invalid_argument naming the file (and the key); no other exception, no crash.
// load_preset reads a path, so each input is written to one temporary file first.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "runtime/compression/config.h"

namespace {

const std::string& preset_path() {
  static const std::string path = [] {
    char name[] = "/tmp/adakv-fuzz-preset-XXXXXX";
    const int fd = mkstemp(name);
    if (fd < 0) std::abort();
    close(fd);
    std::atexit([] { std::remove(preset_path().c_str()); });
    return std::string(name);
  }();
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace adakv::compression;
  FILE* f = std::fopen(preset_path().c_str(), "wb");
  if (f == nullptr) std::abort();
  if (size > 0 && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  try {
    const CompressionConfig c = load_preset(preset_path());
    (void)describe(c);
  } catch (const std::invalid_argument&) {
  }
  return 0;
}

// Reading a whole text file (a prompt, a document) for a subcommand.
#pragma once

#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

namespace adakv::cli {

// The file's bytes; throws std::runtime_error naming the file when it cannot be read.
inline std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace adakv::cli

#include "runtime/svg_output.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace adakv::svg {
namespace {

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string converter_command(const std::string& conv, const std::string& svg,
                              const std::string& png) {
  if (conv == "rsvg-convert")
    return "rsvg-convert -b white -o " + shell_quote(png) + " " + shell_quote(svg);
  return conv + " " + shell_quote(svg) + " " + shell_quote(png);
}

[[noreturn]] void fail_write(const std::string& path, int err) {
  throw std::runtime_error("cannot write " + path + ": " +
                           (err ? std::strerror(err) : "the write failed"));
}

bool is_png(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[8] = {};
  in.read(magic, 8);
  return in.gcount() == 8 && std::string(magic + 1, 3) == "PNG";
}

}  // namespace

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

void prepare_output_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail_write(dir, ec.value());
  if (!fs::is_directory(dir, ec)) fail_write(dir, ENOTDIR);
  const std::string probe =
      (fs::path(dir) / (".adakv-write-probe-" + std::to_string(::getpid()))).string();
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) fail_write(dir, errno);
  const char byte = '\n';
  int err = ::write(fd, &byte, 1) == 1 ? 0 : (errno ? errno : EIO);
  if (::close(fd) != 0 && err == 0) err = errno;
  if (::unlink(probe.c_str()) != 0 && err == 0) err = errno;
  if (err) fail_write(dir, err);
}

void write_text_file(const std::string& path, const std::string& text) {
  errno = 0;
  std::ofstream out(path, std::ios::binary);
  if (!out) fail_write(path, errno);
  out.write(text.data(), std::streamsize(text.size()));
  out.flush();
  if (!out) fail_write(path, errno);
  out.close();
  if (!out) fail_write(path, errno);
}

std::string find_png_converter() {
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::temp_directory_path() / ("adakv-svg-probe-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string svg = (dir / "probe.svg").string(), png = (dir / "probe.png").string();
  write_text_file(svg,
                  "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"8\" height=\"8\"></svg>\n");
  std::string found;
  for (const char* conv : {"rsvg-convert", "magick", "convert"}) {
    const std::string probe = std::string("command -v ") + conv + " >/dev/null 2>&1";
    if (std::system(probe.c_str()) != 0) continue;
    if (svg_to_png(conv, svg, png)) {
      found = conv;
      break;
    }
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
  return found;
}

bool svg_to_png(const std::string& converter, const std::string& svg, const std::string& png) {
  std::error_code ec;
  std::filesystem::remove(png, ec);
  const std::string cmd = converter_command(converter, svg, png) + " >/dev/null 2>&1";
  return std::system(cmd.c_str()) == 0 && is_png(png);
}

}  // namespace adakv::svg

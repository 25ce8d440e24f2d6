// One .safetensors file (Hugging Face's tensor container): an 8-byte little-endian header length,
// a JSON header naming each tensor's dtype, shape and data_offsets (byte range in the data
// section that follows the header) plus an optional "__metadata__" map of strings, then the
// data. The file is memory-mapped and stays so while the object lives; tensors are read in
// place. Every length, offset and size is checked against the file before anything points into
// it; a bad file throws SafetensorsError naming the file and the field.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace adakv::hf {

class SafetensorsError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The dtypes adakv reads; any other (F64, I64, F8_E4M3, ...) is refused by name.
enum class Dtype { kF32, kF16, kBF16 };

const char* dtype_name(Dtype d);
size_t dtype_bytes(Dtype d);

struct SafetensorsTensor {
  std::string name;
  Dtype dtype = Dtype::kF32;
  std::vector<uint64_t> shape;  // outermost first, as in the file (a matrix is [rows, cols])
  uint64_t n_elements = 0;
  uint64_t n_bytes = 0;
  const uint8_t* data = nullptr;  // n_bytes inside the mapping, aligned to the element size
};

class SafetensorsFile {
 public:
  // Maps and validates the file.
  static std::shared_ptr<const SafetensorsFile> open(const std::string& path);
  // Validates an in-memory image (tests); the bytes are copied.
  static std::shared_ptr<const SafetensorsFile> parse(const void* data, size_t size,
                                                      const std::string& label = "<memory>");

  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  ~SafetensorsFile();

  const std::string& path() const { return path_; }
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  const SafetensorsTensor* find(std::string_view name) const;  // nullptr when absent
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // The whole image and whether it is a file mapping (whose pages may be dropped and read
  // again) rather than a copy.
  const uint8_t* image() const { return image_; }
  size_t image_size() const { return size_; }
  bool file_backed() const { return map_ != nullptr; }

 private:
  SafetensorsFile() = default;
  void read_header();

  void* map_ = nullptr;  // the mapping, or null for a copy
  std::unique_ptr<uint8_t[]> copy_;
  const uint8_t* image_ = nullptr;
  size_t size_ = 0;
  std::string path_;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace adakv::hf

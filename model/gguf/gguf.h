// GGUF files: metadata, tensor infos and memory-mapped tensor data (versions 2 and 3).
//
// Every offset, count and size read from the file is bounds-checked; a truncated or corrupt file
// throws GgufError whose message names the field and the byte offset where reading failed.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace adakv::gguf {

class GgufError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Metadata value types, numbered as in the file.
enum class ValueType : uint32_t {
  U8 = 0,
  I8 = 1,
  U16 = 2,
  I16 = 3,
  U32 = 4,
  I32 = 5,
  F32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  U64 = 10,
  I64 = 11,
  F64 = 12,
};

// ggml tensor types, numbered as in the file.
enum class GgmlType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  BF16 = 30,
};

// One metadata value. Scalars keep the widest form of their kind; `type` remembers the width.
// Arrays hold their elements (which may be arrays again) and their element type.
struct Value {
  ValueType type = ValueType::U8;
  ValueType elem_type = ValueType::U8;  // only for ARRAY
  uint64_t u = 0;                       // U8..U64, BOOL
  int64_t i = 0;                        // I8..I64
  double f = 0;                         // F32, F64
  std::string s;                        // STRING
  std::vector<Value> arr;               // ARRAY

  bool is_integer() const;
  // Integer of any width and signedness; throws GgufError if not an integer or out of range.
  int64_t as_int() const;
  // F32/F64, or any integer; throws otherwise.
  double as_float() const;
};

const char* value_type_name(ValueType t);

struct TensorInfo {
  std::string name;
  GgmlType type = GgmlType::F32;
  std::vector<uint64_t> ne;  // ne[0] is the innermost (contiguous) length
  uint64_t offset = 0;       // relative to the data section
  uint64_t n_elements = 0;
  uint64_t n_bytes = 0;
  // An assembled file's tensor: its n_bytes in one of the file's regions (offset unused); null
  // for a tensor of a GGUF file, which lies at offset in the data section.
  const uint8_t* data = nullptr;
};

// GGUF metadata and tensors: read from a GGUF file, or assembled from a Hugging Face checkpoint
// (model/hf/hf_checkpoint.h), whose tensors stay in their memory-mapped safetensors files under
// the names and metadata keys a GGUF file of the same model would have.
class GgufFile {
 public:
  // Memory that holds an assembled file's tensors, kept alive by `owner` while the GgufFile
  // lives. file_backed: a read-only file mapping, whose pages release_pages() may drop.
  struct Region {
    std::shared_ptr<const void> owner;
    const uint8_t* begin = nullptr;
    size_t size = 0;
    bool file_backed = false;
  };

  // Opens and validates the file; the data section stays memory-mapped while the object lives.
  static GgufFile open(const std::string& path);
  // Parses an in-memory image (used by tests and the fuzz suite); the bytes are copied.
  static GgufFile parse(const void* data, size_t size, const std::string& label = "<memory>");
  // A file of the given metadata and tensors, each tensor's `data` pointing inside one of
  // `regions`; nothing is copied. `label` stands for path() in messages. Throws GgufError naming
  // a tensor whose bytes (n_bytes, checked against type and ne) lie outside every region, or a
  // duplicate key or tensor name. version() is 0.
  static GgufFile assemble(std::string label, std::vector<std::pair<std::string, Value>> metadata,
                           std::vector<TensorInfo> tensors, std::vector<Region> regions);

  GgufFile(GgufFile&&) noexcept;
  GgufFile& operator=(GgufFile&&) noexcept;
  ~GgufFile();

  uint32_t version() const { return version_; }
  // True when made by assemble() rather than read from a GGUF file.
  bool assembled() const { return version_ == 0; }
  uint64_t alignment() const { return alignment_; }
  const std::string& path() const { return path_; }

  const std::vector<std::pair<std::string, Value>>& metadata() const { return metadata_; }
  const Value* find(std::string_view key) const;  // nullptr when absent

  // Typed getters: throw GgufError naming the key when it is missing or of the wrong kind.
  int64_t get_int(std::string_view key) const;
  int64_t get_int(std::string_view key, int64_t fallback) const;
  double get_float(std::string_view key) const;
  double get_float(std::string_view key, double fallback) const;
  bool get_bool(std::string_view key, bool fallback) const;
  std::string get_string(std::string_view key) const;
  std::string get_string(std::string_view key, const std::string& fallback) const;
  std::vector<std::string> get_string_array(std::string_view key) const;
  std::vector<int64_t> get_int_array(std::string_view key) const;
  std::vector<double> get_float_array(std::string_view key) const;

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const;  // nullptr when absent
  const TensorInfo& tensor(std::string_view name) const;       // throws naming the tensor
  // Pointer to the tensor's n_bytes bytes inside the mapped data section.
  const uint8_t* tensor_data(const TensorInfo& t) const;
  // Lets the kernel drop the mapped pages wholly inside [p, p + n) from this process's resident
  // memory (they are read again from the file if touched later): for data copied elsewhere, so
  // that it is not resident twice. Does nothing for an in-memory image.
  void release_pages(const uint8_t* p, size_t n) const;

 private:
  GgufFile() = default;
  struct Mapping;
  std::unique_ptr<Mapping> mapping_;
  const uint8_t* base_ = nullptr;  // start of the whole file image
  uint64_t size_ = 0;
  uint64_t data_offset_ = 0;  // start of the data section in the image
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  std::string path_;
  std::vector<std::pair<std::string, Value>> metadata_;
  std::vector<TensorInfo> tensors_;
  std::vector<Region> regions_;  // assembled: where the tensors live
  friend class Parser;
};

}  // namespace adakv::gguf

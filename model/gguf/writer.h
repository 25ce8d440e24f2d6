// A small GGUF writer, for tests: synthetic models and corrupt-file cases start from its output.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/gguf/gguf.h"

namespace adakv::gguf {

class GgufWriter {
 public:
  explicit GgufWriter(uint32_t version = 3, uint64_t alignment = 32);

  void add(const std::string& key, const Value& v);
  void add_u32(const std::string& key, uint32_t v);
  void add_i32(const std::string& key, int32_t v);
  void add_u64(const std::string& key, uint64_t v);
  void add_f32(const std::string& key, float v);
  void add_bool(const std::string& key, bool v);
  void add_string(const std::string& key, const std::string& v);
  void add_string_array(const std::string& key, const std::vector<std::string>& v);
  void add_i32_array(const std::string& key, const std::vector<int32_t>& v);
  void add_f32_array(const std::string& key, const std::vector<float>& v);

  // Raw tensor bytes of the given type and shape (ne[0] innermost).
  void add_tensor(const std::string& name, GgmlType type, const std::vector<uint64_t>& ne,
                  std::vector<uint8_t> bytes);
  // F32 tensor from floats.
  void add_tensor_f32(const std::string& name, const std::vector<uint64_t>& ne,
                      const std::vector<float>& values);

  std::vector<uint8_t> bytes() const;
  void write(const std::string& path) const;  // throws std::runtime_error on I/O failure

 private:
  struct PendingTensor {
    std::string name;
    GgmlType type;
    std::vector<uint64_t> ne;
    std::vector<uint8_t> bytes;
  };
  uint32_t version_;
  uint64_t alignment_;
  std::vector<std::pair<std::string, Value>> metadata_;
  std::vector<PendingTensor> tensors_;
};

// Value helpers for the writer and tests.
Value make_string(const std::string& s);
Value make_u32(uint32_t v);
Value make_array(ValueType elem_type, std::vector<Value> elems);

}  // namespace adakv::gguf

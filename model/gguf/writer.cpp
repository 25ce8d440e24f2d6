// GGUF writer for tests: header, metadata, tensor infos, then the aligned data section.
#include "model/gguf/writer.h"

#include <fmt/format.h>

#include <bit>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include "model/gguf/dequant.h"

namespace adakv::gguf {

namespace {

class Buffer {
 public:
  template <class T>
  void put(T v) {
    const size_t at = out_.size();
    out_.resize(at + sizeof(T));
    std::memcpy(out_.data() + at, &v, sizeof(T));
  }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    out_.insert(out_.end(), s.begin(), s.end());
  }
  void put_bytes(const std::vector<uint8_t>& b) { out_.insert(out_.end(), b.begin(), b.end()); }
  void pad_to(uint64_t alignment) {
    while (out_.size() % alignment != 0) out_.push_back(0);
  }
  std::vector<uint8_t> take() { return std::move(out_); }

 private:
  std::vector<uint8_t> out_;
};

// Writes the value's payload (no type tag); `type` is what the file will declare for it.
void put_value(Buffer& b, ValueType type, const Value& v) {
  if (v.type != type) {
    throw std::invalid_argument(fmt::format("gguf writer: value of type {} where {} is declared",
                                            value_type_name(v.type), value_type_name(type)));
  }
  switch (type) {
    case ValueType::U8:
      b.put<uint8_t>(static_cast<uint8_t>(v.u));
      break;
    case ValueType::I8:
      b.put<int8_t>(static_cast<int8_t>(v.i));
      break;
    case ValueType::U16:
      b.put<uint16_t>(static_cast<uint16_t>(v.u));
      break;
    case ValueType::I16:
      b.put<int16_t>(static_cast<int16_t>(v.i));
      break;
    case ValueType::U32:
      b.put<uint32_t>(static_cast<uint32_t>(v.u));
      break;
    case ValueType::I32:
      b.put<int32_t>(static_cast<int32_t>(v.i));
      break;
    case ValueType::U64:
      b.put<uint64_t>(v.u);
      break;
    case ValueType::I64:
      b.put<int64_t>(v.i);
      break;
    case ValueType::F32:
      b.put<float>(static_cast<float>(v.f));
      break;
    case ValueType::F64:
      b.put<double>(v.f);
      break;
    case ValueType::BOOL:
      b.put<uint8_t>(v.u != 0 ? 1 : 0);
      break;
    case ValueType::STRING:
      b.put_string(v.s);
      break;
    case ValueType::ARRAY:
      b.put<uint32_t>(static_cast<uint32_t>(v.elem_type));
      b.put<uint64_t>(v.arr.size());
      for (const Value& e : v.arr) put_value(b, v.elem_type, e);
      break;
  }
}

uint64_t align_up(uint64_t x, uint64_t a) {
  return (x + a - 1) / a * a;
}

}  // namespace

Value make_string(const std::string& s) {
  Value v;
  v.type = ValueType::STRING;
  v.s = s;
  return v;
}

Value make_u32(uint32_t x) {
  Value v;
  v.type = ValueType::U32;
  v.u = x;
  return v;
}

Value make_array(ValueType elem_type, std::vector<Value> elems) {
  Value v;
  v.type = ValueType::ARRAY;
  v.elem_type = elem_type;
  v.arr = std::move(elems);
  return v;
}

GgufWriter::GgufWriter(uint32_t version, uint64_t alignment)
    : version_(version), alignment_(alignment) {
  if (alignment == 0 || !std::has_single_bit(alignment)) {
    throw std::invalid_argument(
        fmt::format("gguf writer: alignment {} is not a power of two", alignment));
  }
  // Readers take the alignment from the metadata; only the default may go unsaid.
  if (alignment != 32) add_u32("general.alignment", static_cast<uint32_t>(alignment));
}

void GgufWriter::add(const std::string& key, const Value& v) {
  metadata_.emplace_back(key, v);
}

void GgufWriter::add_u32(const std::string& key, uint32_t v) {
  add(key, make_u32(v));
}

void GgufWriter::add_i32(const std::string& key, int32_t x) {
  Value v;
  v.type = ValueType::I32;
  v.i = x;
  add(key, v);
}

void GgufWriter::add_u64(const std::string& key, uint64_t x) {
  Value v;
  v.type = ValueType::U64;
  v.u = x;
  add(key, v);
}

void GgufWriter::add_f32(const std::string& key, float x) {
  Value v;
  v.type = ValueType::F32;
  v.f = x;
  add(key, v);
}

void GgufWriter::add_bool(const std::string& key, bool x) {
  Value v;
  v.type = ValueType::BOOL;
  v.u = x ? 1 : 0;
  add(key, v);
}

void GgufWriter::add_string(const std::string& key, const std::string& v) {
  add(key, make_string(v));
}

void GgufWriter::add_string_array(const std::string& key, const std::vector<std::string>& v) {
  std::vector<Value> elems;
  elems.reserve(v.size());
  for (const std::string& s : v) elems.push_back(make_string(s));
  add(key, make_array(ValueType::STRING, std::move(elems)));
}

void GgufWriter::add_i32_array(const std::string& key, const std::vector<int32_t>& v) {
  std::vector<Value> elems(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    elems[i].type = ValueType::I32;
    elems[i].i = v[i];
  }
  add(key, make_array(ValueType::I32, std::move(elems)));
}

void GgufWriter::add_f32_array(const std::string& key, const std::vector<float>& v) {
  std::vector<Value> elems(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    elems[i].type = ValueType::F32;
    elems[i].f = v[i];
  }
  add(key, make_array(ValueType::F32, std::move(elems)));
}

void GgufWriter::add_tensor(const std::string& name, GgmlType type, const std::vector<uint64_t>& ne,
                            std::vector<uint8_t> bytes) {
  if (ne.empty() || ne.size() > 4) {
    throw std::invalid_argument(
        fmt::format("gguf writer: tensor '{}' has {} dimensions", name, ne.size()));
  }
  if (ne[0] % block_elements(type) != 0) {
    throw std::invalid_argument(
        fmt::format("gguf writer: tensor '{}' ne[0] = {} is not a multiple of the {} block size {}",
                    name, ne[0], type_name(type), block_elements(type)));
  }
  uint64_t n = 1;
  for (uint64_t d : ne) n *= d;
  const uint64_t expected = bytes_for(type, n);
  if (bytes.size() != expected) {
    throw std::invalid_argument(fmt::format("gguf writer: tensor '{}' has {} bytes, expected {}",
                                            name, bytes.size(), expected));
  }
  tensors_.push_back({name, type, ne, std::move(bytes)});
}

void GgufWriter::add_tensor_f32(const std::string& name, const std::vector<uint64_t>& ne,
                                const std::vector<float>& values) {
  std::vector<uint8_t> bytes(values.size() * sizeof(float));
  if (!values.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
  add_tensor(name, GgmlType::F32, ne, std::move(bytes));
}

std::vector<uint8_t> GgufWriter::bytes() const {
  Buffer b;
  b.put<uint32_t>(0x46554747);  // "GGUF"
  b.put<uint32_t>(version_);
  b.put<uint64_t>(tensors_.size());
  b.put<uint64_t>(metadata_.size());
  for (const auto& [key, v] : metadata_) {
    b.put_string(key);
    b.put<uint32_t>(static_cast<uint32_t>(v.type));
    put_value(b, v.type, v);
  }
  uint64_t offset = 0;
  for (const PendingTensor& t : tensors_) {
    b.put_string(t.name);
    b.put<uint32_t>(static_cast<uint32_t>(t.ne.size()));
    for (uint64_t d : t.ne) b.put<uint64_t>(d);
    b.put<uint32_t>(static_cast<uint32_t>(t.type));
    b.put<uint64_t>(offset);
    offset = align_up(offset + t.bytes.size(), alignment_);
  }
  b.pad_to(alignment_);
  for (const PendingTensor& t : tensors_) {
    b.put_bytes(t.bytes);
    b.pad_to(alignment_);
  }
  return b.take();
}

void GgufWriter::write(const std::string& path) const {
  const std::vector<uint8_t> data = bytes();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw std::runtime_error(fmt::format("gguf writer: cannot create '{}'", path));
  out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
  out.close();
  if (!out) throw std::runtime_error(fmt::format("gguf writer: cannot write '{}'", path));
}

}  // namespace adakv::gguf

#include "model/hf/safetensors.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

static_assert(std::endian::native == std::endian::little,
              "the safetensors reader assumes little endian");

namespace adakv::hf {

namespace {

using nlohmann::json;

// Hugging Face's own reader refuses headers past 100 MB; a larger length is a corrupt file.
constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;

// Dtype names of the format that adakv does not read, so that they are refused as unsupported
// rather than unknown.
constexpr const char* kOtherDtypes[] = {
    "F64",  "I64",     "I32",     "I16",     "I8",      "U64",     "U32", "U16", "U8",
    "BOOL", "F8_E4M3", "F8_E5M2", "F8_E8M0", "F6_E2M3", "F6_E3M2", "F4",  "C64"};

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw SafetensorsError(fmt::format("safetensors: {}: {}", path, what));
}

// A non-negative integer of the header, or an error naming `field`.
uint64_t header_uint(const std::string& path, const json& v, const std::string& field) {
  if (!v.is_number_unsigned()) {
    if (v.is_number_integer()) fail(path, fmt::format("{} is negative ({})", field, v.dump()));
    fail(path, fmt::format("{} is {}, not a non-negative integer", field, v.dump()));
  }
  return v.get<uint64_t>();
}

Dtype parse_dtype(const std::string& path, const std::string& tensor, const json& v) {
  const std::string field = fmt::format("tensor '{}' dtype", tensor);
  if (!v.is_string()) fail(path, fmt::format("{} is {}, not a string", field, v.dump()));
  const std::string name = v.get<std::string>();
  if (name == "F32") return Dtype::kF32;
  if (name == "F16") return Dtype::kF16;
  if (name == "BF16") return Dtype::kBF16;
  const bool known = std::any_of(std::begin(kOtherDtypes), std::end(kOtherDtypes),
                                 [&](const char* d) { return name == d; });
  fail(path, fmt::format("{} '{}' is {}; adakv reads BF16, F16 and F32", field, name,
                         known ? "not supported" : "not a safetensors dtype"));
}

std::string shape_string(const std::vector<uint64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

const char* dtype_name(Dtype d) {
  switch (d) {
    case Dtype::kF32:
      return "F32";
    case Dtype::kF16:
      return "F16";
    case Dtype::kBF16:
      return "BF16";
  }
  return "?";
}

size_t dtype_bytes(Dtype d) {
  return d == Dtype::kF32 ? 4 : 2;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) munmap(map_, size_);
}

std::shared_ptr<const SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, fmt::format("cannot open: {}", std::strerror(errno)));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(path, "not a regular file");
  }
  std::shared_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  f->size_ = static_cast<size_t>(st.st_size);
  if (f->size_ > 0) {
    void* m = mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      fail(path, fmt::format("cannot map: {}", std::strerror(err)));
    }
    f->map_ = m;
    f->image_ = static_cast<const uint8_t*>(m);
  }
  ::close(fd);
  f->read_header();
  return f;
}

std::shared_ptr<const SafetensorsFile> SafetensorsFile::parse(const void* data, size_t size,
                                                              const std::string& label) {
  std::shared_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = label;
  f->copy_ = std::make_unique<uint8_t[]>(size > 0 ? size : 1);
  if (size > 0) std::memcpy(f->copy_.get(), data, size);
  f->image_ = f->copy_.get();
  f->size_ = size;
  f->read_header();
  return f;
}

void SafetensorsFile::read_header() {
  if (size_ < 8) {
    fail(path_, fmt::format("header length: the file has {} bytes, the length field alone needs 8",
                            size_));
  }
  uint64_t n = 0;
  std::memcpy(&n, image_, 8);
  if (n > kMaxHeaderBytes || n > size_ - 8) {
    fail(path_, fmt::format("header length {} does not fit in the file ({} bytes after the length "
                            "field)",
                            n, size_ - 8));
  }
  json header;
  try {
    header = json::parse(image_ + 8, image_ + 8 + n);
  } catch (const json::exception& e) {
    fail(path_, fmt::format("header is not JSON: {}", e.what()));
  }
  if (!header.is_object()) fail(path_, "header is not a JSON object");

  const uint64_t data_begin = 8 + n, data_size = size_ - data_begin;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) fail(path_, "__metadata__ is not an object");
      for (const auto& [k, v] : entry.items()) {
        if (!v.is_string()) fail(path_, fmt::format("__metadata__ '{}' is not a string", k));
        metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    const std::string label = fmt::format("tensor '{}'", name);
    if (!entry.is_object()) fail(path_, label + " is not an object");
    for (const char* key : {"dtype", "shape", "data_offsets"}) {
      if (!entry.contains(key)) fail(path_, fmt::format("{} has no {}", label, key));
    }
    SafetensorsTensor t;
    t.name = name;
    t.dtype = parse_dtype(path_, name, entry["dtype"]);
    const json& shape = entry["shape"];
    if (!shape.is_array()) fail(path_, label + " shape is not an array");
    uint64_t count = 1;
    bool overflow = false;
    for (size_t d = 0; d < shape.size(); ++d) {
      t.shape.push_back(header_uint(path_, shape[d], fmt::format("{} shape[{}]", label, d)));
      overflow = overflow || __builtin_mul_overflow(count, t.shape.back(), &count);
    }
    const uint64_t elem = dtype_bytes(t.dtype);
    if (overflow || count > std::numeric_limits<uint64_t>::max() / elem) {
      fail(path_, fmt::format("{} shape {} overflows", label, shape_string(t.shape)));
    }
    t.n_elements = count;
    t.n_bytes = count * elem;
    const json& offsets = entry["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2) {
      fail(path_, fmt::format("{} data_offsets is {}, not [begin, end]", label, offsets.dump()));
    }
    const uint64_t begin = header_uint(path_, offsets[0], label + " data_offsets[0]");
    const uint64_t end = header_uint(path_, offsets[1], label + " data_offsets[1]");
    if (end < begin) {
      fail(path_, fmt::format("{} data_offsets [{}, {}] end before begin", label, begin, end));
    }
    if (end > data_size) {
      fail(path_, fmt::format("{} data_offsets [{}, {}] run past the data section ({} bytes)",
                              label, begin, end, data_size));
    }
    if (end - begin != t.n_bytes) {
      fail(path_, fmt::format("{} data_offsets [{}, {}] hold {} bytes; shape {} of {} needs {}",
                              label, begin, end, end - begin, shape_string(t.shape),
                              dtype_name(t.dtype), t.n_bytes));
    }
    // The kernels read elements in place.
    if ((data_begin + begin) % elem != 0) {
      fail(path_, fmt::format("{} data_offsets[0] {} puts the data at byte {}, not a multiple of "
                              "the {}-byte element",
                              label, begin, data_begin + begin, elem));
    }
    t.data = image_ + data_begin + begin;
    tensors_.push_back(std::move(t));
  }

  // No two tensors may share bytes.
  std::vector<const SafetensorsTensor*> order;
  for (const auto& t : tensors_) order.push_back(&t);
  std::sort(order.begin(), order.end(),
            [](const auto* a, const auto* b) { return a->data < b->data; });
  for (size_t i = 1; i < order.size(); ++i) {
    const auto *prev = order[i - 1], *t = order[i];
    if (t->n_bytes > 0 && prev->data + prev->n_bytes > t->data) {
      fail(path_, fmt::format("tensor '{}' data_offsets overlap those of tensor '{}'", t->name,
                              prev->name));
    }
  }
}

const SafetensorsTensor* SafetensorsFile::find(std::string_view name) const {
  for (const auto& t : tensors_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

}  // namespace adakv::hf

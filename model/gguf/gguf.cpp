// GGUF reader: a bounds-checked parser over an in-memory image (mmap or copy).
#include "model/gguf/gguf.h"

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
#include <new>
#include <unordered_set>
#include <utility>

#include "model/gguf/dequant.h"

static_assert(std::endian::native == std::endian::little, "the GGUF reader assumes little endian");

namespace adakv::gguf {

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr uint64_t kDefaultAlignment = 32;
constexpr int kMaxArrayDepth = 8;
constexpr uint32_t kMaxDims = 4;

// Smallest encodings, used to reject counts that cannot fit in the remaining bytes before
// anything is allocated for them.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;              // empty key, type, one-byte value
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 4 + 8;  // empty name, n_dims 0, type, offset

bool valid_value_type(uint32_t t) {
  return t <= static_cast<uint32_t>(ValueType::F64);
}

// Bytes one element of the type takes at least (strings and arrays: their length fields).
uint64_t min_value_bytes(ValueType t) {
  switch (t) {
    case ValueType::U8:
    case ValueType::I8:
    case ValueType::BOOL:
      return 1;
    case ValueType::U16:
    case ValueType::I16:
      return 2;
    case ValueType::U32:
    case ValueType::I32:
    case ValueType::F32:
      return 4;
    case ValueType::U64:
    case ValueType::I64:
    case ValueType::F64:
    case ValueType::STRING:
      return 8;
    case ValueType::ARRAY:
      return 4 + 8;
  }
  return 1;
}

// A non-owning reference to a callable that names the field being read. The name is only
// built when an error is reported, so the hot path of reading large arrays stays cheap.
class Field {
 public:
  template <class F>
  Field(const F& f)  // NOLINT(google-explicit-constructor): lambdas convert implicitly
      : obj_(&f), call_([](const void* o) { return (*static_cast<const F*>(o))(); }) {}
  std::string operator()() const { return call_(obj_); }

 private:
  const void* obj_;
  std::string (*call_)(const void*);
};

std::string quoted(std::string_view s) {
  std::string out = "'";
  for (char c : s.substr(0, 64)) {
    out += (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) ? '?' : c;
  }
  if (s.size() > 64) out += "...";
  return out + "'";
}

}  // namespace

// Mapped file, or an owned copy of an in-memory image.
struct GgufFile::Mapping {
  void* map = nullptr;
  size_t map_len = 0;
  uint8_t* copy = nullptr;

  Mapping() = default;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() {
    if (map) munmap(map, map_len);
    if (copy) ::operator delete[](copy, std::align_val_t{64});
  }
};

class Parser {
 public:
  explicit Parser(GgufFile& f) : f_(f), p_(f.base_), size_(f.size_) {}

  void run() {
    const uint32_t magic = u32([] { return std::string("header magic"); });
    if (magic != kMagic) {
      throw GgufError(fmt::format(
          "gguf: bad magic at offset 0: expected 47 47 55 46 (\"GGUF\"), got {:02x} {:02x} "
          "{:02x} {:02x}",
          p_[0], p_[1], p_[2], p_[3]));
    }
    f_.version_ = u32([] { return std::string("header version"); });
    if (f_.version_ != 2 && f_.version_ != 3) {
      std::string hint;
      if (__builtin_bswap32(f_.version_) == 2 || __builtin_bswap32(f_.version_) == 3) {
        hint = " (big-endian file?)";
      }
      throw GgufError(fmt::format("gguf: unsupported version {} at offset 4{}; supported: 2, 3",
                                  f_.version_, hint));
    }
    const uint64_t n_tensors = u64([] { return std::string("header tensor count"); });
    const uint64_t n_kv = u64([] { return std::string("header metadata kv count"); });
    check_count(
        n_kv, kMinKvBytes, [] { return std::string("header metadata kv count"); }, 16);
    check_count(
        n_tensors, kMinTensorInfoBytes, [] { return std::string("header tensor count"); }, 8);

    read_metadata(n_kv);
    read_alignment();
    read_tensor_infos(n_tensors);
    place_data_section();
  }

 private:
  uint64_t remaining() const { return size_ - pos_; }

  // Throws a truncation error unless n more bytes are available; `field` names what is read.
  void need(uint64_t n, const Field& field) {
    if (n > remaining()) {
      throw GgufError(
          fmt::format("gguf: truncated file: {} at offset {} needs {} bytes, file has {}", field(),
                      pos_, n, size_));
    }
  }

  template <class T>
  T scalar(const Field& field) {
    need(sizeof(T), field);
    T v;
    std::memcpy(&v, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  uint32_t u32(const Field& field) { return scalar<uint32_t>(field); }
  uint64_t u64(const Field& field) { return scalar<uint64_t>(field); }

  std::string str(const Field& field) {
    const uint64_t at = pos_;
    const uint64_t len = u64([&] { return field() + " length"; });
    if (len > remaining()) {
      throw GgufError(
          fmt::format("gguf: truncated or corrupt file: {} (length {} at offset {}) at offset {} "
                      "needs {} bytes, "
                      "file has {}",
                      field(), len, at, pos_, len, size_));
    }
    std::string s(reinterpret_cast<const char*>(p_ + pos_), len);
    pos_ += len;
    return s;
  }

  // A count of items of at least min_bytes each must fit in the rest of the file.
  void check_count(uint64_t count, uint64_t min_bytes, const Field& what, uint64_t at) {
    if (count > remaining() / min_bytes) {
      throw GgufError(fmt::format(
          "gguf: truncated or corrupt file: {} {} at offset {} needs more than the {} bytes left, "
          "file has {}",
          what(), count, at, remaining(), size_));
    }
  }

  Value value(ValueType type, const Field& field, int depth) {
    Value v;
    v.type = type;
    switch (type) {
      case ValueType::U8:
        v.u = scalar<uint8_t>(field);
        break;
      case ValueType::I8:
        v.i = scalar<int8_t>(field);
        break;
      case ValueType::U16:
        v.u = scalar<uint16_t>(field);
        break;
      case ValueType::I16:
        v.i = scalar<int16_t>(field);
        break;
      case ValueType::U32:
        v.u = scalar<uint32_t>(field);
        break;
      case ValueType::I32:
        v.i = scalar<int32_t>(field);
        break;
      case ValueType::U64:
        v.u = scalar<uint64_t>(field);
        break;
      case ValueType::I64:
        v.i = scalar<int64_t>(field);
        break;
      case ValueType::F32:
        v.f = scalar<float>(field);
        break;
      case ValueType::F64:
        v.f = scalar<double>(field);
        break;
      case ValueType::BOOL:
        v.u = scalar<uint8_t>(field) != 0 ? 1 : 0;
        break;
      case ValueType::STRING:
        v.s = str(field);
        break;
      case ValueType::ARRAY:
        array(v, field, depth);
        break;
    }
    return v;
  }

  void array(Value& v, const Field& field, int depth) {
    if (depth >= kMaxArrayDepth) {
      throw GgufError(fmt::format("gguf: corrupt file: {} at offset {} nests arrays deeper than {}",
                                  field(), pos_, kMaxArrayDepth));
    }
    const uint64_t type_at = pos_;
    const uint32_t et = u32([&] { return field() + " array element type"; });
    if (!valid_value_type(et)) {
      throw GgufError(
          fmt::format("gguf: corrupt file: {} array element type {} at offset {} is "
                      "not a known value type",
                      field(), et, type_at));
    }
    v.elem_type = static_cast<ValueType>(et);
    const uint64_t count_at = pos_;
    const uint64_t count = u64([&] { return field() + " array count"; });
    check_count(
        count, min_value_bytes(v.elem_type), [&] { return field() + " array count"; }, count_at);
    v.arr.reserve(count);
    for (uint64_t i = 0; i < count; ++i) {
      v.arr.push_back(value(
          v.elem_type, [&] { return fmt::format("{}[{}]", field(), i); }, depth + 1));
    }
  }

  void read_metadata(uint64_t n_kv) {
    std::unordered_set<std::string> seen;
    f_.metadata_.reserve(n_kv);
    for (uint64_t k = 0; k < n_kv; ++k) {
      const uint64_t key_at = pos_;
      std::string key = str([&] { return fmt::format("metadata key #{}", k); });
      if (!seen.insert(key).second) {
        throw GgufError(fmt::format("gguf: corrupt file: duplicate metadata key {} at offset {}",
                                    quoted(key), key_at));
      }
      const auto field = [&] { return "metadata " + quoted(key); };
      const uint64_t type_at = pos_;
      const uint32_t t = u32([&] { return field() + " value type"; });
      if (!valid_value_type(t)) {
        throw GgufError(fmt::format(
            "gguf: corrupt file: metadata {} value type {} at offset {} is not a known value type",
            quoted(key), t, type_at));
      }
      Value v = value(static_cast<ValueType>(t), field, 0);
      f_.metadata_.emplace_back(std::move(key), std::move(v));
    }
  }

  void read_alignment() {
    const Value* a = f_.find("general.alignment");
    if (!a) {
      f_.alignment_ = kDefaultAlignment;
      return;
    }
    if (!a->is_integer()) {
      throw GgufError(fmt::format("gguf: corrupt file: general.alignment has type {}, expected u32",
                                  value_type_name(a->type)));
    }
    const bool is_signed = a->type == ValueType::I8 || a->type == ValueType::I16 ||
                           a->type == ValueType::I32 || a->type == ValueType::I64;
    if ((is_signed && a->i <= 0) || (!is_signed && a->u == 0)) {
      throw GgufError(fmt::format("gguf: corrupt file: general.alignment {} is not positive",
                                  is_signed ? a->i : 0));
    }
    const uint64_t align = is_signed ? static_cast<uint64_t>(a->i) : a->u;
    if (!std::has_single_bit(align) || align > (uint64_t{1} << 31)) {
      throw GgufError(fmt::format(
          "gguf: corrupt file: general.alignment {} is not a power of two in 1..2^31", align));
    }
    f_.alignment_ = align;
  }

  void read_tensor_infos(uint64_t n_tensors) {
    std::unordered_set<std::string> seen;
    f_.tensors_.reserve(n_tensors);
    for (uint64_t k = 0; k < n_tensors; ++k) {
      TensorInfo t;
      const uint64_t name_at = pos_;
      t.name = str([&] { return fmt::format("tensor info #{} name", k); });
      if (!seen.insert(t.name).second) {
        throw GgufError(fmt::format("gguf: corrupt file: duplicate tensor name {} at offset {}",
                                    quoted(t.name), name_at));
      }
      const std::string label = "tensor info " + quoted(t.name);
      const uint64_t dims_at = pos_;
      const uint32_t n_dims = u32([&] { return label + " n_dims"; });
      if (n_dims < 1 || n_dims > kMaxDims) {
        throw GgufError(
            fmt::format("gguf: corrupt file: {} n_dims {} at offset {} is outside 1..{}", label,
                        n_dims, dims_at, kMaxDims));
      }
      t.ne.resize(n_dims);
      uint64_t n = 1;
      bool overflow = false;
      for (uint32_t d = 0; d < n_dims; ++d) {
        const uint64_t ne_at = pos_;
        t.ne[d] = u64([&] { return fmt::format("{} ne[{}]", label, d); });
        // ggml stores dimensions as int64.
        if (t.ne[d] > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
          throw GgufError(
              fmt::format("gguf: corrupt file: {} ne[{}] = {} at offset {} is too large", label, d,
                          t.ne[d], ne_at));
        }
        overflow = overflow || __builtin_mul_overflow(n, t.ne[d], &n);
      }
      if (overflow || n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        throw GgufError(fmt::format("gguf: corrupt file: {} element count overflows ({})", label,
                                    shape_string(t.ne)));
      }
      t.n_elements = n;
      const uint64_t type_at = pos_;
      const uint32_t type_id = u32([&] { return label + " type"; });
      try {
        t.type = type_from_id(type_id);
      } catch (const GgufError&) {
        throw GgufError(
            fmt::format("gguf: corrupt file: {} type {} at offset {} is not a known "
                        "ggml type",
                        label, type_id, type_at));
      }
      const uint64_t blk = block_elements(t.type);
      if (t.ne[0] % blk != 0) {
        throw GgufError(
            fmt::format("gguf: corrupt file: {} ne[0] = {} is not a multiple of the {} "
                        "block size {}",
                        label, t.ne[0], type_name(t.type), blk));
      }
      // n_elements fits in int64, so n / blk * block_bytes (<= 292) cannot overflow u64.
      t.n_bytes = t.n_elements / blk * block_bytes(t.type);
      const uint64_t offset_at = pos_;
      t.offset = u64([&] { return label + " offset"; });
      if (t.offset % f_.alignment_ != 0) {
        throw GgufError(
            fmt::format("gguf: corrupt file: {} offset {} at offset {} is not a "
                        "multiple of the alignment {}",
                        label, t.offset, offset_at, f_.alignment_));
      }
      f_.tensors_.push_back(std::move(t));
    }
  }

  void place_data_section() {
    const uint64_t a = f_.alignment_;
    // pos_ <= size_ and a <= 2^31, so this cannot overflow.
    const uint64_t data = (pos_ + a - 1) / a * a;
    f_.data_offset_ = data;
    if (f_.tensors_.empty()) return;
    if (data > size_) {
      throw GgufError(
          fmt::format("gguf: truncated file: data section at offset {} starts past the "
                      "end of the file ({} bytes)",
                      data, size_));
    }
    const uint64_t data_size = size_ - data;
    for (const TensorInfo& t : f_.tensors_) {
      if (t.offset > data_size || t.n_bytes > data_size - t.offset) {
        throw GgufError(fmt::format(
            "gguf: truncated file: tensor {} data at offset {} needs {} bytes, file has {}",
            quoted(t.name), data + t.offset, t.n_bytes, size_));
      }
    }
  }

  static std::string shape_string(const std::vector<uint64_t>& ne) {
    std::string s = "[";
    for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
    return s + "]";
  }

  GgufFile& f_;
  const uint8_t* p_;
  uint64_t size_;
  uint64_t pos_ = 0;
};

// ---- Value ----

bool Value::is_integer() const {
  switch (type) {
    case ValueType::U8:
    case ValueType::I8:
    case ValueType::U16:
    case ValueType::I16:
    case ValueType::U32:
    case ValueType::I32:
    case ValueType::U64:
    case ValueType::I64:
      return true;
    default:
      return false;
  }
}

int64_t Value::as_int() const {
  switch (type) {
    case ValueType::U8:
    case ValueType::U16:
    case ValueType::U32:
    case ValueType::U64:
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        throw GgufError(fmt::format("gguf: integer {} does not fit in int64", u));
      }
      return static_cast<int64_t>(u);
    case ValueType::I8:
    case ValueType::I16:
    case ValueType::I32:
    case ValueType::I64:
      return i;
    default:
      throw GgufError(
          fmt::format("gguf: value of type {} is not an integer", value_type_name(type)));
  }
}

double Value::as_float() const {
  if (type == ValueType::F32 || type == ValueType::F64) return f;
  if (!is_integer()) {
    throw GgufError(fmt::format("gguf: value of type {} is not a number", value_type_name(type)));
  }
  switch (type) {
    case ValueType::U8:
    case ValueType::U16:
    case ValueType::U32:
    case ValueType::U64:
      return static_cast<double>(u);
    default:
      return static_cast<double>(i);
  }
}

const char* value_type_name(ValueType t) {
  switch (t) {
    case ValueType::U8:
      return "u8";
    case ValueType::I8:
      return "i8";
    case ValueType::U16:
      return "u16";
    case ValueType::I16:
      return "i16";
    case ValueType::U32:
      return "u32";
    case ValueType::I32:
      return "i32";
    case ValueType::F32:
      return "f32";
    case ValueType::BOOL:
      return "bool";
    case ValueType::STRING:
      return "string";
    case ValueType::ARRAY:
      return "array";
    case ValueType::U64:
      return "u64";
    case ValueType::I64:
      return "i64";
    case ValueType::F64:
      return "f64";
  }
  return "unknown";
}

// ---- GgufFile ----

GgufFile::GgufFile(GgufFile&&) noexcept = default;
GgufFile& GgufFile::operator=(GgufFile&&) noexcept = default;
GgufFile::~GgufFile() = default;

GgufFile GgufFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    throw GgufError(fmt::format("gguf: cannot open '{}': {}", path, std::strerror(errno)));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw GgufError(fmt::format("gguf: cannot stat '{}': {}", path, std::strerror(err)));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw GgufError(fmt::format("gguf: '{}' is not a regular file", path));
  }
  GgufFile f;
  f.path_ = path;
  f.mapping_ = std::make_unique<Mapping>();
  f.size_ = static_cast<uint64_t>(st.st_size);
  if (f.size_ > 0) {
    void* m = mmap(nullptr, f.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      throw GgufError(fmt::format("gguf: cannot map '{}': {}", path, std::strerror(err)));
    }
    f.mapping_->map = m;
    f.mapping_->map_len = f.size_;
    f.base_ = static_cast<const uint8_t*>(m);
  }
  ::close(fd);
  static const uint8_t empty[1] = {0};
  if (!f.base_) f.base_ = empty;
  Parser(f).run();
  return f;
}

GgufFile GgufFile::parse(const void* data, size_t size, const std::string& label) {
  GgufFile f;
  f.path_ = label;
  f.mapping_ = std::make_unique<Mapping>();
  // 64-byte aligned, like a mapping, so that aligned tensor offsets give aligned pointers.
  f.mapping_->copy =
      static_cast<uint8_t*>(::operator new[](size > 0 ? size : 1, std::align_val_t{64}));
  if (size > 0) std::memcpy(f.mapping_->copy, data, size);
  f.base_ = f.mapping_->copy;
  f.size_ = size;
  Parser(f).run();
  return f;
}

GgufFile GgufFile::assemble(std::string label, std::vector<std::pair<std::string, Value>> metadata,
                            std::vector<TensorInfo> tensors, std::vector<Region> regions) {
  GgufFile f;
  f.path_ = std::move(label);
  f.version_ = 0;
  std::unordered_set<std::string> keys, names;
  for (const auto& [k, v] : metadata) {
    if (!keys.insert(k).second) {
      throw GgufError(fmt::format("gguf: {}: duplicate metadata key {}", f.path_, quoted(k)));
    }
  }
  for (TensorInfo& t : tensors) {
    if (!names.insert(t.name).second) {
      throw GgufError(fmt::format("gguf: {}: duplicate tensor name {}", f.path_, quoted(t.name)));
    }
    uint64_t n = 1;
    for (uint64_t d : t.ne) {
      if (__builtin_mul_overflow(n, d, &n)) {
        throw GgufError(
            fmt::format("gguf: {}: tensor {} element count overflows", f.path_, quoted(t.name)));
      }
    }
    t.n_elements = n;
    t.n_bytes = bytes_for(t.type, n);
    const auto inside = [&](const Region& r) {
      return t.data >= r.begin && t.data <= r.begin + r.size &&
             t.n_bytes <= static_cast<uint64_t>(r.begin + r.size - t.data);
    };
    if (!t.data || std::none_of(regions.begin(), regions.end(), inside)) {
      throw GgufError(fmt::format("gguf: {}: tensor {} data lies outside the regions it was given",
                                  f.path_, quoted(t.name)));
    }
  }
  f.metadata_ = std::move(metadata);
  f.tensors_ = std::move(tensors);
  f.regions_ = std::move(regions);
  return f;
}

void GgufFile::release_pages(const uint8_t* p, size_t n) const {
  if (n == 0) return;
  if (version_ == 0) {
    // Only pages of a file mapping may be dropped: they are read from the file again.
    const auto in_mapping = [&](const Region& r) {
      return r.file_backed && p >= r.begin && p <= r.begin + r.size &&
             n <= static_cast<size_t>(r.begin + r.size - p);
    };
    if (std::none_of(regions_.begin(), regions_.end(), in_mapping)) return;
  } else if (!mapping_ || !mapping_->map) {
    return;
  }
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(p), end = begin + n;
  const uintptr_t first = (begin + page - 1) / page * page, last = end / page * page;
  if (last > first) madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

const Value* GgufFile::find(std::string_view key) const {
  for (const auto& [k, v] : metadata_) {
    if (k == key) return &v;
  }
  return nullptr;
}

namespace {

const Value& require(const GgufFile& f, std::string_view key) {
  const Value* v = f.find(key);
  if (!v) throw GgufError(fmt::format("gguf: missing metadata key '{}'", key));
  return *v;
}

[[noreturn]] void wrong_type(std::string_view key, const Value& v, const char* expected) {
  std::string got = value_type_name(v.type);
  if (v.type == ValueType::ARRAY) got += fmt::format(" of {}", value_type_name(v.elem_type));
  throw GgufError(
      fmt::format("gguf: metadata key '{}' has type {}, expected {}", key, got, expected));
}

int64_t int_of(std::string_view key, const Value& v) {
  if (!v.is_integer()) wrong_type(key, v, "an integer");
  try {
    return v.as_int();
  } catch (const GgufError&) {
    throw GgufError(
        fmt::format("gguf: metadata key '{}' value {} does not fit in int64", key, v.u));
  }
}

double float_of(std::string_view key, const Value& v) {
  if (v.type != ValueType::F32 && v.type != ValueType::F64 && !v.is_integer()) {
    wrong_type(key, v, "a number");
  }
  return v.as_float();
}

const Value& array_of(std::string_view key, const Value& v, const char* expected) {
  if (v.type != ValueType::ARRAY) wrong_type(key, v, expected);
  return v;
}

}  // namespace

int64_t GgufFile::get_int(std::string_view key) const {
  return int_of(key, require(*this, key));
}

int64_t GgufFile::get_int(std::string_view key, int64_t fallback) const {
  const Value* v = find(key);
  return v ? int_of(key, *v) : fallback;
}

double GgufFile::get_float(std::string_view key) const {
  return float_of(key, require(*this, key));
}

double GgufFile::get_float(std::string_view key, double fallback) const {
  const Value* v = find(key);
  return v ? float_of(key, *v) : fallback;
}

bool GgufFile::get_bool(std::string_view key, bool fallback) const {
  const Value* v = find(key);
  if (!v) return fallback;
  if (v->type != ValueType::BOOL) wrong_type(key, *v, "bool");
  return v->u != 0;
}

std::string GgufFile::get_string(std::string_view key) const {
  const Value& v = require(*this, key);
  if (v.type != ValueType::STRING) wrong_type(key, v, "string");
  return v.s;
}

std::string GgufFile::get_string(std::string_view key, const std::string& fallback) const {
  const Value* v = find(key);
  if (!v) return fallback;
  if (v->type != ValueType::STRING) wrong_type(key, *v, "string");
  return v->s;
}

std::vector<std::string> GgufFile::get_string_array(std::string_view key) const {
  const Value& v = array_of(key, require(*this, key), "array of string");
  if (v.elem_type != ValueType::STRING) wrong_type(key, v, "array of string");
  std::vector<std::string> out;
  out.reserve(v.arr.size());
  for (const Value& e : v.arr) out.push_back(e.s);
  return out;
}

std::vector<int64_t> GgufFile::get_int_array(std::string_view key) const {
  const Value& v = array_of(key, require(*this, key), "array of integers");
  std::vector<int64_t> out;
  out.reserve(v.arr.size());
  for (const Value& e : v.arr) {
    if (!e.is_integer()) wrong_type(key, v, "array of integers");
    out.push_back(int_of(key, e));
  }
  return out;
}

std::vector<double> GgufFile::get_float_array(std::string_view key) const {
  const Value& v = array_of(key, require(*this, key), "array of numbers");
  std::vector<double> out;
  out.reserve(v.arr.size());
  for (const Value& e : v.arr) {
    if (e.type != ValueType::F32 && e.type != ValueType::F64 && !e.is_integer()) {
      wrong_type(key, v, "array of numbers");
    }
    out.push_back(e.as_float());
  }
  return out;
}

const TensorInfo* GgufFile::find_tensor(std::string_view name) const {
  for (const TensorInfo& t : tensors_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

const TensorInfo& GgufFile::tensor(std::string_view name) const {
  const TensorInfo* t = find_tensor(name);
  if (!t) throw GgufError(fmt::format("gguf: {}: missing tensor '{}'", path_, name));
  return *t;
}

const uint8_t* GgufFile::tensor_data(const TensorInfo& t) const {
  if (t.data) return t.data;
  const uint64_t data_size = data_offset_ <= size_ ? size_ - data_offset_ : 0;
  if (t.offset > data_size || t.n_bytes > data_size - t.offset) {
    throw GgufError(
        fmt::format("gguf: tensor '{}' lies outside the data section of {}", t.name, path_));
  }
  return base_ + data_offset_ + t.offset;
}

}  // namespace adakv::gguf

// Byte encoding of the control plane's messages: every rank runs the same binary, so plain
// structs travel by memcpy. A Reader throws std::runtime_error (prefixed by `what`) on a
// message that ends early.
#pragma once

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace adakv::runtime::wire {

class Writer {
 public:
  template <class T>
  void put(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    out_.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  template <class T>
  void put_vector(const std::vector<T>& v) {
    put<uint64_t>(v.size());
    for (const auto& x : v) put(x);
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  Reader(const std::string& in, const char* what) : in_(in), what_(what) {}
  template <class T>
  T get() {
    static_assert(std::is_trivially_copyable_v<T>);
    // A byte other than 0 or 1 is no bool: loading it as one is undefined behaviour.
    if constexpr (std::is_same_v<T, bool>) {
      const auto b = get<uint8_t>();
      if (b > 1) fail("a bool that is neither 0 nor 1");
      return b == 1;
    }
    if (in_.size() - pos_ < sizeof(T)) fail("truncated");
    T v;
    std::memcpy(&v, in_.data() + pos_, sizeof v);
    pos_ += sizeof v;
    return v;
  }
  template <class T>
  std::vector<T> get_vector() {
    const auto n = get<uint64_t>();
    if (n > (in_.size() - pos_) / sizeof(T)) fail("truncated");
    std::vector<T> v(n);
    for (auto& x : v) x = get<T>();
    return v;
  }
  // For a struct read whole (get<T>): its bool member must hold 0 or 1 before anything reads it.
  void check_bool(const bool& member) const {
    uint8_t b;
    std::memcpy(&b, &member, 1);
    if (b > 1) fail("a bool that is neither 0 nor 1");
  }
  bool done() const { return pos_ == in_.size(); }
  [[noreturn]] void fail(const char* why) const {
    throw std::runtime_error(std::string(what_) + ": " + why);
  }

 private:
  const std::string& in_;
  const char* what_;
  size_t pos_ = 0;
};

}  // namespace adakv::runtime::wire

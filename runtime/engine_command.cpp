#include "runtime/engine_command.h"

#include <cstring>
#include <stdexcept>
#include <type_traits>

namespace adakv::runtime {
namespace {

constexpr uint32_t kMagic = 0x41444b43;  // "ADKC"

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
  explicit Reader(const std::string& in) : in_(in) {}
  template <class T>
  T get() {
    static_assert(std::is_trivially_copyable_v<T>);
    if (in_.size() - pos_ < sizeof(T)) throw std::runtime_error("engine command: truncated");
    T v;
    std::memcpy(&v, in_.data() + pos_, sizeof v);
    pos_ += sizeof v;
    return v;
  }
  template <class T>
  std::vector<T> get_vector() {
    const auto n = get<uint64_t>();
    if (n > (in_.size() - pos_) / sizeof(T)) throw std::runtime_error("engine command: truncated");
    std::vector<T> v(n);
    for (auto& x : v) x = get<T>();
    return v;
  }
  bool done() const { return pos_ == in_.size(); }

 private:
  const std::string& in_;
  size_t pos_ = 0;
};

}  // namespace

std::string encode_command(const EngineCommand& c) {
  Writer w;
  w.put(kMagic);
  w.put(c.op);
  const auto& r = c.request;
  w.put_vector(r.prompt);
  w.put(r.max_tokens);
  w.put(r.sampling);
  w.put(r.stop_at_eos);
  w.put(r.compression);
  w.put(r.kv_dtype);
  w.put(r.block_tokens);
  w.put_vector(r.reference);
  w.put_vector(c.policies);
  w.put_vector(c.continuation);
  return w.take();
}

EngineCommand decode_command(const std::string& bytes) {
  Reader in(bytes);
  if (in.get<uint32_t>() != kMagic) throw std::runtime_error("engine command: bad magic");
  EngineCommand c;
  c.op = in.get<EngineOp>();
  if (c.op < EngineOp::kShutdown || c.op > EngineOp::kScoreContinuation) {
    throw std::runtime_error("engine command: unknown operation");
  }
  auto& r = c.request;
  r.prompt = in.get_vector<int32_t>();
  r.max_tokens = in.get<size_t>();
  r.sampling = in.get<SamplingParams>();
  r.stop_at_eos = in.get<bool>();
  r.compression = in.get<compression::CompressionConfig>();
  r.kv_dtype = in.get<kernels::KvDtype>();
  r.block_tokens = in.get<size_t>();
  r.reference = in.get_vector<int32_t>();
  c.policies = in.get_vector<compression::CompressionConfig>();
  c.continuation = in.get_vector<int32_t>();
  if (!in.done()) throw std::runtime_error("engine command: trailing bytes");
  return c;
}

}  // namespace adakv::runtime

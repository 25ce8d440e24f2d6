#include "runtime/engine_command.h"

#include <stdexcept>

#include "runtime/wire.h"

namespace adakv::runtime {
namespace {

constexpr uint32_t kMagic = 0x41444b43;  // "ADKC"

}  // namespace

std::string encode_command(const EngineCommand& c) {
  wire::Writer w;
  w.put(kMagic);
  w.put(c.op);
  if (c.op == EngineOp::kStep) return w.take() + encode_plan(c.plan);
  if (c.op == EngineOp::kConfigureSteps) {
    w.put(c.serving);
    return w.take();
  }
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
  wire::Reader in(bytes, "engine command");
  if (in.get<uint32_t>() != kMagic) throw std::runtime_error("engine command: bad magic");
  EngineCommand c;
  c.op = in.get<EngineOp>();
  if (c.op < EngineOp::kShutdown || c.op > EngineOp::kStep) {
    throw std::runtime_error("engine command: unknown operation");
  }
  if (c.op == EngineOp::kStep) {
    const size_t header = sizeof(kMagic) + sizeof(EngineOp);
    c.plan = decode_plan(bytes.substr(header));
    return c;
  }
  if (c.op == EngineOp::kConfigureSteps) {
    c.serving = in.get<ServingConfig>();
    if (!in.done()) throw std::runtime_error("engine command: trailing bytes");
    return c;
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

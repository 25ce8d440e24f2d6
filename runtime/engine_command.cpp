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
  if (c.op == EngineOp::kConfigureSteps) w.put(c.serving);
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
    in.check_bool(c.serving.prefix_caching);
  }
  if (!in.done()) throw std::runtime_error("engine command: trailing bytes");
  return c;
}

}  // namespace adakv::runtime

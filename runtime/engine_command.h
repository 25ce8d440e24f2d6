// What rank 0 tells the other ranks of a tensor-parallel job to run next (the control plane's
// messages). Every rank then executes the same command on its own shard, in lock step.
// Encoded as bytes: every rank runs the same binary, so plain structs travel by memcpy.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/step_plan.h"

namespace adakv::runtime {

enum class EngineOp : uint8_t {
  kShutdown = 1,
  kConfigureSteps = 2,  // a step loop starts: every rank creates its block pool
  kStep = 3,            // one step
};

struct EngineCommand {
  EngineOp op = EngineOp::kShutdown;
  ServingConfig serving;  // kConfigureSteps
  StepPlan plan;          // kStep
};

std::string encode_command(const EngineCommand& command);
// Throws std::runtime_error on a message that is not an encoded command.
EngineCommand decode_command(const std::string& bytes);

}  // namespace adakv::runtime

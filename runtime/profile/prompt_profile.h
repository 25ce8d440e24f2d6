// Profiles one prompt on an engine (one rank or a tensor-parallel group): one recording
// prefill (every token kept, window scores stored per layer), then the policy's compressed copy
// of that cache for the per-head kept counts, then the per-head statistics of head_profile.h.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/ops.h"
#include "runtime/compression/config.h"
#include "runtime/policy_fork.h"
#include "runtime/profile/head_profile.h"
#include "runtime/worker.h"

namespace adakv::profile {

struct ProfileRequest {
  std::vector<int32_t> prompt;
  compression::CompressionConfig policy;  // policy full: every head keeps the whole prompt
  kernels::KvDtype kv_dtype = kernels::KvDtype::kF32;
  size_t block_tokens = 16;
  RoleThresholds thresholds;
};

// Throws std::invalid_argument when the prompt is empty, does not fit the model's context, is
// not longer than the window, or the policy is invalid for it.
// Root only under tensor parallelism.
HeadProfile profile_prompt(runtime::Worker& engine, const ProfileRequest& request);

}  // namespace adakv::profile

#include "runtime/profile/prompt_profile.h"

#include <stdexcept>
#include <string>

namespace adakv::profile {

HeadProfile profile_prompt(runtime::Worker& engine, const ProfileRequest& req) {
  const auto& cfg = engine.model().config();
  const size_t n = req.prompt.size();
  if (n == 0) throw std::invalid_argument("the prompt is empty");
  if (n > cfg.context_length) {
    throw std::invalid_argument("the prompt has " + std::to_string(n) +
                                " tokens; the model's context holds " +
                                std::to_string(cfg.context_length));
  }
  if (n <= req.policy.window) {
    throw std::invalid_argument("the prompt has " + std::to_string(n) +
                                " tokens; profiling needs more than the window (" +
                                std::to_string(req.policy.window) + ")");
  }
  req.policy.validate(n);

  runtime::GenerateRequest g;
  g.prompt = req.prompt;
  g.max_tokens = 1;
  g.compression = req.policy;
  g.kv_dtype = req.kv_dtype;
  g.block_tokens = req.block_tokens;
  const auto rec = runtime::record_prompt(engine, g);
  auto profile = profile_heads(rec.scores, rec.kept, n, req.policy, req.thresholds);
  profile.prefill_s = rec.prefill_s;
  return profile;
}

}  // namespace adakv::profile

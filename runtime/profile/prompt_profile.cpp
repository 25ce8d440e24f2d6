#include "runtime/profile/prompt_profile.h"

#include <chrono>
#include <stdexcept>
#include <string>

#include "runtime/kv/block_pool.h"
#include "runtime/kv/paged_kv_cache.h"

namespace adakv::profile {

HeadProfile profile_prompt(const model::LlamaModel& model, const ProfileRequest& req) {
  const auto& cfg = model.config();
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

  // Room for the full recording and for the copy, which never holds more than the recording.
  const kernels::KvBlockLayout layout{req.block_tokens, cfg.head_dim, req.kv_dtype};
  const size_t blocks_per_head = (n + req.block_tokens - 1) / req.block_tokens;
  runtime::BlockPool pool(layout, 2 * blocks_per_head * cfg.n_layers * cfg.n_kv_heads);
  runtime::PagedKvCache source(pool, cfg, req.policy, {}, /*record_scores=*/true);

  std::vector<float> logits;
  const auto t0 = std::chrono::steady_clock::now();
  model.forward(req.prompt.data(), n, source, logits);
  const double prefill_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  const auto copy = source.compressed_copy(req.policy);
  auto profile = profile_heads(source.scores(), copy->report().kept, n, req.policy, req.thresholds);
  profile.prefill_s = prefill_s;
  return profile;
}

}  // namespace adakv::profile

#include "runtime/engine.h"

#include <chrono>
#include <stdexcept>

#include "model/gguf/gguf.h"
#include "runtime/kv/block_pool.h"

namespace adakv::runtime {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

model::LlamaModel load_model(const gguf::GgufFile& file) {
  auto config = model::ModelConfig::from_gguf(file);
  auto weights = model::Weights::load(file, config);
  return model::LlamaModel(std::move(config), std::move(weights));
}

}  // namespace

Engine::Engine(const std::string& path) : Engine(gguf::GgufFile::open(path)) {}

Engine::Engine(const gguf::GgufFile& file)
    : model_(load_model(file)), tokenizer_(tokenizer::vocab_from_gguf(file)) {}

std::vector<int32_t> Engine::encode_prompt(const std::string& text, bool chat) const {
  if (!chat) return tokenizer_.encode(text, /*parse_special=*/false);
  return tokenizer_.encode(tokenizer::apply_chat_template({{"user", text}}),
                           /*parse_special=*/true);
}

size_t Engine::check_request(const GenerateRequest& req) const {
  const auto& cfg = model_.config();
  const size_t n_prompt = req.prompt.size();
  if (n_prompt == 0) throw std::invalid_argument("the prompt is empty");
  if (n_prompt >= cfg.context_length) {
    throw std::invalid_argument(
        "the prompt has " + std::to_string(n_prompt) + " tokens; the model's context holds " +
        std::to_string(cfg.context_length) + " (prompt plus at least one generated token)");
  }
  req.sampling.validate();
  // A prompt no longer than the window is kept whole (nothing to score); the window-vs-prompt
  // check of validate(n) is for windows a user asked for (the CLI applies it).
  req.compression.validate();
  return std::min(req.max_tokens, cfg.context_length - n_prompt);
}

void Engine::decode(const GenerateRequest& req, size_t max_new, PagedKvCache& cache,
                    std::vector<float> logits, const std::function<void(std::string_view)>& on_text,
                    GenerateResult& result) const {
  Sampler sampler(req.sampling);
  tokenizer::StreamDecoder stream(tokenizer_);
  const auto t0 = std::chrono::steady_clock::now();
  result.finish_reason = "length";
  for (size_t step = 0; step < max_new; ++step) {
    const int32_t next = sampler.sample(logits.data(), model_.config().vocab_size);
    result.tokens.push_back(next);
    if (req.stop_at_eos && next == tokenizer_.eos_id()) {
      result.finish_reason = "stop";
      break;
    }
    const std::string piece = stream.push(next);
    result.text += piece;
    if (on_text && !piece.empty()) on_text(piece);
    // The last token needs no forward: nothing will read its logits.
    if (step + 1 < max_new) model_.forward(&next, 1, cache, logits);
  }
  const std::string tail = stream.flush();
  result.text += tail;
  if (on_text && !tail.empty()) on_text(tail);
  result.decode_s = seconds_since(t0);
  result.kv_full_bytes = cache.full_bytes();
  result.kv_kept_bytes = cache.held_bytes();
  result.compression = cache.report();
}

GenerateResult Engine::generate(const GenerateRequest& req,
                                const std::function<void(std::string_view)>& on_text) const {
  const auto& cfg = model_.config();
  const size_t max_new = check_request(req), n_prompt = req.prompt.size();
  // Room for the uncompressed sequence: what prefill needs before compaction (scope global)
  // and what the full policy holds at the end.
  const kernels::KvBlockLayout layout{req.block_tokens, cfg.head_dim, req.kv_dtype};
  const size_t blocks_per_head = (n_prompt + max_new + req.block_tokens - 1) / req.block_tokens;
  BlockPool pool(layout, blocks_per_head * cfg.n_layers * cfg.n_kv_heads);
  PagedKvCache cache(pool, cfg, req.compression);

  GenerateResult result;
  result.prompt_tokens = n_prompt;
  std::vector<float> logits;
  const auto t0 = std::chrono::steady_clock::now();
  model_.forward(req.prompt.data(), n_prompt, cache, logits);
  result.prefill_s = seconds_since(t0);
  result.kv_after_prefill_bytes = cache.held_bytes();
  result.kv_full_after_prefill_bytes = cache.full_bytes();
  result.pool_free_after_prefill_bytes = pool.free_bytes();
  result.pool_bytes = pool.capacity() * pool.block_bytes();
  decode(req, max_new, cache, std::move(logits), on_text, result);
  return result;
}

std::vector<GenerateResult> Engine::generate_policies(
    const GenerateRequest& req, const std::vector<compression::CompressionConfig>& policies) const {
  const auto& cfg = model_.config();
  if (policies.empty()) throw std::invalid_argument("generate_policies: no policy given");
  const size_t max_new = check_request(req), n_prompt = req.prompt.size();
  for (const auto& p : policies) p.validate();
  // The recording prefill keeps the full prompt; each policy's copy lives next to it while it
  // decodes, then returns its blocks.
  const kernels::KvBlockLayout layout{req.block_tokens, cfg.head_dim, req.kv_dtype};
  const size_t blocks_per_head = (n_prompt + max_new + req.block_tokens - 1) / req.block_tokens;
  BlockPool pool(layout, 2 * blocks_per_head * cfg.n_layers * cfg.n_kv_heads);
  PagedKvCache source(pool, cfg, policies.front(), {}, /*record_scores=*/true);

  std::vector<float> logits;
  const auto t0 = std::chrono::steady_clock::now();
  model_.forward(req.prompt.data(), n_prompt, source, logits);
  const double prefill_s = seconds_since(t0);

  std::vector<GenerateResult> results;
  for (const auto& policy : policies) {
    GenerateResult r;
    r.prompt_tokens = n_prompt;
    r.prefill_s = prefill_s;
    auto cache = source.compressed_copy(policy);
    r.kv_after_prefill_bytes = cache->held_bytes();
    r.kv_full_after_prefill_bytes = cache->full_bytes();
    r.pool_bytes = pool.capacity() * pool.block_bytes();
    decode(req, max_new, *cache, logits, {}, r);
    r.compression.score_s = source.report().score_s;
    results.push_back(std::move(r));
  }
  return results;
}

}  // namespace adakv::runtime

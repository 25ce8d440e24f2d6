// One loaded model and its tokenizer, and the generation loop of a single sequence:
// prefill the whole prompt in one forward, then decode token by token until EOS or the limit.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/ops.h"
#include "model/llama.h"
#include "model/tokenizer/tokenizer.h"
#include "runtime/compression/config.h"
#include "runtime/kv/paged_kv_cache.h"
#include "runtime/sampler.h"

namespace adakv::gguf {
class GgufFile;
}

namespace adakv::runtime {

struct GenerateRequest {
  std::vector<int32_t> prompt;
  size_t max_tokens = 256;
  SamplingParams sampling;
  bool stop_at_eos = true;
  compression::CompressionConfig compression;  // policy full: no compression
  kernels::KvDtype kv_dtype = kernels::KvDtype::kF32;
  size_t block_tokens = 16;
};

struct GenerateResult {
  std::vector<int32_t> tokens;  // generated ids (EOS included when it stopped there)
  std::string text;             // decoded generated text (EOS excluded)
  std::string finish_reason;    // "stop" (EOS) or "length"
  size_t prompt_tokens = 0;
  double prefill_s = 0;
  double decode_s = 0;
  // KV memory at the end of generation, in the pool's dtype, block rounding included:
  size_t kv_full_bytes = 0;                // what the uncompressed cache would hold
  size_t kv_kept_bytes = 0;                // what the sequence holds
  size_t kv_after_prefill_bytes = 0;       // held right after prefill (and compaction)
  size_t kv_full_after_prefill_bytes = 0;  // uncompressed, right after prefill
  size_t pool_free_after_prefill_bytes = 0;
  size_t pool_bytes = 0;
  CompressionReport compression;  // budgets per layer and head, scoring/allocation time
};

class Engine {
 public:
  // Loads the model at `path` (resolve names with resolve_model first).
  explicit Engine(const std::string& path);
  explicit Engine(const gguf::GgufFile& file);

  const model::LlamaModel& model() const { return model_; }
  const tokenizer::Tokenizer& tokenizer() const { return tokenizer_; }

  // Tokenizes a prompt; `chat` wraps it as one user turn of the model's chat template.
  std::vector<int32_t> encode_prompt(const std::string& text, bool chat) const;

  // Throws std::invalid_argument when the prompt is empty or does not fit the context.
  // on_text receives decoded text as it becomes available (whole UTF-8 characters).
  GenerateResult generate(const GenerateRequest& request,
                          const std::function<void(std::string_view)>& on_text = {}) const;

  // One prefill of request.prompt serves every policy: the prompt is prefilled once with
  // scores recorded, then each policy compresses a copy of that cache and decodes from it
  // (prefill outputs do not depend on the policy). request.compression is ignored; every
  // policy must share the first one's window, pooling and GQA aggregation.
  std::vector<GenerateResult> generate_policies(
      const GenerateRequest& request,
      const std::vector<compression::CompressionConfig>& policies) const;

 private:
  // Validates the request; returns how many tokens it may generate.
  size_t check_request(const GenerateRequest& request) const;
  void decode(const GenerateRequest& request, size_t max_new, PagedKvCache& cache,
              std::vector<float> logits, const std::function<void(std::string_view)>& on_text,
              GenerateResult& result) const;

  model::LlamaModel model_;
  tokenizer::Tokenizer tokenizer_;
};

}  // namespace adakv::runtime

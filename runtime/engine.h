// One loaded model and its tokenizer, and the generation loop of a single sequence:
// prefill the whole prompt in one forward, then decode token by token until EOS or the limit.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "model/llama.h"
#include "model/tokenizer/tokenizer.h"
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
};

struct GenerateResult {
  std::vector<int32_t> tokens;  // generated ids (EOS included when it stopped there)
  std::string text;             // decoded generated text (EOS excluded)
  std::string finish_reason;    // "stop" (EOS) or "length"
  size_t prompt_tokens = 0;
  double prefill_s = 0;
  double decode_s = 0;
  size_t kv_full_bytes = 0;  // float32 K/V of every token over all layers and heads
  size_t kv_kept_bytes = 0;  // what the cache actually holds at the end
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

 private:
  model::LlamaModel model_;
  tokenizer::Tokenizer tokenizer_;
};

}  // namespace adakv::runtime

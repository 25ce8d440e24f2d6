// The tiny Hugging Face checkpoints as GGUF files (tests/e2e/tiny_gguf_models.h: the content of
// llama.cpp's convert_hf_to_gguf.py --outtype f32, proven by tests/data/tiny_gguf_manifest.json)
// loaded by adakv's GGUF path against transformers loading the checkpoints: the same goldens
// (tests/data/hf_goldens/<model>.bin) and checks (tests/e2e/hf_goldens_check.h) as the
// checkpoint directories. This covers what the GGUF conversion changes: the llama architecture's
// Q/K rows in adjacent-pair RoPE order (llama, mistral) against qwen2's halves, qwen2's biases
// and tied output, llama3 scaling as rope_freqs.weight divisors, linear and YaRN scaling as
// rope.scaling.* keys. Skipped without the python that writes the files.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "kernels/quant.h"
#include "model/llama.h"
#include "tests/e2e/decode_dots_scope.h"
#include "tests/e2e/hf_goldens_check.h"
#include "tests/e2e/tiny_gguf_models.h"

namespace adakv::test {
namespace {

using model::LlamaModel;

// The f32 checkpoints tests/data/tiny_gguf_manifest.json covers.
const char* const kModels[] = {"llama-f32",     "llama3-rope-f32", "linear-rope-f32",
                               "yarn-rope-f32", "mistral-f32",     "qwen2-f32"};

class TinyGgufOracle : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override { ADAKV_REQUIRE_TINY_GGUF(); }
};

TEST_P(TinyGgufOracle, LogitsAndGreedyTokensMatchTransformers) {
  const std::string name = GetParam();
  const DecodeDotsScope float_dots(kernels::MatmulPath::kFloatGemm);
  const LlamaModel model = LlamaModel::load(tiny_gguf_models().file(name), kernels::cpu_backend());
  const float worst = check_against_hf_goldens(model, name, name + ".gguf");
  std::printf("[gguf oracle] %s: max |adakv - transformers| / max |logit| = %.3g\n", name.c_str(),
              worst);
}

INSTANTIATE_TEST_SUITE_P(TinyModels, TinyGgufOracle, ::testing::ValuesIn(kModels),
                         [](const auto& info) {
                           std::string s = info.param;
                           std::replace(s.begin(), s.end(), '-', '_');
                           return s;
                         });

}  // namespace
}  // namespace adakv::test

// Hugging Face checkpoint directories (tests/tools/make_tiny_hf_models.py: llama in f32, bf16,
// f16 and sharded into two files; llama with llama3, linear and YaRN RoPE scaling; mistral;
// qwen2 with q/k/v biases and tied embeddings, in f32 and sharded bf16) loaded by adakv against
// transformers (fp32, eager attention) loading the same directories: logits within kHfRel of the
// largest at every checked position of a 24-token and a 200-token prompt (past the scaled
// models' pre-training context), the same argmax, and transformers' 64 greedy tokens after the
// 24-token prompt (tests/e2e/hf_goldens_check.h); and `adakv generate` at TP 2 (mpirun) giving
// TP 1's tokens and logits. Goldens: tests/data/hf_goldens/<model>.bin
// (tests/tools/gen_hf_goldens.py). Skipped without a python to make the checkpoints
// (tests/e2e/tiny_hf_models.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kernels/quant.h"
#include "model/llama.h"
#include "tests/e2e/decode_dots_scope.h"
#include "tests/e2e/hf_goldens_check.h"
#include "tests/e2e/run_adakv.h"
#include "tests/e2e/tiny_hf_models.h"

namespace adakv::test {
namespace {

using model::LlamaModel;

const char* const kModels[] = {
    "llama-f32",       "llama-bf16",    "llama-f16",   "llama-sharded-f32", "llama3-rope-f32",
    "linear-rope-f32", "yarn-rope-f32", "mistral-f32", "qwen2-f32",         "qwen2-sharded-bf16",
};

class HfCheckpointOracle : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override { ADAKV_SKIP_WITHOUT_TINY_HF(); }
};

TEST_P(HfCheckpointOracle, LogitsAndGreedyTokensMatchTransformers) {
  const std::string name = GetParam();
  const DecodeDotsScope float_dots(kernels::MatmulPath::kFloatGemm);
  const LlamaModel model = LlamaModel::load(tiny_hf_models().dir(name), kernels::cpu_backend());
  const float worst = check_against_hf_goldens(model, name, name);
  std::printf("[hf oracle] %s: max |adakv - transformers| / max |logit| = %.3g\n", name.c_str(),
              worst);
}

INSTANTIATE_TEST_SUITE_P(TinyModels, HfCheckpointOracle, ::testing::ValuesIn(kModels),
                         [](const auto& info) {
                           std::string s = info.param;
                           std::replace(s.begin(), s.end(), '-', '_');
                           return s;
                         });

std::vector<float> read_floats(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  std::vector<float> v(in ? static_cast<size_t>(in.tellg()) / sizeof(float) : 0);
  in.seekg(0);
  in.read(reinterpret_cast<char*>(v.data()),
          static_cast<std::streamsize>(v.size() * sizeof(float)));
  return v;
}

// The checkpoint's weights sharded at load as a GGUF's are: each rank maps its own rows.
class HfCheckpointTensorParallel : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override { ADAKV_SKIP_WITHOUT_TINY_HF(); }
};

TEST_P(HfCheckpointTensorParallel, Tp2GivesTheTokensAndLogitsOfOneRank) {
  const std::string name = GetParam(), dir = tiny_hf_models().dir(name);
  const auto tmp = std::filesystem::temp_directory_path();
  std::vector<float> logits[2];
  nlohmann::json tokens[2];
  for (int np : {1, 2}) {
    const std::string file =
        (tmp / ("adakv-hf-tp" + std::to_string(np) + "-" + std::to_string(::getpid()))).string();
    const test::Run r =
        adakv_mpi(np, "generate --model " + dir +
                          " --prompt 'The quick brown fox jumps over the lazy dog' "
                          "--max-tokens 8 --ignore-eos --json --threads 1 --kv-dtype "
                          "f32 --decode-dots float --policy full --logits-file " +
                          file);
    ASSERT_EQ(r.rc, 0) << r.err;
    tokens[np - 1] = nlohmann::json::parse(r.out)["tokens"];
    logits[np - 1] = read_floats(file);
    std::filesystem::remove(file);
  }
  EXPECT_EQ(tokens[0].size(), 8u);
  EXPECT_EQ(tokens[0], tokens[1]);
  ASSERT_EQ(logits[0].size(), logits[1].size());
  ASSERT_FALSE(logits[0].empty());
  float max_abs = 0, max_diff = 0;
  for (size_t i = 0; i < logits[0].size(); ++i) {
    max_abs = std::max(max_abs, std::fabs(logits[0][i]));
    max_diff = std::max(max_diff, std::fabs(logits[0][i] - logits[1][i]));
  }
  EXPECT_LE(max_diff, kHfRel * max_abs);
  std::printf("[hf tp] %s: TP 2 vs TP 1 max |diff| / max |logit| = %.3g\n", name.c_str(),
              max_diff / max_abs);
}

INSTANTIATE_TEST_SUITE_P(TinyModels, HfCheckpointTensorParallel,
                         ::testing::Values("llama-sharded-f32", "qwen2-sharded-bf16"),
                         [](const auto& info) {
                           std::string s = info.param;
                           std::replace(s.begin(), s.end(), '-', '_');
                           return s;
                         });

}  // namespace
}  // namespace adakv::test

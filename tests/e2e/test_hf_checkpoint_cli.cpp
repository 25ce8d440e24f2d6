// `adakv inspect DIR` and `adakv generate --model DIR` on a tiny Hugging Face checkpoint
// (tests/e2e/tiny_hf_models.h): the source, the config and the tensors' own dtypes shown;
// generation from the directory; a directory that is not a checkpoint refused by name.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/e2e/run_adakv.h"
#include "tests/e2e/tiny_hf_models.h"

namespace adakv::test {
namespace {

#define EXPECT_HAS(haystack, needle) \
  EXPECT_NE((haystack).find(needle), std::string::npos) << (haystack)

TEST(HfCheckpointCli, InspectShowsTheCheckpoint) {
  ADAKV_SKIP_WITHOUT_TINY_HF();
  const test::Run r = adakv("inspect " + tiny_hf_models().dir("qwen2-sharded-bf16"));
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_HAS(r.out, "source:    Hugging Face checkpoint");
  EXPECT_HAS(r.out, "architecture      qwen2");
  EXPECT_HAS(r.out, "qkv bias          yes");
  EXPECT_HAS(r.out, "tied embeddings   yes");
  EXPECT_HAS(r.out, "rope pairs        halves");
  EXPECT_HAS(r.out, "tokenizer.ggml.tokens");
  EXPECT_HAS(r.out, "blk.1.attn_q.bias");
  EXPECT_HAS(r.out, "BF16 26");  // the tensors' own dtype, all 26 of them
  EXPECT_EQ(r.out.find("\n  output.weight "), std::string::npos);  // tied: no LM head

  const test::Run scaled = adakv("inspect " + tiny_hf_models().dir("llama3-rope-f32"));
  ASSERT_EQ(scaled.rc, 0) << scaled.err;
  EXPECT_HAS(scaled.out, "llama.rope.scaling.type");
  EXPECT_HAS(scaled.out, "F32 21");
}

TEST(HfCheckpointCli, GeneratesFromTheDirectory) {
  ADAKV_SKIP_WITHOUT_TINY_HF();
  const test::Run r = adakv("generate --model " + tiny_hf_models().dir("llama-bf16") +
                            " --prompt 'The quick brown fox' --max-tokens 4 --ignore-eos --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["tokens"].size(), 4u);
}

TEST(HfCheckpointCli, ADirectoryWithoutConfigIsRefused) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("adakv-not-a-checkpoint-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const test::Run r = adakv("inspect " + dir.string());
  EXPECT_NE(r.rc, 0);
  EXPECT_HAS(r.err, "a directory without config.json");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace adakv::test

// The architectures adakv runs (model/architecture.h): the config read under each one's key
// prefix, an unknown one refused by name, the reordering of q/k rows stored for RoPE on halves,
// and the tensor-parallel ffn split at ffn_down's block boundaries.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/ops.h"
#include "kernels/quant.h"
#include "model/config.h"
#include "model/gguf/gguf.h"
#include "model/gguf/writer.h"
#include "model/rope_order.h"
#include "model/shard.h"
#include "random_data.h"

namespace adakv::model {
namespace {

constexpr uint32_t kD = 64, kFfn = 512, kVocab = 10;

// A GGUF of architecture `arch` with its hyper-parameters under "<key_prefix>." and the tensors
// the config reads: token_embd, and ffn_down in `down` (zeros).
gguf::GgufFile config_file(const std::string& arch, const std::string& key_prefix,
                           kernels::WeightFormat down = kernels::WeightFormat::kF32,
                           const std::function<void(gguf::GgufWriter&)>& more = {}) {
  gguf::GgufWriter w;
  w.add_string("general.architecture", arch);
  const std::string p = key_prefix + ".";
  w.add_u32(p + "block_count", 1);
  w.add_u32(p + "embedding_length", kD);
  w.add_u32(p + "attention.head_count", 4);
  w.add_u32(p + "attention.head_count_kv", 2);
  w.add_u32(p + "feed_forward_length", kFfn);
  w.add_u32(p + "context_length", 32768);
  w.add_f32(p + "attention.layer_norm_rms_epsilon", 1e-6f);
  w.add_f32(p + "rope.freq_base", 1e6f);
  w.add_tensor_f32("token_embd.weight", {kD, kVocab}, std::vector<float>(kD * kVocab));
  w.add_tensor("blk.0.ffn_down.weight", static_cast<gguf::GgmlType>(down), {kFfn, kD},
               std::vector<uint8_t>(kD * kernels::row_bytes(down, kFfn)));
  if (more) more(w);
  const auto bytes = w.bytes();
  return gguf::GgufFile::parse(bytes.data(), bytes.size());
}

std::string config_error(const gguf::GgufFile& f) {
  try {
    ModelConfig::from_gguf(f);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "no error";
}

TEST(Architecture, Qwen2ReadsItsOwnKeysAndHasBiasesAndHalves) {
  const ModelConfig c = ModelConfig::from_gguf(config_file("qwen2", "qwen2"));
  EXPECT_EQ(c.architecture, "qwen2");
  EXPECT_EQ(c.n_layers, 1u);
  EXPECT_EQ(c.d_model, kD);
  EXPECT_EQ(c.n_heads, 4u);
  EXPECT_EQ(c.n_kv_heads, 2u);
  EXPECT_EQ(c.head_dim, 16u);
  EXPECT_EQ(c.ffn_dim, kFfn);
  EXPECT_EQ(c.context_length, 32768u);
  EXPECT_FLOAT_EQ(c.rms_eps, 1e-6f);
  EXPECT_FLOAT_EQ(c.rope_theta, 1e6f);
  EXPECT_EQ(c.rope_pairs, RopePairs::kHalves);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_TRUE(c.tied_embeddings);
}

TEST(Architecture, LlamaStaysAsItWas) {
  const ModelConfig c = ModelConfig::from_gguf(config_file("llama", "llama"));
  EXPECT_EQ(c.rope_pairs, RopePairs::kAdjacent);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_EQ(c.ffn_shard_align, 1u);  // float32 ffn_down: any cut
}

TEST(Architecture, KeysUnderAnotherPrefixAreMissing) {
  // A qwen2 file whose keys say llama.*: the error names the key it looked for.
  EXPECT_NE(config_error(config_file("qwen2", "llama")).find("qwen2.block_count"),
            std::string::npos);
}

TEST(Architecture, AnUnknownOneIsNamedWithTheKnownOnes) {
  const std::string e = config_error(config_file("mamba", "mamba"));
  for (const char* want : {"'mamba'", "llama", "qwen2"}) {
    EXPECT_NE(e.find(want), std::string::npos) << e;
  }
}

TEST(Architecture, RopeScalingIsReadFromItsKeys) {
  using Type = kernels::RopeScaling::Type;
  const auto config_with = [](const std::function<void(gguf::GgufWriter&)>& more) {
    return ModelConfig::from_gguf(config_file("qwen2", "qwen2", kernels::WeightFormat::kF32, more));
  };
  EXPECT_EQ(config_with({}).rope_scaling.type, Type::kNone);
  const auto yarn = config_with([](gguf::GgufWriter& w) {
    w.add_string("qwen2.rope.scaling.type", "yarn");
    w.add_f32("qwen2.rope.scaling.factor", 4.0f);
    w.add_u32("qwen2.rope.scaling.original_context_length", 32768);
    w.add_f32("qwen2.rope.scaling.yarn_beta_fast", 16.0f);
  });
  EXPECT_EQ(yarn.rope_scaling.type, Type::kYarn);
  EXPECT_EQ(yarn.rope_scaling.factor, 4.0);
  EXPECT_EQ(yarn.rope_scaling.original_context, 32768u);
  EXPECT_EQ(yarn.rope_scaling.beta_fast, 16.0);
  EXPECT_EQ(yarn.rope_scaling.beta_slow, 1.0) << "the default";
  const auto llama3 = config_with([](gguf::GgufWriter& w) {
    w.add_string("qwen2.rope.scaling.type", "llama3");
    w.add_f32("qwen2.rope.scaling.factor", 8.0f);
    w.add_u32("qwen2.rope.scaling.original_context_length", 8192);
    w.add_f32("qwen2.rope.scaling.low_freq_factor", 1.0f);
    w.add_f32("qwen2.rope.scaling.high_freq_factor", 4.0f);
  });
  EXPECT_EQ(llama3.rope_scaling.type, Type::kLlama3);
  EXPECT_EQ(llama3.rope_scaling.high_freq_factor, 4.0);
  // llama.cpp's form of Llama 3's scaling: a divisor per rotated pair.
  const auto divisors = config_with([](gguf::GgufWriter& w) {
    std::vector<float> d(kD / 4 / 2, 1.0f);
    d.back() = 8.0f;
    w.add_tensor_f32("rope_freqs.weight", {kD / 4 / 2}, d);
  });
  ASSERT_EQ(divisors.rope_scaling.freq_divisors.size(), kD / 4 / 2);
  EXPECT_EQ(divisors.rope_scaling.freq_divisors.back(), 8.0f);
  // The older key for linear scaling.
  const auto legacy =
      config_with([](gguf::GgufWriter& w) { w.add_f32("qwen2.rope.scale_linear", 2.0f); });
  EXPECT_EQ(legacy.rope_scaling.type, Type::kLinear);
  EXPECT_EQ(legacy.rope_scaling.factor, 2.0);
}

TEST(Architecture, RopeScalingAdakvDoesNotRunIsRefusedByTheKeyThatAsksForIt) {
  const auto error_with = [](const std::function<void(gguf::GgufWriter&)>& more) {
    return config_error(config_file("qwen2", "qwen2", kernels::WeightFormat::kF32, more));
  };
  EXPECT_NE(error_with([](gguf::GgufWriter& w) {
              w.add_string("qwen2.rope.scaling.type", "longrope");
            }).find("qwen2.rope.scaling.type is 'longrope'"),
            std::string::npos);
  EXPECT_NE(error_with([](gguf::GgufWriter& w) {
              w.add_f32("qwen2.rope.scaling.factor", 4.0f);
            }).find("qwen2.rope.scaling.factor is 4 without a rope.scaling.type"),
            std::string::npos);
  EXPECT_NE(error_with([](gguf::GgufWriter& w) {
              w.add_string("qwen2.rope.scaling.type", "yarn");
              w.add_f32("qwen2.rope.scaling.factor", 4.0f);
            }).find("qwen2.rope.scaling.original_context_length"),
            std::string::npos);
  EXPECT_NE(error_with([](gguf::GgufWriter& w) {
              w.add_string("qwen2.rope.scaling.type", "linear");
              w.add_f32("qwen2.rope.scaling.factor", 0.5f);
            }).find("at least 1"),
            std::string::npos);
  EXPECT_NE(error_with([](gguf::GgufWriter& w) {
              w.add_tensor_f32("rope_freqs.weight", {3}, std::vector<float>(3, 1.0f));
            }).find("rope_freqs.weight must be F32 [8]"),
            std::string::npos);
  EXPECT_NE(error_with([](gguf::GgufWriter& w) {
              w.add_string("adakv.rope.pairs", "diagonal");
            }).find("adakv.rope.pairs is 'diagonal'"),
            std::string::npos);
  // Keys that say "no scaling" are fine.
  EXPECT_EQ(error_with([](gguf::GgufWriter& w) {
              w.add_string("qwen2.rope.scaling.type", "none");
              w.add_f32("qwen2.rope.scaling.factor", 1.0f);
            }),
            "no error");
}

TEST(Architecture, ASlidingWindowCapsTheContext) {
  const auto window = ModelConfig::from_gguf(
      config_file("llama", "llama", kernels::WeightFormat::kF32,
                  [](gguf::GgufWriter& w) { w.add_u32("llama.attention.sliding_window", 4096); }));
  EXPECT_EQ(window.sliding_window, 4096u);
  EXPECT_EQ(window.context_length, 4096u);
  // A window no smaller than the context changes nothing.
  const auto wide = ModelConfig::from_gguf(
      config_file("llama", "llama", kernels::WeightFormat::kF32,
                  [](gguf::GgufWriter& w) { w.add_u32("llama.attention.sliding_window", 65536); }));
  EXPECT_EQ(wide.sliding_window, 0u);
  EXPECT_EQ(wide.context_length, 32768u);
}

TEST(Architecture, AdakvRopePairsOverridesTheArchitecture) {
  EXPECT_EQ(ModelConfig::from_gguf(config_file("llama", "llama")).rope_pairs, RopePairs::kAdjacent);
  EXPECT_EQ(ModelConfig::from_gguf(config_file("llama", "llama", kernels::WeightFormat::kF32,
                                               [](gguf::GgufWriter& w) {
                                                 w.add_string("adakv.rope.pairs", "halves");
                                               }))
                .rope_pairs,
            RopePairs::kHalves);
}

TEST(Architecture, FfnShardAlignIsDownsBlock) {
  EXPECT_EQ(ModelConfig::from_gguf(config_file("qwen2", "qwen2", kernels::WeightFormat::kQ4_K))
                .ffn_shard_align,
            256u);
  EXPECT_EQ(ModelConfig::from_gguf(config_file("qwen2", "qwen2", kernels::WeightFormat::kQ8_0))
                .ffn_shard_align,
            32u);
}

// RoPE on halves, as Hugging Face computes it: (x[i], x[i + rot/2]) by pos * theta^(-2i/rot).
void rope_halves(float* x, int32_t pos, size_t n_heads, size_t head_dim, size_t rot, float theta) {
  const size_t half = rot / 2;
  for (size_t h = 0; h < n_heads; ++h) {
    float* p = x + h * head_dim;
    for (size_t i = 0; i < half; ++i) {
      const float inv = 1.0f / std::pow(theta, float(2 * i) / float(rot));
      const float angle = float(pos) * inv, c = std::cos(angle), s = std::sin(angle);
      const float a = p[i], b = p[i + half];
      p[i] = a * c - b * s;
      p[i + half] = a * s + b * c;
    }
  }
}

TEST(RopeOrder, HalvesOnTheFileRowsAreAdjacentPairsOnTheReorderedRows) {
  for (auto [heads, head_dim, rot] :
       {std::tuple<size_t, size_t, size_t>{1, 2, 2}, {3, 16, 16}, {2, 64, 32}, {14, 64, 64}}) {
    const std::vector<size_t> order = halves_to_adjacent(heads, head_dim, rot);
    std::vector<size_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    std::vector<size_t> iota(order.size());
    std::iota(iota.begin(), iota.end(), size_t{0});
    ASSERT_EQ(sorted, iota) << "a permutation";
    const auto x = test::random_vector(heads * head_dim, uint32_t(heads * 100 + rot));
    for (int32_t pos : {0, 1, 7, 4097}) {
      std::vector<float> want = x;
      rope_halves(want.data(), pos, heads, head_dim, rot, 1e6f);
      std::vector<float> got(x.size());
      for (size_t j = 0; j < x.size(); ++j) got[j] = x[order[j]];
      kernels::check(kernels::rope_adjacent(got.data(), &pos, 1, heads, head_dim, heads * head_dim,
                                            kernels::rope_frequencies(1e6f, rot)),
                     "rope_adjacent");
      for (size_t j = 0; j < x.size(); ++j) {
        ASSERT_NEAR(got[j], want[order[j]], 1e-5f * (1 + std::fabs(want[order[j]])))
            << "row " << j << ", position " << pos;
      }
    }
  }
  EXPECT_THROW(halves_to_adjacent(1, 8, 9), std::invalid_argument);
}

ModelConfig ffn_config(size_t ffn, size_t align) {
  ModelConfig c;
  c.n_layers = 1;
  c.n_heads = 14;
  c.n_kv_heads = 2;
  c.head_dim = 64;
  c.d_model = 896;
  c.ffn_dim = ffn;
  c.ffn_shard_align = align;
  c.vocab_size = 151936;
  return c;
}

TEST(ShardLayout, FfnSplitsAtQuantBlocksWhereAnEvenSplitWouldCutOne) {
  // Qwen2.5-0.5B: 4864 = 19 blocks of 256.
  const ModelConfig c = ffn_config(4864, 256);
  const auto r0 = ShardLayout::make(c, 0, 2), r1 = ShardLayout::make(c, 1, 2);
  EXPECT_EQ(r0.ffn_begin, 0u);
  EXPECT_EQ(r0.ffn_dim, 2560u);
  EXPECT_EQ(r1.ffn_begin, 2560u);
  EXPECT_EQ(r1.ffn_dim, 2304u);
  EXPECT_EQ(r1.local(c).ffn_dim, 2304u);
  EXPECT_EQ(ShardLayout::make(c, 0, 1).ffn_dim, 4864u);
  // An even split on block boundaries stays even.
  const auto even = ShardLayout::make(ffn_config(1536, 32), 1, 2);
  EXPECT_EQ(even.ffn_begin, 768u);
  EXPECT_EQ(even.ffn_dim, 768u);
  // Fewer blocks than ranks.
  ModelConfig tiny = ffn_config(512, 256);
  tiny.n_heads = tiny.n_kv_heads = 8;
  try {
    ShardLayout::make(tiny, 0, 4);
    FAIL() << "4 ranks over 2 blocks";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("quantization blocks"), std::string::npos) << e.what();
  }
}

TEST(ShardLayout, Qwen2HeadsTakeTp1And2Only) {
  const ModelConfig c = ffn_config(4864, 256);
  for (size_t tp : {3, 4, 8}) {
    EXPECT_THROW(ShardLayout::make(c, 0, tp), std::invalid_argument) << tp;
  }
  const auto s = ShardLayout::make(c, 1, 2);
  EXPECT_EQ(s.n_q_heads, 7u);
  EXPECT_EQ(s.q_head_begin, 7u);
  EXPECT_EQ(s.n_kv_heads, 1u);
  EXPECT_EQ(s.kv_head_begin, 1u);
}

}  // namespace
}  // namespace adakv::model

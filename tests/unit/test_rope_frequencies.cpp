// RoPE frequencies (plain, linear, llama3, YaRN) against transformers' LlamaRotaryEmbedding for
// the same configs: tests/data/rope_goldens.json (tests/tools/gen_rope_goldens.py).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "kernels/ops.h"
#include "kernels/rope_frequencies.h"

namespace {

namespace k = adakv::kernels;
using Type = k::RopeScaling::Type;

// Units in the last place between two floats of the same sign.
int64_t ulps(float a, float b) {
  int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  return std::abs(int64_t{ia} - int64_t{ib});
}

k::RopeScaling scaling_of(const nlohmann::json& j) {
  k::RopeScaling s;
  if (j.empty()) return s;
  const std::string type = j.at("rope_type");
  s.type = type == "linear" ? Type::kLinear : type == "llama3" ? Type::kLlama3 : Type::kYarn;
  s.factor = j.at("factor");
  s.original_context = j.value("original_max_position_embeddings", size_t{0});
  s.low_freq_factor = j.value("low_freq_factor", s.low_freq_factor);
  s.high_freq_factor = j.value("high_freq_factor", s.high_freq_factor);
  s.beta_fast = j.value("beta_fast", s.beta_fast);
  s.beta_slow = j.value("beta_slow", s.beta_slow);
  s.attention_factor = j.value("attention_factor", 0.0);
  return s;
}

TEST(RopeFrequencies, MatchTransformersForEveryScaling) {
  std::ifstream in(std::string(ADAKV_TEST_DATA_DIR) + "/rope_goldens.json");
  ASSERT_TRUE(in) << "tests/data/rope_goldens.json";
  const auto goldens = nlohmann::json::parse(in);
  ASSERT_GE(goldens.at("cases").size(), 7u);
  for (const auto& c : goldens.at("cases")) {
    const std::string name = c.at("name");
    const auto r = k::rope_frequencies(c.at("theta").get<float>(), c.at("rot_dim").get<size_t>(),
                                       scaling_of(c.at("scaling")));
    const auto& want = c.at("inv_freq");
    ASSERT_EQ(r.inv_freq.size(), want.size()) << name;
    int64_t worst = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      worst = std::max(worst, ulps(r.inv_freq[i], want[i].get<float>()));
    }
    // The same float32 expressions as transformers': equal but for the last bit of pow.
    EXPECT_LE(worst, 1) << name << ": inverse frequencies differ by " << worst << " ulp";
    EXPECT_FLOAT_EQ(r.cos_sin_scale, c.at("attention_scaling").get<float>()) << name;
  }
}

TEST(RopeFrequencies, ScalingChangesOnlyTheFrequenciesItShould) {
  const auto plain = k::rope_frequencies(500000.0f, 128);
  k::RopeScaling llama3;
  llama3.type = Type::kLlama3;
  llama3.factor = 8;
  llama3.original_context = 8192;
  const auto scaled = k::rope_frequencies(500000.0f, 128, llama3);
  // High frequencies (short wavelengths) are kept, the lowest divided by the factor.
  EXPECT_EQ(scaled.inv_freq.front(), plain.inv_freq.front());
  EXPECT_FLOAT_EQ(scaled.inv_freq.back(), plain.inv_freq.back() / 8);
  EXPECT_EQ(scaled.cos_sin_scale, 1.0f);
}

TEST(RopeFrequencies, DivisorsDivide) {
  k::RopeScaling s;
  s.freq_divisors = {1, 2, 4, 8};
  const auto plain = k::rope_frequencies(10000.0f, 8);
  const auto divided = k::rope_frequencies(10000.0f, 8, s);
  for (size_t i = 0; i < 4; ++i)
    EXPECT_EQ(divided.inv_freq[i], plain.inv_freq[i] / s.freq_divisors[i]);
}

TEST(RopeFrequencies, RefusesWhatItCannotCompute) {
  EXPECT_THROW(k::rope_frequencies(10000.0f, 7), std::invalid_argument);
  EXPECT_THROW(k::rope_frequencies(10000.0f, 0), std::invalid_argument);
  k::RopeScaling yarn;
  yarn.type = Type::kYarn;
  yarn.factor = 4;
  EXPECT_THROW(k::rope_frequencies(10000.0f, 64, yarn), std::invalid_argument)
      << "yarn without the original context";
  yarn.original_context = 4096;
  yarn.factor = 0.5;
  EXPECT_THROW(k::rope_frequencies(10000.0f, 64, yarn), std::invalid_argument) << "factor < 1";
  k::RopeScaling divisors;
  divisors.freq_divisors = {1, 2};
  EXPECT_THROW(k::rope_frequencies(10000.0f, 64, divisors), std::invalid_argument);
}

// YaRN's attention factor scales cos and sin: a rotation by angle 0 multiplies by it.
TEST(RopeFrequencies, TheCosSinScaleMultipliesTheRotation) {
  k::RopeScaling yarn;
  yarn.type = Type::kYarn;
  yarn.factor = 4;
  yarn.original_context = 4096;
  const auto freqs = k::rope_frequencies(10000.0f, 8, yarn);
  ASSERT_NEAR(freqs.cos_sin_scale, 0.1 * std::log(4.0) + 1, 1e-6);
  std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8};
  const int32_t pos = 0;
  k::check(k::rope_adjacent(x.data(), &pos, 1, 1, 8, 8, freqs), "rope_adjacent");
  for (size_t i = 0; i < 8; ++i) EXPECT_FLOAT_EQ(x[i], float(i + 1) * freqs.cos_sin_scale);
}

}  // namespace

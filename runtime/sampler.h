// Picks the next token from logits: greedy at temperature 0, otherwise softmax at the
// temperature restricted by top-k then top-p, drawn with a seeded generator.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace adakv::runtime {

struct SamplingParams {
  float temperature = 0.0f;  // 0: greedy (argmax)
  float top_p = 1.0f;        // nucleus mass in (0, 1]
  int top_k = 0;             // 0: no limit
  uint64_t seed = 0;

  // Throws std::invalid_argument naming the bad field.
  void validate() const;
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);
  int32_t sample(const float* logits, size_t vocab);

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> candidates_;
};

// Index of the largest logit; the lowest index wins ties.
int32_t argmax(const float* logits, size_t n);

}  // namespace adakv::runtime

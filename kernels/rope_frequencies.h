// The rotation frequencies of RoPE, computed once per model on the host: plain
// (theta^(-2i/rot_dim)), or scaled for a context longer than the one the model was pre-trained
// on (linear, Llama 3's, YaRN) as Hugging Face transformers computes them for the checkpoint's
// rope_scaling, so that every position rotates as the trained model's does.
#pragma once

#include <cstddef>
#include <vector>

namespace adakv::kernels {

struct RopeScaling {
  enum class Type {
    kNone,
    kLinear,  // every frequency divided by factor (position interpolation)
    kLlama3,  // low frequencies divided by factor, high ones kept, a smooth ramp between
    kYarn,    // NTK-by-parts ramp between interpolation and extrapolation, cos/sin scaled
  };
  Type type = Type::kNone;
  double factor = 1;            // the context extension factor (linear, llama3, yarn)
  size_t original_context = 0;  // llama3, yarn: positions of the pre-training context
  double low_freq_factor = 1;   // llama3: wavelengths above original_context / this are divided
  double high_freq_factor = 4;  // llama3: wavelengths below original_context / this are kept
  double beta_fast = 32;        // yarn: rotations over the original context where the ramp ends
  double beta_slow = 1;         // yarn: ... and where it starts
  double attention_factor = 0;  // yarn: scale of cos and sin; 0 means 0.1 ln(factor) + 1
  // Per-frequency divisors applied after the scaling above: a GGUF's rope_freqs.weight, which is
  // how llama.cpp's converter stores Llama 3's scaling. Empty, or rot_dim / 2 of them.
  std::vector<float> freq_divisors;
};

const char* to_string(RopeScaling::Type type);

struct RopeFrequencies {
  std::vector<float> inv_freq;  // rot_dim / 2: pair i turns by position * inv_freq[i] radians
  float cos_sin_scale = 1;      // multiplies cos and sin (YaRN's attention factor)
  size_t rot_dim() const { return 2 * inv_freq.size(); }
};

// Throws std::invalid_argument for an odd or zero rot_dim, a factor below 1, a missing
// original_context where the type needs one, or divisors of another count.
RopeFrequencies rope_frequencies(float theta, size_t rot_dim, const RopeScaling& scaling = {});

}  // namespace adakv::kernels

#include "kernels/rope_frequencies.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>
#include <string>

namespace adakv::kernels {

namespace {

// Llama 3's rule, in float like transformers (torch float32 tensors against Python scalars):
// wavelengths longer than original / low_freq_factor are interpolated (divided by factor), those
// shorter than original / high_freq_factor kept, the ones between blended by where their
// wavelength falls.
void scale_llama3(std::vector<float>& inv_freq, const RopeScaling& s) {
  const float factor = static_cast<float>(s.factor);
  const float original = static_cast<float>(s.original_context);
  const float low = static_cast<float>(s.low_freq_factor);
  const float high = static_cast<float>(s.high_freq_factor);
  const float low_freq_wavelen = static_cast<float>(double(s.original_context) / s.low_freq_factor);
  const float high_freq_wavelen =
      static_cast<float>(double(s.original_context) / s.high_freq_factor);
  for (float& f : inv_freq) {
    const float wavelen = static_cast<float>(2 * std::numbers::pi) / f;
    const float scaled = wavelen > low_freq_wavelen ? f / factor : f;
    if (wavelen < high_freq_wavelen || wavelen > low_freq_wavelen) {
      f = scaled;
      continue;
    }
    const float smooth = (original / wavelen - low) / (high - low);
    f = (1 - smooth) * scaled / factor + smooth * scaled;
  }
}

// YaRN (NTK-by-parts): dimensions that turn fewer than beta_slow times over the original context
// are interpolated, those turning more than beta_fast times extrapolated (kept), a linear ramp
// in between; the ramp's ends are whole dimensions (transformers' truncate = true).
void scale_yarn(std::vector<float>& inv_freq, float theta, size_t rot_dim, const RopeScaling& s) {
  const double dim = static_cast<double>(rot_dim);
  auto correction_dim = [&](double rotations) {
    return dim * std::log(double(s.original_context) / (rotations * 2 * std::numbers::pi)) /
           (2 * std::log(double(theta)));
  };
  const double low = std::max(std::floor(correction_dim(s.beta_fast)), 0.0);
  double high = std::min(std::ceil(correction_dim(s.beta_slow)), dim - 1);
  if (low == high) high += 0.001;  // a step instead of a division by zero
  const float factor = static_cast<float>(s.factor);
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    const float pos_freq = std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(rot_dim));
    const float extrapolation = 1.0f / pos_freq;
    const float interpolation = 1.0f / (factor * pos_freq);
    const float ramp = std::clamp(
        (static_cast<float>(i) - static_cast<float>(low)) / static_cast<float>(high - low), 0.0f,
        1.0f);
    const float keep = 1 - ramp;  // the share of extrapolation
    inv_freq[i] = interpolation * (1 - keep) + extrapolation * keep;
  }
}

}  // namespace

const char* to_string(RopeScaling::Type type) {
  switch (type) {
    case RopeScaling::Type::kNone:
      return "none";
    case RopeScaling::Type::kLinear:
      return "linear";
    case RopeScaling::Type::kLlama3:
      return "llama3";
    case RopeScaling::Type::kYarn:
      return "yarn";
  }
  return "?";
}

RopeFrequencies rope_frequencies(float theta, size_t rot_dim, const RopeScaling& s) {
  if (rot_dim == 0 || rot_dim % 2 != 0) {
    throw std::invalid_argument("rope: rot_dim " + std::to_string(rot_dim) +
                                " must be even and positive");
  }
  if (s.type != RopeScaling::Type::kNone && !(s.factor >= 1)) {
    throw std::invalid_argument("rope: " + std::string(to_string(s.type)) + " scaling factor " +
                                std::to_string(s.factor) + " must be at least 1");
  }
  if ((s.type == RopeScaling::Type::kLlama3 || s.type == RopeScaling::Type::kYarn) &&
      s.original_context == 0) {
    throw std::invalid_argument("rope: " + std::string(to_string(s.type)) +
                                " scaling needs the original context length");
  }
  if (s.type == RopeScaling::Type::kLlama3 && !(s.high_freq_factor > s.low_freq_factor)) {
    throw std::invalid_argument("rope: llama3 scaling needs high_freq_factor > low_freq_factor");
  }
  const size_t half = rot_dim / 2;
  if (!s.freq_divisors.empty() && s.freq_divisors.size() != half) {
    throw std::invalid_argument("rope: " + std::to_string(s.freq_divisors.size()) +
                                " frequency divisors for " + std::to_string(half) + " frequencies");
  }
  RopeFrequencies r;
  r.inv_freq.resize(half);
  // As PyTorch computes them (1 / theta^(2i/d) in float), so that angles match transformers'
  // to the last bit before the sin/cos.
  for (size_t i = 0; i < half; ++i) {
    r.inv_freq[i] = 1.0f / std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(rot_dim));
  }
  switch (s.type) {
    case RopeScaling::Type::kNone:
      break;
    case RopeScaling::Type::kLinear:
      for (float& f : r.inv_freq) f /= static_cast<float>(s.factor);
      break;
    case RopeScaling::Type::kLlama3:
      scale_llama3(r.inv_freq, s);
      break;
    case RopeScaling::Type::kYarn:
      scale_yarn(r.inv_freq, theta, rot_dim, s);
      r.cos_sin_scale = static_cast<float>(
          s.attention_factor > 0 ? s.attention_factor
                                 : (s.factor > 1 ? 0.1 * std::log(s.factor) + 1.0 : 1.0));
      break;
  }
  for (size_t i = 0; i < s.freq_divisors.size(); ++i) r.inv_freq[i] /= s.freq_divisors[i];
  return r;
}

}  // namespace adakv::kernels

// Seeded random test data shared by the kernel tests.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace adakv::test {

// n draws of N(0, scale^2), the same for the same seed.
inline std::vector<float> random_vector(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

}  // namespace adakv::test

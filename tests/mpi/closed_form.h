// Closed-form inputs and results of the collective tests (tests/mpi on MPI, tests/gpu on
// NCCL), valid for any number of ranks: rank r holds x_i * (r + 1), so the sum over ranks is
// x_i * size * (size + 1) / 2 and the max is x_i * size. x_i = i mod P, with P chosen so that
// every partial sum, in any order the library adds them, is an integer below 2^24: exact in
// float, so results compare with ==.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace adakv::test {

// Float counts and byte counts every collective test covers (0 is a valid no-op).
inline const std::vector<size_t> kFloatCounts = {0, 1, 7, 4096, size_t{1} << 20};
inline const std::vector<size_t> kByteCounts = {0, 1, 1000003};

// The period P of x_i: 65521 (a prime, so block offsets cannot hide), smaller when the rank
// count would push sums past 2^24.
inline size_t value_period(int size) {
  const size_t triangle = static_cast<size_t>(size) * (size + 1) / 2;
  return std::min<size_t>(65521, (size_t{1} << 24) / triangle);
}

inline float rank_value(size_t i, int rank, int size) {
  return static_cast<float>((i % value_period(size)) * (rank + 1));
}
inline float sum_value(size_t i, int size) {
  return static_cast<float>((i % value_period(size)) * size * (size + 1) / 2);
}
inline float max_value(size_t i, int size) {
  return static_cast<float>((i % value_period(size)) * size);
}

inline std::vector<float> rank_values(size_t n, int rank, int size) {
  std::vector<float> values(n);
  for (size_t i = 0; i < n; ++i) values[i] = rank_value(i, rank, size);
  return values;
}

// The byte at position i of a broadcast from `root`; other ranks start from its complement.
inline uint8_t root_byte(size_t i, int root) {
  return static_cast<uint8_t>(i * 131 + static_cast<size_t>(root) * 7 + 1);
}

// got[i] == expected(i) for every i, reporting the first mismatch and how many there are.
template <typename T, typename Expected>
testing::AssertionResult all_equal(const T* got, size_t n, Expected expected) {
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < n; ++i) {
    if (got[i] != expected(i) && bad++ == 0) first = i;
  }
  if (bad == 0) return testing::AssertionSuccess();
  return testing::AssertionFailure()
         << bad << " of " << n << " elements differ; first at " << first << ": got " << +got[first]
         << ", expected " << +expected(first);
}

}  // namespace adakv::test

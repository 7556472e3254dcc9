// Seeded random GEMM operands for the device tests (tests/device/, tests/rocket/): the same seed
// gives the same values in every test and on every run.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "core/fp16.h"

namespace npuflow::device_test {

// `count` integers uniform in [lo, hi], as T.
template <typename T>
std::vector<T> random_ints(size_t count, int lo, int hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(lo, hi);
  std::vector<T> values(count);
  for (T& v : values) v = static_cast<T>(dist(rng));
  return values;
}

// `count` fp16 values (bits) uniform in [-1, 1].
inline std::vector<uint16_t> random_halves(size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<uint16_t> values(count);
  for (uint16_t& v : values) v = float_to_half_bits(dist(rng));
  return values;
}

}  // namespace npuflow::device_test

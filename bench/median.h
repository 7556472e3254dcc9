// The median of a bench's timed passes (the upper one of an even count).
#pragma once

#include <algorithm>
#include <vector>

namespace npuflow::bench {

inline double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

}  // namespace npuflow::bench

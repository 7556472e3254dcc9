// Growing scratch buffers: steady-state calls allocate nothing once the largest shape was seen.
#pragma once

#include <cstddef>
#include <vector>

namespace npuflow {

// `buffer` holding at least `count` elements (grown, never shrunk); its data.
template <typename T>
T* sized(std::vector<T>& buffer, size_t count) {
  if (buffer.size() < count) buffer.resize(count);
  return buffer.data();
}

}  // namespace npuflow

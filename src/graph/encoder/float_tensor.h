// Small float tensors the matcher evaluates at match time: constant subgraphs folded (a
// position embedding computed from its table), and the probes that read a rotation's tables.
#pragma once

#include <cstdint>
#include <vector>

namespace npuflow::encoder {

struct FloatTensor {
  std::vector<int64_t> shape;
  std::vector<float> data;
};

// ONNX (numpy) broadcasting of Add (add) or Mul; false if the shapes do not broadcast.
bool broadcast(const FloatTensor& a, const FloatTensor& b, bool add, FloatTensor& out);
// Concat of two tensors of one rank along `axis`.
bool concat(const FloatTensor& a, const FloatTensor& b, int64_t axis, FloatTensor& out);

}  // namespace npuflow::encoder

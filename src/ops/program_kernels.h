// The tensor program's kernels (ops/tensor_program.h), shared by its two groups: elementwise
// arithmetic (program_elementwise.cc) and shape and layout ops (program_layout.cc).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ops/tensor_program.h"

namespace npuflow::program {

using Inputs = std::vector<TensorView>;
using Outputs = std::vector<ProgramTensor>;

// ONNX multidirectional broadcasting of `shapes`; false if they do not broadcast.
bool broadcast_shape(const std::vector<const std::vector<int64_t>*>& shapes,
                     std::vector<int64_t>& out);
// Element strides of `shape` read as `out` (0 along broadcast axes).
std::vector<int64_t> broadcast_strides(const std::vector<int64_t>& shape,
                                       const std::vector<int64_t>& out);
// Calls visit(offsets) for every element of `out` in row-major order, with each input's element
// offset under broadcasting.
template <typename Visit>
void for_each_broadcast(const std::vector<int64_t>& out,
                        const std::vector<std::vector<int64_t>>& strides, Visit visit) {
  const size_t rank = out.size(), inputs = strides.size();
  int64_t total = 1;
  for (int64_t d : out) total *= d;
  if (total == 0) return;
  std::vector<int64_t> index(rank, 0), offsets(inputs, 0);
  for (int64_t n = 0; n < total; ++n) {
    visit(offsets);
    for (size_t axis = rank; axis-- > 0;) {
      ++index[axis];
      for (size_t i = 0; i < inputs; ++i) offsets[i] += strides[i][axis];
      if (index[axis] < out[axis]) break;
      for (size_t i = 0; i < inputs; ++i) offsets[i] -= strides[i][axis] * out[axis];
      index[axis] = 0;
    }
  }
}

// Calls f(T{}) with the C++ type of `type` (bool as uint8_t); false for a type the program does
// not compute on.
template <typename F>
bool dispatch(ElementType type, F f) {
  switch (type) {
    case ElementType::kFloat32:
      f(float{});
      return true;
    case ElementType::kInt64:
      f(int64_t{});
      return true;
    case ElementType::kInt32:
      f(int32_t{});
      return true;
    case ElementType::kBool:
      f(uint8_t{});
      return true;
    default:
      return false;
  }
}

// An input's integer values (int64 or int32), e.g. a shape or axes operand.
bool read_integers(const TensorView& t, std::vector<int64_t>& out);
// `axis` in [-rank, rank) made non-negative; false when outside.
bool normalize_axis(int64_t& axis, int64_t rank);

Status op_error(const ProgramOp& op, const std::string& what);

// Each returns an error for an op it does not implement.
Status run_elementwise(const ProgramOp& op, const Inputs& in, Outputs& out);
Status run_layout(const ProgramOp& op, const Inputs& in, Outputs& out);
bool is_elementwise(const std::string& op_type);
bool is_layout(const std::string& op_type);

}  // namespace npuflow::program

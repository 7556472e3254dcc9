// The fused node's inputs: by name (how a compile step finds the runtime values a claim names),
// and as typed tensors at run time; and its outputs, allocated at run time.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/element_type.h"
#include "core/status.h"
#include "ort/ort_api.h"

namespace npuflow::ort {

// The fused node's input names, in order ("" for an omitted optional input).
Status fused_input_names(const OrtNode* node, std::vector<std::string>& names);
// The position of `name` among them.
std::optional<size_t> index_of(const std::vector<std::string>& names, const std::string& name);

// A fused node input at run time: its type, shape and data (borrowed from ONNX Runtime).
struct TypedInput {
  ElementType type = ElementType::kUnknown;
  std::vector<int64_t> shape;
  const void* data = nullptr;
};
// Input `index` of the kernel context; `what` names it in the error when it is missing.
Result<TypedInput> read_input(OrtKernelContext* context, size_t index, const char* what);

// A fused node output at run time. ONNX Runtime keeps a node whose result nothing reads (a dead
// claim, at least with its optimizations off) and then hands its kernel no tensor for it:
// `read` is false and there is nothing to write.
struct OutputTensor {
  bool read = false;
  ElementType type = ElementType::kUnknown;
  void* data = nullptr;  // may be null for an empty tensor
};
// Output `index` of the kernel context, allocated with `shape`.
Result<OutputTensor> allocate_output(OrtKernelContext* context, size_t index,
                                     std::span<const int64_t> shape);

}  // namespace npuflow::ort

#include "ops/tensor_program.h"

#include <cstring>

#include "core/strings.h"
#include "ops/program_kernels.h"

namespace npuflow {

ProgramTensor::ProgramTensor(ElementType type, std::vector<int64_t> shape)
    : type_(type), shape_(std::move(shape)) {
  count_ = 1;
  for (int64_t d : shape_) count_ *= d;
  storage_.assign((bytes() + sizeof(uint64_t) - 1) / sizeof(uint64_t), 0);
}

ProgramTensor ProgramTensor::copy_of(ElementType type, std::vector<int64_t> shape,
                                     const void* data) {
  ProgramTensor t(type, std::move(shape));
  if (t.bytes()) std::memcpy(t.storage_.data(), data, t.bytes());
  return t;
}

int64_t TensorView::count() const {
  int64_t n = 1;
  for (int64_t d : *shape) n *= d;
  return n;
}

TensorView view_of(const ProgramTensor& tensor) {
  return {tensor.type(), &tensor.shape(), tensor.raw()};
}

const ProgramAttribute* ProgramOp::attribute(const std::string& name) const {
  for (const auto& [key, value] : attributes)
    if (key == name) return &value;
  return nullptr;
}

int64_t ProgramOp::int_attribute(const std::string& name, int64_t fallback) const {
  const ProgramAttribute* a = attribute(name);
  return a && a->integer ? *a->integer : fallback;
}

bool program_op_supported(const std::string& op_type) {
  return program::is_elementwise(op_type) || program::is_layout(op_type);
}

bool program_type_supported(ElementType type) {
  return type == ElementType::kFloat32 || type == ElementType::kInt64 ||
         type == ElementType::kInt32 || type == ElementType::kBool;
}

Result<ProgramResult> TensorProgram::run(const std::vector<TensorView>& inputs) const {
  if (inputs.size() != input_slots.size()) {
    return internal_error(
        str_cat("a tensor program takes ", input_slots.size(), " inputs, not ", inputs.size()));
  }
  ProgramResult result;
  result.slots.resize(static_cast<size_t>(slot_count));
  std::vector<TensorView> views(static_cast<size_t>(slot_count));
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!program_type_supported(inputs[i].type)) {
      return invalid_argument(str_cat("tensor program input '", input_names[i], "' is ",
                                      element_type_name(inputs[i].type)));
    }
    views[static_cast<size_t>(input_slots[i])] = inputs[i];
  }
  for (const ProgramConstant& c : constants) views[static_cast<size_t>(c.slot)] = view_of(c.value);
  program::Outputs out;
  for (const ProgramOp& op : ops) {
    program::Inputs in;
    for (int slot : op.inputs) {
      if (slot < 0) {
        in.push_back({});
        continue;
      }
      const TensorView& v = views[static_cast<size_t>(slot)];
      if (v.shape == nullptr) return internal_error(str_cat(op.op_type, " reads an unset slot"));
      in.push_back(v);
    }
    out.clear();
    Status status = program::is_elementwise(op.op_type) ? program::run_elementwise(op, in, out)
                    : program::is_layout(op.op_type)    ? program::run_layout(op, in, out)
                                                        : program::op_error(op, "is not supported");
    NPUFLOW_RETURN_IF_ERROR(status);
    if (out.size() != op.outputs.size()) {
      return internal_error(
          str_cat(op.op_type, " made ", out.size(), " outputs, not ", op.outputs.size()));
    }
    for (size_t i = 0; i < out.size(); ++i) {
      auto& slot = result.slots[static_cast<size_t>(op.outputs[i])];
      slot = std::move(out[i]);
      views[static_cast<size_t>(op.outputs[i])] = view_of(slot);
    }
  }
  // An output that is an input or a constant itself is copied, so that every output lives in
  // the result.
  for (int slot : output_slots) {
    auto& owned = result.slots[static_cast<size_t>(slot)];
    const TensorView& v = views[static_cast<size_t>(slot)];
    if (v.shape == nullptr) return internal_error("a tensor program output is never written");
    if (owned.raw() != v.data || owned.type() != v.type)
      owned = ProgramTensor::copy_of(v.type, *v.shape, v.data);
  }
  return result;
}

namespace program {

bool broadcast_shape(const std::vector<const std::vector<int64_t>*>& shapes,
                     std::vector<int64_t>& out) {
  size_t rank = 0;
  for (const auto* s : shapes) rank = std::max(rank, s->size());
  out.assign(rank, 1);
  for (const auto* s : shapes) {
    const size_t offset = rank - s->size();
    for (size_t i = 0; i < s->size(); ++i) {
      const int64_t d = (*s)[i];
      int64_t& o = out[offset + i];
      if (d == o || d == 1) continue;
      if (o != 1) return false;
      o = d;
    }
  }
  return true;
}

std::vector<int64_t> broadcast_strides(const std::vector<int64_t>& shape,
                                       const std::vector<int64_t>& out) {
  std::vector<int64_t> strides(out.size(), 0);
  const size_t offset = out.size() - shape.size();
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[offset + i] = shape[i] == 1 ? 0 : stride;
    stride *= shape[i];
  }
  return strides;
}

bool read_integers(const TensorView& t, std::vector<int64_t>& out) {
  out.clear();
  if (t.shape == nullptr) return false;
  const int64_t n = t.count();
  if (t.type == ElementType::kInt64) {
    out.assign(t.as<int64_t>(), t.as<int64_t>() + n);
    return true;
  }
  if (t.type == ElementType::kInt32) {
    out.assign(t.as<int32_t>(), t.as<int32_t>() + n);
    return true;
  }
  return false;
}

bool normalize_axis(int64_t& axis, int64_t rank) {
  if (axis < -rank || axis >= rank) return false;
  if (axis < 0) axis += rank;
  return true;
}

Status op_error(const ProgramOp& op, const std::string& what) {
  return invalid_argument(str_cat("tensor program: ", op.op_type, " ", what));
}

}  // namespace program
}  // namespace npuflow

// A tensor program: the index and mask arithmetic around an encoder (token, position and type
// embedding lookups, padding and sliding-window masks, rotary tables from the sequence length) as
// a list of ONNX ops over small tensors, run by an exact interpreter inside the fused node. It
// lets a claim take in what the exporter wrote around the blocks, whatever the op sequence,
// instead of leaving it to the CPU EP: each op computes what the ONNX spec says, in fp32 / int64
// arithmetic as ONNX Runtime's CPU kernels do (bit-identical for everything but Cos, Sin, Exp and
// Log, which use the C library).
//
// The op set (`program_op_supported`) is the cheap one: elementwise, comparisons, logic, Where,
// Cast, shape and layout ops, Gather, Slice, Range, ConstantOfShape, CumSum, and MatMul over a
// contraction of one. Graph-level code decides what goes in (graph/encoder/side_program.cc).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/element_type.h"
#include "core/status.h"

namespace npuflow {

// A tensor the program owns: its element type, shape and data (8-byte aligned storage).
class ProgramTensor {
 public:
  ProgramTensor() = default;
  ProgramTensor(ElementType type, std::vector<int64_t> shape);
  static ProgramTensor copy_of(ElementType type, std::vector<int64_t> shape, const void* data);

  ElementType type() const { return type_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t count() const { return count_; }
  size_t bytes() const { return static_cast<size_t>(count_) * element_size(type_); }
  template <typename T>
  T* data() {
    return reinterpret_cast<T*>(storage_.data());
  }
  template <typename T>
  const T* data() const {
    return reinterpret_cast<const T*>(storage_.data());
  }
  const void* raw() const { return storage_.data(); }
  void* raw() { return storage_.data(); }

 private:
  ElementType type_ = ElementType::kUnknown;
  std::vector<int64_t> shape_;
  int64_t count_ = 0;
  std::vector<uint64_t> storage_;
};

// A borrowed view of a tensor: a program input, a constant, or another op's output.
struct TensorView {
  ElementType type = ElementType::kUnknown;
  const std::vector<int64_t>* shape = nullptr;
  const void* data = nullptr;
  int64_t count() const;
  template <typename T>
  const T* as() const {
    return static_cast<const T*>(data);
  }
};
TensorView view_of(const ProgramTensor& tensor);

struct ProgramAttribute {
  std::optional<int64_t> integer;
  std::optional<float> real;
  std::optional<std::vector<int64_t>> integers;
  std::optional<ProgramTensor> tensor;  // ConstantOfShape's value
};

// One ONNX op of the program; inputs and outputs are slots, -1 an omitted optional input.
struct ProgramOp {
  std::string op_type;
  std::vector<int> inputs;
  std::vector<int> outputs;
  std::vector<std::pair<std::string, ProgramAttribute>> attributes;
  const ProgramAttribute* attribute(const std::string& name) const;
  int64_t int_attribute(const std::string& name, int64_t fallback) const;
};

struct ProgramConstant {
  int slot = 0;
  std::string name;     // the graph's initializer, read at compile time
  ProgramTensor value;  // filled at compile time
};

// The outputs of one run; views into them stay valid while it lives.
struct ProgramResult {
  std::vector<ProgramTensor> slots;
  const ProgramTensor& output(size_t index, const std::vector<int>& output_slots) const {
    return slots[static_cast<size_t>(output_slots[index])];
  }
};

struct TensorProgram {
  int slot_count = 0;
  std::vector<int> input_slots;  // filled from the fused node's inputs, in this order
  std::vector<std::string> input_names;
  std::vector<ProgramConstant> constants;
  std::vector<ProgramOp> ops;     // in topological order
  std::vector<int> output_slots;  // what the encoder reads
  std::vector<std::string> output_names;

  bool empty() const { return ops.empty(); }
  // Runs every op; an input of the wrong type, a shape that does not broadcast or an index out
  // of range is an invalid-argument error naming the op, as the CPU EP would report it.
  Result<ProgramResult> run(const std::vector<TensorView>& inputs) const;
};

// Whether the interpreter implements `op_type` (ONNX domain) for these input types.
bool program_op_supported(const std::string& op_type);
// Element types the interpreter computes on.
bool program_type_supported(ElementType type);

}  // namespace npuflow

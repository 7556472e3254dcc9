// The tensor program's interpreter, op by op, on values worked out from the ONNX spec by hand;
// tests/integration/test_tensor_program.py checks the same ops against the CPU EP on random
// graphs.
#include "ops/tensor_program.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace npuflow {
namespace {

// A program of one op over `inputs` (each its own slot), one output.
struct OneOp {
  TensorProgram program;
  std::vector<ProgramTensor> inputs;

  OneOp(const std::string& op_type, std::vector<ProgramTensor> in,
        std::vector<std::pair<std::string, ProgramAttribute>> attributes = {}, int outputs = 1)
      : inputs(std::move(in)) {
    ProgramOp op;
    op.op_type = op_type;
    for (size_t i = 0; i < inputs.size(); ++i) {
      program.input_slots.push_back(static_cast<int>(i));
      program.input_names.push_back("in" + std::to_string(i));
      op.inputs.push_back(static_cast<int>(i));
    }
    program.slot_count = static_cast<int>(inputs.size()) + outputs;
    for (int o = 0; o < outputs; ++o) {
      op.outputs.push_back(static_cast<int>(inputs.size()) + o);
      program.output_slots.push_back(static_cast<int>(inputs.size()) + o);
      program.output_names.push_back("out" + std::to_string(o));
    }
    op.attributes = std::move(attributes);
    program.ops.push_back(std::move(op));
  }
  Result<ProgramResult> run() const {
    std::vector<TensorView> views;
    for (const ProgramTensor& t : inputs) views.push_back(view_of(t));
    return program.run(views);
  }
  ProgramTensor out(size_t index = 0) const {
    auto r = run();
    EXPECT_TRUE(r.is_ok()) << r.status().to_string();
    if (!r.is_ok()) return {};
    return r.value().output(index, program.output_slots);
  }
};

ProgramTensor i64(std::vector<int64_t> values, std::vector<int64_t> shape) {
  return ProgramTensor::copy_of(ElementType::kInt64, std::move(shape), values.data());
}
ProgramTensor f32(std::vector<float> values, std::vector<int64_t> shape) {
  return ProgramTensor::copy_of(ElementType::kFloat32, std::move(shape), values.data());
}
ProgramTensor boolean(std::vector<uint8_t> values, std::vector<int64_t> shape) {
  return ProgramTensor::copy_of(ElementType::kBool, std::move(shape), values.data());
}
template <typename T>
std::vector<T> values(const ProgramTensor& t) {
  return std::vector<T>(t.data<T>(), t.data<T>() + t.count());
}
ProgramAttribute ints(std::vector<int64_t> v) {
  ProgramAttribute a;
  a.integers = std::move(v);
  return a;
}
ProgramAttribute integer(int64_t v) {
  ProgramAttribute a;
  a.integer = v;
  return a;
}

TEST(TensorProgram, BroadcastArithmeticAlignsTrailingAxes) {
  OneOp op("Sub", {f32({1.0f}, {}), f32({1, 0, 1, 1, 0, 0}, {2, 1, 1, 3})});
  const ProgramTensor y = op.out();
  EXPECT_EQ(y.shape(), (std::vector<int64_t>{2, 1, 1, 3}));
  EXPECT_EQ(values<float>(y), (std::vector<float>{0, 1, 0, 0, 1, 1}));
  OneOp grid("Add", {i64({0, 10}, {2, 1}), i64({1, 2, 3}, {3})});
  EXPECT_EQ(values<int64_t>(grid.out()), (std::vector<int64_t>{1, 2, 3, 11, 12, 13}));
  OneOp bad("Add", {i64({0, 1}, {2}), i64({1, 2, 3}, {3})});
  EXPECT_FALSE(bad.run().is_ok());
}

TEST(TensorProgram, IntegerArithmeticWrapsAndTruncates) {
  const int64_t big = std::numeric_limits<int64_t>::max();
  OneOp add("Add", {i64({big}, {1}), i64({1}, {1})});
  EXPECT_EQ(values<int64_t>(add.out())[0], std::numeric_limits<int64_t>::min());
  OneOp div("Div", {i64({7, -7, 7}, {3}), i64({2, 2, -2}, {3})});
  EXPECT_EQ(values<int64_t>(div.out()), (std::vector<int64_t>{3, -3, -3}));
  OneOp zero("Div", {i64({7}, {1}), i64({0}, {1})});
  EXPECT_FALSE(zero.run().is_ok());
}

TEST(TensorProgram, ComparisonsLogicAndWhere) {
  OneOp le("LessOrEqual", {i64({0, 3, 5}, {3}), i64({3}, {})});
  const ProgramTensor mask = le.out();
  EXPECT_EQ(mask.type(), ElementType::kBool);
  EXPECT_EQ(values<uint8_t>(mask), (std::vector<uint8_t>{1, 1, 0}));
  OneOp neg("Not", {mask});
  EXPECT_EQ(values<uint8_t>(neg.out()), (std::vector<uint8_t>{0, 0, 1}));
  const float lowest = std::numeric_limits<float>::lowest();
  OneOp where("Where", {boolean({1, 0}, {2, 1}), f32({lowest}, {}), f32({5, 6}, {2})});
  EXPECT_EQ(values<float>(where.out()), (std::vector<float>{lowest, lowest, 5, 6}));
  OneOp mixed("And", {i64({1}, {1}), i64({1}, {1})});
  EXPECT_FALSE(mixed.run().is_ok());
}

TEST(TensorProgram, CastsTruncateAndTestNonZero) {
  OneOp to_int("Cast", {f32({2.7f, -2.7f, NAN}, {3})}, {{"to", integer(7)}});
  // NaN converts as this CPU converts it (the CPU EP's Cast is a plain C++ conversion).
#if defined(__aarch64__)
  const int64_t nan_as_int = 0;
#else
  const int64_t nan_as_int = std::numeric_limits<int64_t>::min();
#endif
  EXPECT_EQ(values<int64_t>(to_int.out()), (std::vector<int64_t>{2, -2, nan_as_int}));
  OneOp to_bool("Cast", {f32({0.0f, -0.0f, 0.5f, NAN}, {4})}, {{"to", integer(9)}});
  EXPECT_EQ(values<uint8_t>(to_bool.out()), (std::vector<uint8_t>{0, 0, 1, 1}));
  OneOp to_float("Cast", {boolean({1, 0}, {2})}, {{"to", integer(1)}});
  EXPECT_EQ(values<float>(to_float.out()), (std::vector<float>{1, 0}));
  OneOp unknown("Cast", {f32({1}, {1})}, {{"to", integer(11)}});  // double
  EXPECT_FALSE(unknown.run().is_ok());
}

TEST(TensorProgram, ShapeReshapeSqueezeUnsqueeze) {
  const ProgramTensor x = i64({1, 2, 3, 4, 5, 6}, {1, 2, 3});
  OneOp shape("Shape", {x}, {{"start", integer(-2)}});
  EXPECT_EQ(values<int64_t>(shape.out()), (std::vector<int64_t>{2, 3}));
  OneOp reshape("Reshape", {x, i64({0, -1}, {2})});
  EXPECT_EQ(reshape.out().shape(), (std::vector<int64_t>{1, 6}));
  OneOp unsqueeze("Unsqueeze", {x, i64({-1, 1}, {2})});
  EXPECT_EQ(unsqueeze.out().shape(), (std::vector<int64_t>{1, 1, 2, 3, 1}));
  OneOp old_unsqueeze("Unsqueeze", {x}, {{"axes", ints({0})}});
  EXPECT_EQ(old_unsqueeze.out().shape(), (std::vector<int64_t>{1, 1, 2, 3}));
  OneOp squeeze("Squeeze", {x});
  EXPECT_EQ(squeeze.out().shape(), (std::vector<int64_t>{2, 3}));
  OneOp wrong("Squeeze", {x, i64({1}, {1})});
  EXPECT_FALSE(wrong.run().is_ok());
}

TEST(TensorProgram, SliceClampsAndStepsBackward) {
  const ProgramTensor x = i64({0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 10});
  const int64_t huge = std::numeric_limits<int64_t>::max();
  OneOp prefix("Slice", {x, i64({0}, {1}), i64({4}, {1}), i64({1}, {1}), i64({1}, {1})});
  EXPECT_EQ(values<int64_t>(prefix.out()), (std::vector<int64_t>{0, 1, 2, 3}));
  OneOp to_end("Slice", {x, i64({-3}, {1}), i64({huge}, {1}), i64({-1}, {1})});
  EXPECT_EQ(values<int64_t>(to_end.out()), (std::vector<int64_t>{7, 8, 9}));
  OneOp backward("Slice",
                 {x, i64({huge}, {1}), i64({-huge - 1}, {1}), i64({1}, {1}), i64({-3}, {1})});
  EXPECT_EQ(values<int64_t>(backward.out()), (std::vector<int64_t>{9, 6, 3, 0}));
  OneOp old("Slice", {x}, {{"starts", ints({2})}, {"ends", ints({5})}, {"axes", ints({-1})}});
  EXPECT_EQ(values<int64_t>(old.out()), (std::vector<int64_t>{2, 3, 4}));
  OneOp empty("Slice", {x, i64({5}, {1}), i64({2}, {1}), i64({1}, {1})});
  EXPECT_EQ(empty.out().shape(), (std::vector<int64_t>{1, 0}));
}

TEST(TensorProgram, GatherWrapsNegativeIndicesAndRefusesOutOfRange) {
  const ProgramTensor table = f32({0, 1, 10, 11, 20, 21}, {3, 2});
  OneOp rows("Gather", {table, i64({2, -3, -1, 1}, {2, 2})});
  const ProgramTensor y = rows.out();
  EXPECT_EQ(y.shape(), (std::vector<int64_t>{2, 2, 2}));
  EXPECT_EQ(values<float>(y), (std::vector<float>{20, 21, 0, 1, 20, 21, 10, 11}));
  OneOp column("Gather", {table, i64({1}, {})}, {{"axis", integer(1)}});
  EXPECT_EQ(values<float>(column.out()), (std::vector<float>{1, 11, 21}));
  OneOp outside("Gather", {table, i64({3}, {1})});
  EXPECT_FALSE(outside.run().is_ok());
}

TEST(TensorProgram, RangeCumSumConstantOfShapeExpandTileConcatTranspose) {
  OneOp range("Range", {i64({2}, {}), i64({9}, {}), i64({3}, {})});
  EXPECT_EQ(values<int64_t>(range.out()), (std::vector<int64_t>{2, 5, 8}));
  OneOp down("Range", {f32({1}, {}), f32({0}, {}), f32({-0.25f}, {})});
  EXPECT_EQ(values<float>(down.out()), (std::vector<float>{1, 0.75f, 0.5f, 0.25f}));
  // RoBERTa's position ids: cumsum of the padding mask.
  OneOp cumsum("CumSum", {i64({1, 1, 0, 1, 1, 1}, {2, 3}), i64({1}, {})});
  EXPECT_EQ(values<int64_t>(cumsum.out()), (std::vector<int64_t>{1, 2, 2, 1, 2, 3}));
  OneOp exclusive("CumSum", {i64({1, 2, 3}, {3}), i64({0}, {})},
                  {{"exclusive", integer(1)}, {"reverse", integer(1)}});
  EXPECT_EQ(values<int64_t>(exclusive.out()), (std::vector<int64_t>{5, 3, 0}));
  ProgramAttribute one;
  one.tensor = i64({1}, {1});
  OneOp fill("ConstantOfShape", {i64({2, 2}, {2})}, {{"value", one}});
  EXPECT_EQ(values<int64_t>(fill.out()), (std::vector<int64_t>{1, 1, 1, 1}));
  OneOp zeros("ConstantOfShape", {i64({3}, {1})});
  EXPECT_EQ(zeros.out().type(), ElementType::kFloat32);
  OneOp expand("Expand", {i64({7, 8}, {2, 1}), i64({2, 1, 3}, {3})});
  EXPECT_EQ(expand.out().shape(), (std::vector<int64_t>{2, 2, 3}));
  EXPECT_EQ(values<int64_t>(expand.out())[3], 8);
  OneOp tile("Tile", {i64({1, 2}, {1, 2}), i64({2, 2}, {2})});
  EXPECT_EQ(values<int64_t>(tile.out()), (std::vector<int64_t>{1, 2, 1, 2, 1, 2, 1, 2}));
  OneOp concat("Concat", {i64({1, 2}, {1, 2}), i64({3}, {1, 1})}, {{"axis", integer(-1)}});
  EXPECT_EQ(values<int64_t>(concat.out()), (std::vector<int64_t>{1, 2, 3}));
  OneOp transpose("Transpose", {i64({1, 2, 3, 4, 5, 6}, {2, 3})});
  EXPECT_EQ(values<int64_t>(transpose.out()), (std::vector<int64_t>{1, 4, 2, 5, 3, 6}));
}

// An empty tensor has no storage: joining or gathering it copies nothing (UBSan's null-pointer
// check under the ASan build, which fails on a memcpy from it).
TEST(TensorProgram, EmptyTensorsJoinAndGatherWithoutReadingStorage) {
  OneOp concat("Concat", {i64({}, {1, 0}), i64({4, 5}, {1, 2})}, {{"axis", integer(1)}});
  EXPECT_EQ(values<int64_t>(concat.out()), (std::vector<int64_t>{4, 5}));
  OneOp nothing("Concat", {i64({}, {0, 2}), i64({}, {0, 2})}, {{"axis", integer(0)}});
  EXPECT_EQ(nothing.out().shape(), (std::vector<int64_t>{0, 2}));
  OneOp rows("Gather", {i64({}, {3, 0}), i64({2, 0}, {2})});
  EXPECT_EQ(rows.out().shape(), (std::vector<int64_t>{2, 0}));
}

TEST(TensorProgram, OuterProductMatMulAndSlidingWindow) {
  // Rotary angles: positions [1, T, 1] x frequencies [1, 1, F].
  OneOp angles("MatMul", {f32({0, 1, 2}, {1, 3, 1}), f32({1.0f, 0.5f}, {1, 1, 2})});
  EXPECT_EQ(values<float>(angles.out()), (std::vector<float>{0, 0, 1, 0.5f, 2, 1}));
  // |i - j| <= 1 over 3 positions: a sliding window of width 3.
  OneOp distance("Sub", {i64({0, 1, 2}, {1, 3}), i64({0, 1, 2}, {3, 1})});
  OneOp absolute("Abs", {distance.out()});
  OneOp window("LessOrEqual", {absolute.out(), i64({1}, {})});
  EXPECT_EQ(values<uint8_t>(window.out()), (std::vector<uint8_t>{1, 1, 0, 1, 1, 1, 0, 1, 1}));
}

TEST(TensorProgram, ChainsOpsThroughSlotsAndCopiesPassThroughOutputs) {
  // The BERT extended mask: (1 - float(mask[:, None, None, :])) * lowest, then one more op.
  TensorProgram p;
  p.slot_count = 7;
  p.input_slots = {0};
  p.input_names = {"attention_mask"};
  p.constants.push_back({1, "axes", i64({1, 2}, {2})});
  p.constants.push_back({2, "one", f32({1.0f}, {})});
  ProgramOp unsqueeze{"Unsqueeze", {0, 1}, {3}, {}};
  ProgramOp cast{"Cast", {3}, {4}, {{"to", integer(1)}}};
  ProgramOp sub{"Sub", {2, 4}, {5}, {}};
  ProgramOp identity{"Identity", {5}, {6}, {}};
  p.ops = {unsqueeze, cast, sub, identity};
  p.output_slots = {6, 0};
  p.output_names = {"bias", "attention_mask"};
  const ProgramTensor mask = i64({1, 1, 0}, {1, 3});
  auto r = p.run({view_of(mask)});
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const ProgramTensor& bias = r.value().output(0, p.output_slots);
  EXPECT_EQ(bias.shape(), (std::vector<int64_t>{1, 1, 1, 3}));
  EXPECT_EQ(values<float>(bias), (std::vector<float>{0, 0, 1}));
  EXPECT_EQ(values<int64_t>(r.value().output(1, p.output_slots)), (std::vector<int64_t>{1, 1, 0}));
  // An input type the program does not compute on is the caller's error.
  const std::vector<uint16_t> halves = {0x3c00, 0x3c00, 0};
  const ProgramTensor wrong = ProgramTensor::copy_of(ElementType::kFloat16, {1, 3}, halves.data());
  auto bad = p.run({view_of(wrong)});
  ASSERT_FALSE(bad.is_ok());
}

}  // namespace
}  // namespace npuflow

#include "ort/encoder_node_compute.h"

#include "core/strings.h"
#include "graph/graph_view.h"
#include "ops/simd.h"
#include "ort/fused_node_inputs.h"

namespace npuflow::ort {
namespace {

Result<FloatInput> as_float(ElementType type, const std::vector<int64_t>& shape, const void* data,
                            const char* what) {
  if (type != ElementType::kFloat32) {
    return invalid_argument(
        str_cat("the fused encoder's ", what, " is ", element_type_name(type), ", not float32"));
  }
  return FloatInput{static_cast<const float*>(data), shape};
}

}  // namespace

EncoderNodeCompute::EncoderNodeCompute(std::shared_ptr<const VitEncoder> plan,
                                       EncoderNodeBinding binding)
    : plan_(std::move(plan)), binding_(std::move(binding)) {}

EncoderNodeCompute::EncoderNodeCompute(std::shared_ptr<const VitEncoder> plan,
                                       EncoderNodeBinding binding,
                                       std::shared_ptr<const ClaimVerifier> verifier,
                                       const VitEncoder* reference)
    : plan_(std::move(plan)),
      binding_(std::move(binding)),
      verifier_(std::move(verifier)),
      reference_(reference) {}

Status EncoderNodeCompute::run_plan(const VitEncoder& plan, const FloatInput& main,
                                    const std::vector<FloatInput>& side,
                                    const std::vector<NodeOutput>& outputs,
                                    const ExecContext& exec) const {
  std::vector<float*> exits(plan.exit_count(), nullptr);
  for (size_t i = 0; i < outputs.size(); ++i) {
    exits[static_cast<size_t>(binding_.output_exit[i])] = static_cast<float*>(outputs[i].data);
  }
  // Exits no fused output carries (none today) get scratch so the plan can write them.
  const int64_t count = outputs.empty() ? 0 : outputs[0].count;
  std::vector<std::vector<float>> spare;
  for (float*& exit : exits) {
    if (exit) continue;
    spare.emplace_back(static_cast<size_t>(count));
    exit = spare.back().data();
  }
  const ScopedPortableKernels kernels(binding_.portable_kernels);
  return plan.run(main, side, exits, exec);
}

Status EncoderNodeCompute::compute(OrtKernelContext* context) const {
  auto input = [&](size_t index, const char* what) { return read_input(context, index, what); };
  // The tensor program first: the plan's inputs may be its outputs.
  ProgramResult computed;
  if (binding_.program) {
    std::vector<TypedInput> typed;
    for (size_t index : binding_.program_inputs) {
      auto in = input(index, "program input");
      if (!in.is_ok()) return in.status();
      typed.push_back(std::move(in).value());
    }
    std::vector<TensorView> views;
    for (const TypedInput& t : typed) views.push_back({t.type, &t.shape, t.data});
    auto result = binding_.program->run(views);
    if (!result.is_ok()) return result.status();
    computed = std::move(result).value();
  }
  auto float_input = [&](const EncoderInputSource& source, const char* what) -> Result<FloatInput> {
    if (source.from_program) {
      const ProgramTensor& t = computed.output(source.index, binding_.program->output_slots);
      return as_float(t.type(), t.shape(), t.raw(), what);
    }
    auto in = input(source.index, what);
    if (!in.is_ok()) return in.status();
    return as_float(in.value().type, in.value().shape, in.value().data, what);
  };
  auto main = float_input(binding_.main_input, "main input");
  if (!main.is_ok()) return main.status();
  std::vector<FloatInput> side;
  for (const EncoderInputSource& source : binding_.side_inputs) {
    auto in = float_input(source, "side input");
    if (!in.is_ok()) return in.status();
    side.push_back(std::move(in).value());
  }
  auto shape = plan_->output_shape(main.value(), side);
  if (!shape.is_ok()) return shape.status();
  const int64_t count = element_count(shape.value());
  std::vector<NodeOutput> outputs;
  // An exit nothing reads still gets the plan's result, written to scratch: the plan computes
  // every exit in one pass.
  std::vector<std::vector<float>> unread;
  for (size_t i = 0; i < binding_.output_exit.size(); ++i) {
    auto output = allocate_output(context, i, shape.value());
    if (!output.is_ok()) return output.status();
    void* data = output.value().data;
    if (!output.value().read) data = unread.emplace_back(static_cast<size_t>(count)).data();
    outputs.push_back({ElementType::kFloat32, data, count});
  }
  if (unread.size() == outputs.size()) return Status::ok();
  const ExecContext exec = exec_context(context);
  if (!verifier_ || verifier_->state() == ClaimVerifier::State::kVerified || count == 0) {
    return run_plan(*plan_, main.value(), side, outputs, exec);
  }
  return verifier_->run(
      outputs,
      [&](const std::vector<NodeOutput>& to) -> Result<bool> {
        // The plan's projections run on the device (those it refuses fall back inside it).
        NPUFLOW_RETURN_IF_ERROR(run_plan(*plan_, main.value(), side, to, exec));
        return true;
      },
      [&](const std::vector<NodeOutput>& to) {
        return run_plan(*reference_, main.value(), side, to, exec);
      });
}

}  // namespace npuflow::ort

#include "ort/fused_node_compute.h"

#include <functional>

namespace npuflow::ort {

FusedNodeCompute::FusedNodeCompute() : OrtNodeComputeInfo{} {
  ort_version_supported = api().version;
  CreateState = CreateStateImpl;
  Compute = ComputeImpl;
  ReleaseState = ReleaseStateImpl;
}

OrtStatus* FusedNodeCompute::CreateStateImpl(OrtNodeComputeInfo* self, OrtNodeComputeContext*,
                                             void** state) noexcept {
  *state = self;  // compiled plans are immutable; no per-state data
  return nullptr;
}

void FusedNodeCompute::ReleaseStateImpl(OrtNodeComputeInfo*, void*) noexcept {}

OrtStatus* FusedNodeCompute::ComputeImpl(OrtNodeComputeInfo* self, void*,
                                         OrtKernelContext* context) noexcept {
  return guarded([&] { return from(self)->compute(context); });
}

ExecContext FusedNodeCompute::exec_context(OrtKernelContext* context) {
  ExecContext exec;
  exec.parallel_for = [context](size_t count, const std::function<void(size_t)>& task) {
    auto trampoline = [](void* data, size_t index) {
      (*static_cast<const std::function<void(size_t)>*>(data))(index);
    };
    if (OrtStatus* status = api().ort->KernelContext_ParallelFor(
            context, trampoline, count, 0, const_cast<std::function<void(size_t)>*>(&task))) {
      api().ort->ReleaseStatus(status);
      for (size_t i = 0; i < count; ++i) task(i);  // no pool available: run inline
    }
  };
  return exec;
}

}  // namespace npuflow::ort

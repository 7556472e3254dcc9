// The base of npuflow's OrtNodeComputeInfos: the C entry points ONNX Runtime calls, one virtual
// compute() per kind of fused node, and the session's intra-op pool lent to the layers below.
#pragma once

#include "core/parallel.h"
#include "ort/ort_api.h"

namespace npuflow::ort {

class FusedNodeCompute : public OrtNodeComputeInfo {
 public:
  FusedNodeCompute();
  virtual ~FusedNodeCompute() = default;
  FusedNodeCompute(const FusedNodeCompute&) = delete;
  FusedNodeCompute& operator=(const FusedNodeCompute&) = delete;

  // What ReleaseNodeComputeInfos deletes: every info npuflow hands out is one of these.
  static FusedNodeCompute* from(OrtNodeComputeInfo* info) {
    return static_cast<FusedNodeCompute*>(info);
  }

 protected:
  virtual Status compute(OrtKernelContext* context) const = 0;
  // ONNX Runtime's intra-op thread pool (KernelContext_ParallelFor) as an ExecContext.
  static ExecContext exec_context(OrtKernelContext* context);

 private:
  static OrtStatus* ORT_API_CALL CreateStateImpl(OrtNodeComputeInfo* self,
                                                 OrtNodeComputeContext* context,
                                                 void** state) noexcept;
  static OrtStatus* ORT_API_CALL ComputeImpl(OrtNodeComputeInfo* self, void* state,
                                             OrtKernelContext* context) noexcept;
  static void ORT_API_CALL ReleaseStateImpl(OrtNodeComputeInfo* self, void* state) noexcept;
};

}  // namespace npuflow::ort

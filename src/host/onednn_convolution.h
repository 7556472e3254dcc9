// An fp32 2-D convolution on oneDNN's convolution primitive: the host path of a claimed Conv
// (ops/conv2d.h), one image at a time. The output rows are cut into bands, each a primitive over
// the input rows it reads, run as tasks on the context's pool (one OpenMP thread each, as the
// host GEMMs run); the weight is reordered once into the layout oneDNN chose, and the plan for an
// input size is built on its first call and kept.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <utility>
#include <vector>

#include "core/parallel.h"
#include "core/status.h"
#include "device/convolution_geometry.h"

namespace npuflow {

class OneDnnConvolution {
 public:
  // weight [oc][ic][kh][kw] and bias [oc] (null: none) are copied.
  static Result<std::unique_ptr<OneDnnConvolution>> create(const ConvolutionGeometry& geometry,
                                                           const float* weight, const float* bias);
  ~OneDnnConvolution();

  // x [ic][ih][iw] -> y [oc][oh][ow] (oh, ow: ONNX's extents for ih, iw).
  Status run(const float* x, int64_t ih, int64_t iw, int64_t oh, int64_t ow, float* y,
             const ExecContext& context) const;

 private:
  struct Plan;
  explicit OneDnnConvolution(const ConvolutionGeometry& geometry);
  Result<const Plan*> plan_for(int64_t ih, int64_t iw) const;
  // A weight of `layout` already reordered for `building` or another input size's plan (null:
  // none); called under mutex_.
  dnnl::memory reordered_weight(const Plan& building, const dnnl::memory::desc& layout) const;

  ConvolutionGeometry geometry_;
  std::vector<float> weight_, bias_;
  mutable std::mutex mutex_;
  mutable std::map<std::pair<int64_t, int64_t>, std::unique_ptr<Plan>> plans_;
};

}  // namespace npuflow

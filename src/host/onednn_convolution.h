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
#include <utility>
#include <vector>

#include "core/parallel.h"
#include "core/status.h"

namespace npuflow {

// ONNX's attributes of a 2-D, group-1 convolution (pads begin and end per axis).
struct ConvolutionGeometry {
  int64_t ic = 0, oc = 0, kh = 0, kw = 0;
  int64_t stride_y = 1, stride_x = 1, dil_y = 1, dil_x = 1;
  int64_t pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
};

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

  ConvolutionGeometry geometry_;
  std::vector<float> weight_, bias_;
  mutable std::mutex mutex_;
  mutable std::map<std::pair<int64_t, int64_t>, std::unique_ptr<Plan>> plans_;
};

}  // namespace npuflow

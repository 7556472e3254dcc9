// The kernels a session's EP keeps alive and reports on at its end (one place, so the compile
// steps in separate files can add to it).
#pragma once

#include <memory>
#include <vector>

#include "ops/conv2d.h"
#include "ops/conv_transpose.h"
#include "ops/vit_encoder.h"
#include "ort/npuflow_ep.h"
#include "quant/integer_matmul.h"
#include "quant/qdq_matmul.h"
#include "route/claim_verifier.h"

namespace npuflow::ort {

struct NpuflowEp::Totals {
  std::vector<std::shared_ptr<const QdqMatMul>> kernels;
  std::vector<std::shared_ptr<const IntegerMatMul>> integer_kernels;
  std::vector<std::shared_ptr<const VitEncoder>> encoders;
  std::vector<std::shared_ptr<const ConvTranspose2d>> conv_transposes;
  std::vector<std::shared_ptr<const Conv2d>> convs;
  std::vector<std::shared_ptr<const ClaimVerifier>> verifiers;
};

}  // namespace npuflow::ort

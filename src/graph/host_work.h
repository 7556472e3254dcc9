// The host work a claim runs around its device GEMMs, per inference, derived from the claim:
// norms, activations, softmax and residual adds of an encoder layer; the quantize and
// requantize/dequantize passes of an integer GEMM. `npuflow plan` prices it on the board's A76
// cores (the fp32<->fp16 conversion of a device projection belongs to the device, and the plan
// adds it there). The claim report writes it as each claim's "host_work".
#pragma once

#include <string>
#include <vector>

#include "graph/claim.h"

namespace npuflow {

enum class HostWorkKind { kNorm, kActivation, kSoftmax, kElementwise, kConvert };

struct HostWork {
  std::string name;
  HostWorkKind kind = HostWorkKind::kElementwise;
  int64_t rows = -1;  // -1 when it depends on a symbolic dimension
  int64_t width = 0;  // elements per row
};

const char* host_work_kind_name(HostWorkKind kind);

std::vector<HostWork> host_work_of(const Claim& claim);

}  // namespace npuflow

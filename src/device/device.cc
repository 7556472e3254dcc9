#include "device/device.h"

#include <vector>

namespace npuflow {

Status Device::gemm_int8_blocks(const void* a, ElementType a_type, int64_t m, const PackedWeight& w,
                                const Int32BlockSink& sink, const ExecContext& context) {
  std::vector<int32_t> c(static_cast<size_t>(m * w.n()));
  NPUFLOW_RETURN_IF_ERROR(gemm_int8(a, a_type, m, w, c.data(), context));
  sink(0, 0, m, w.n(), c.data(), w.n());
  return Status::ok();
}

}  // namespace npuflow

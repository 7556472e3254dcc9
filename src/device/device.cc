#include "device/device.h"

#include <vector>

#include "core/strings.h"

namespace npuflow {

Status Device::gemm_int8_blocks(const void* a, ElementType a_type, int64_t m, const PackedWeight& w,
                                const Int32BlockSink& sink, const ExecContext& context) {
  std::vector<int32_t> c(static_cast<size_t>(m * w.n()));
  NPUFLOW_RETURN_IF_ERROR(gemm_int8(a, a_type, m, w, c.data(), context));
  sink(0, 0, m, w.n(), c.data(), w.n());
  return Status::ok();
}

Result<std::unique_ptr<PackedWeight>> Device::pack_fp16_weight(const uint16_t*, int64_t, int64_t) {
  return unsupported(str_cat(name(), " has no fp16 GEMM"));
}

Status Device::gemm_fp16(const uint16_t*, int64_t, const PackedWeight&, void*, ElementType,
                         const ExecContext&) {
  return unsupported(str_cat(name(), " has no fp16 GEMM"));
}

Result<std::unique_ptr<PackedWeight>> Device::pack_int4_weight(const int8_t*, int64_t, int64_t) {
  return unsupported(str_cat(name(), " has no int4 GEMM"));
}

Status Device::gemm_int4(const int8_t*, int64_t, const PackedWeight&, int32_t*,
                         const ExecContext&) {
  return unsupported(str_cat(name(), " has no int4 GEMM"));
}

Result<std::unique_ptr<PackedWeight>> Device::pack_groupwise_weight(const int8_t*, int64_t, int64_t,
                                                                    ElementType, int64_t) {
  return unsupported(str_cat(name(), " has no group-wise GEMM"));
}

Status Device::gemm_groupwise(const int8_t*, const float*, int64_t, const PackedWeight&,
                              const float*, float*, const ExecContext&) {
  return unsupported(str_cat(name(), " has no group-wise GEMM"));
}

}  // namespace npuflow

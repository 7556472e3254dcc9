#include "device/device.h"

#include "core/strings.h"

namespace npuflow {

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

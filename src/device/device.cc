#include "device/device.h"

#include <vector>

#include "core/strings.h"

namespace npuflow {

Status check_attention_call(const Fp16Attention& call) {
  if (call.tokens <= 0 || call.kv <= 0 || call.head_dim <= 0 || call.dv <= 0 || call.heads <= 0 ||
      call.kv_heads <= 0) {
    return invalid_argument(str_cat("attention shape tokens=", call.tokens, " kv=", call.kv,
                                    " head_dim=", call.head_dim, " dv=", call.dv,
                                    " heads=", call.heads, " kv_heads=", call.kv_heads,
                                    " has an empty dimension"));
  }
  if (call.heads % call.kv_heads != 0) {
    return invalid_argument(
        str_cat(call.heads, " query heads do not share ", call.kv_heads, " kv heads evenly"));
  }
  if (call.q == nullptr || call.k == nullptr || call.v == nullptr || call.out == nullptr) {
    return invalid_argument("attention needs q, k, v and out");
  }
  return Status::ok();
}

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

Status Device::attention_fp16(const Fp16Attention&, const ExecContext&) {
  return unsupported(str_cat(name(), " has no attention"));
}

}  // namespace npuflow

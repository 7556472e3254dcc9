#include "route/matmul_route.h"

#include "core/strings.h"

namespace npuflow {

const char* weight_format_name(WeightFormat format) {
  switch (format) {
    case WeightFormat::kF32:
      return "f32";
    case WeightFormat::kF16:
      return "f16";
    case WeightFormat::kBF16:
      return "bf16";
    case WeightFormat::kQ8_0:
      return "q8_0";
    case WeightFormat::kQ4_0:
      return "q4_0";
    case WeightFormat::kQ4_1:
      return "q4_1";
    case WeightFormat::kQ4_K:
      return "q4_K";
    case WeightFormat::kQ5_K:
      return "q5_K";
    case WeightFormat::kQ6_K:
      return "q6_K";
    case WeightFormat::kMXFP4:
      return "mxfp4";
    case WeightFormat::kOther:
      return "other";
  }
  return "other";
}

bool weight_format_is_quantized(WeightFormat format) {
  switch (format) {
    case WeightFormat::kF32:
    case WeightFormat::kF16:
    case WeightFormat::kBF16:
    case WeightFormat::kOther:
      return false;
    default:
      return true;
  }
}

int64_t weight_format_block(WeightFormat format) {
  switch (format) {
    case WeightFormat::kOther:
      return 0;
    case WeightFormat::kF32:
    case WeightFormat::kF16:
    case WeightFormat::kBF16:
      return 1;
    case WeightFormat::kQ8_0:
    case WeightFormat::kQ4_0:
    case WeightFormat::kQ4_1:
    case WeightFormat::kMXFP4:
      return 32;
    case WeightFormat::kQ4_K:
    case WeightFormat::kQ5_K:
    case WeightFormat::kQ6_K:
      return 256;
  }
  return 0;
}

RouteVerdict route_matmul(const MatmulCandidate& c, const MatmulRouting& routing) {
  auto refuse = [](const char* reason) { return RouteVerdict{false, reason}; };
  // Structure first: these hold whatever the row count.
  if (c.weight == WeightFormat::kOther) return refuse("weight_type");
  if (!c.weight_is_leaf) return refuse("weight_not_constant");
  if (!c.weight_is_2d) return refuse("weight_not_2d");
  if (!c.weight_contiguous) return refuse("weight_not_contiguous");
  if (!c.activation_f32) return refuse("activation_type");
  if (!c.activation_contiguous) return refuse("activation_not_contiguous");
  if (!c.output_f32 || !c.output_contiguous) return refuse("output_layout");
  if (c.special_hint) return refuse("op_hint");
  if (c.k <= 0 || c.n <= 0 || c.m <= 0) return refuse("empty");
  if (c.k % kContractKMultiple != 0) return refuse("k_not_multiple_of_32");
  if (c.k % weight_format_block(c.weight) != 0) return refuse("k_not_multiple_of_block");
  if (c.n % kContractNMultiple != 0) return refuse("n_not_multiple_of_16");
  const int64_t min_m = weight_format_is_quantized(c.weight) ? routing.min_m_quant : routing.min_m;
  if (c.m < min_m) return refuse("m_below_min");
  return RouteVerdict{true, ""};
}

std::string describe(const MatmulCandidate& c) {
  return str_cat("weight=", weight_format_name(c.weight), " k=", c.k, " n=", c.n, " m=", c.m);
}

}  // namespace npuflow

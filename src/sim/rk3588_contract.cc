#include "sim/rk3588_contract.h"

#include <algorithm>

#include "core/strings.h"

namespace npuflow::sim {
namespace {

constexpr ShapeContract kFp16{4, 32, 16, 2, 1, 12, 0, 0};
constexpr ShapeContract kInt8{4, 32, 32, 1, 1, 11, -128, 127};
// int4 values sit one per int8 in memory, two per byte in CBUF: Kt 1536 at Mt = Nt = 256.
constexpr ShapeContract kInt4{4, 32, 64, 1, 2, 12, -7, 7};

Status shape_error(NpuType type, const std::string& what) {
  return unsupported(str_cat("ROCKET_E_SHAPE: ", npu_type_name(type), " ", what));
}

}  // namespace

const char* npu_type_name(NpuType type) {
  switch (type) {
    case NpuType::kFp16:
      return "fp16";
    case NpuType::kInt8:
      return "int8";
    case NpuType::kInt4:
      return "int4";
  }
  return "?";
}

const ShapeContract& contract_for(NpuType type) {
  switch (type) {
    case NpuType::kFp16:
      return kFp16;
    case NpuType::kInt8:
      return kInt8;
    case NpuType::kInt4:
      return kInt4;
  }
  return kFp16;
}

Status check_shape(NpuType type, int64_t m, int64_t k, int64_t n) {
  const ShapeContract& c = contract_for(type);
  if (m <= 0) return shape_error(type, str_cat("M=", m, " must be positive"));
  if (m == 1) {
    return shape_error(type,
                       "M=1: the hardware is wrong below 4 rows and planners refuse it (pad to 4)");
  }
  if (m % c.m_multiple != 0) {
    return shape_error(type, str_cat("M=", m, " is not a multiple of ", c.m_multiple,
                                     " (planners refuse ragged M; zero-pad the rows)"));
  }
  if (k <= 0 || k % c.k_multiple != 0) {
    return shape_error(type, str_cat("K=", k, " is not a multiple of ", c.k_multiple));
  }
  if (n <= 0 || n % c.n_multiple != 0) {
    return shape_error(type, str_cat("N=", n, " is not a multiple of ", c.n_multiple));
  }
  for (auto [name, value] : {std::pair{"M", m}, std::pair{"K", k}, std::pair{"N", n}}) {
    if (value > kMaxDim) return shape_error(type, str_cat(name, "=", value, " exceeds 2^24"));
  }
  return Status::ok();
}

Status check_group(NpuType type, int64_t k, int64_t group) {
  if (type == NpuType::kFp16) return shape_error(type, "has no group-wise matmul");
  if (group <= 0 || group % kKGroup != 0) {
    return shape_error(type, str_cat("group=", group, " is not a multiple of 32"));
  }
  if (k % group != 0)
    return shape_error(type, str_cat("K=", k, " is not a multiple of group=", group));
  if (type == NpuType::kInt4 && 49 * group > kInt4TileLimit) {
    return shape_error(type,
                       str_cat("group=", group, " lets a tile overflow int16 (49*group > 32767)"));
  }
  return Status::ok();
}

int cbuf_banks(NpuType type, int64_t rows, int64_t kt) {
  const ShapeContract& c = contract_for(type);
  const int64_t bytes = (rows * kt * c.cbuf_bytes_num + c.cbuf_bytes_den - 1) / c.cbuf_bytes_den;
  return static_cast<int>((bytes + kCbufBankBytes - 1) / kCbufBankBytes);
}

namespace {

// Kt from min(K, 16384) down by 32 until feature + weight banks fit the budget.
Result<TilePlan> plan_with(NpuType type, int64_t m, int64_t k, int64_t n, int64_t nt,
                           const PlanOptions& options) {
  const ShapeContract& c = contract_for(type);
  TilePlan plan;
  plan.mt = std::min(m, kMaxTile);
  plan.nt = nt;
  int64_t start = std::min(k, kMaxKt) / kKGroup * kKGroup;
  if (options.kt_cap > 0) start = std::min(start, options.kt_cap / kKGroup * kKGroup);
  for (int64_t kt = start; kt >= kKGroup; kt -= kKGroup) {
    if (options.group > 0 && options.group % kt != 0) continue;
    const int feature = cbuf_banks(type, plan.mt, kt);
    const int weight = cbuf_banks(type, plan.nt, kt);
    if (feature + weight <= c.bank_budget) {
      plan.kt = kt;
      plan.feature_banks = feature;
      plan.weight_banks = weight;
      plan.m_tiles = (m + plan.mt - 1) / plan.mt;
      plan.n_tiles = (n + plan.nt - 1) / plan.nt;
      plan.k_tiles = (k + kt - 1) / kt;
      return plan;
    }
  }
  return unsupported(str_cat("ROCKET_E_TILING: ", npu_type_name(type), " M=", m, " K=", k, " N=", n,
                             " has no K tile that fits ", c.bank_budget, " CBUF banks"));
}

}  // namespace

Result<TilePlan> plan_tiles(NpuType type, int64_t m, int64_t k, int64_t n,
                            const PlanOptions& options) {
  auto plan = plan_with(type, m, k, n, std::min(n, kMaxTile), options);
  if (!plan.is_ok()) return plan;
  // ASYM (fp16): narrower weight tiles buy a deeper Kt when N > 256 and K needs several tiles.
  if (type == NpuType::kFp16 && options.asym && n > kMaxTile && plan.value().k_tiles > 1) {
    auto asym = plan_with(type, m, k, n, kMaxTile / 2, options);
    if (asym.is_ok()) {
      asym.value().asym = true;
      return asym;
    }
  }
  return plan;
}

int64_t worker_slice_width(NpuType type, int64_t n, int workers) {
  const int64_t multiple = std::max<int64_t>(16, contract_for(type).n_multiple);
  return round_up((n + workers - 1) / workers, multiple);
}

Result<std::vector<WorkerSlice>> plan_workers(NpuType type, int64_t m, int64_t k, int64_t n,
                                              int workers, const PlanOptions& options) {
  if (workers < 1 || workers > kMaxWorkers) {
    return unsupported(str_cat("ROCKET_E_SHAPE: nthr=", workers, " is outside 1..8"));
  }
  const int64_t width = worker_slice_width(type, n, workers);
  std::vector<WorkerSlice> slices;
  for (int64_t n0 = 0; n0 < n; n0 += width) {
    WorkerSlice slice;
    slice.n0 = n0;
    slice.n = std::min(width, n - n0);
    auto plan = plan_tiles(type, m, k, slice.n, options);
    if (!plan.is_ok()) return plan.status();
    slice.plan = plan.value();
    slices.push_back(slice);
  }
  return slices;
}

}  // namespace npuflow::sim

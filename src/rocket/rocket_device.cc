// SPDX-License-Identifier: GPL-3.0-or-later
#include "rocket/rocket_device.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <map>
#include <mutex>
#include <tuple>
#include <type_traits>
#include <vector>

#include "core/fp16.h"
#include "core/strings.h"
#include "rocket/rocket_device_state.h"

namespace npuflow::rocket {
namespace {

// The library's alignment (rocket_matmul.h): K%32 for both; N%32 int8 (fp16: kFp16NMultiple).
constexpr int64_t kKMultiple = 32;
constexpr int64_t kInt8NMultiple = 32;
constexpr int64_t kInt4NMultiple = 64;
constexpr int64_t kRowMultiple = 4;
// Resident weights are planned at the library's canonical tile M (MAX_TILE).
constexpr int kPlanRows = 256;

// K x N row-major -> B[Np][Kp] row-major, zero-padded.
template <typename T>
std::vector<T> transpose_padded(const T* weight, int64_t k, int64_t n, int64_t kp, int64_t np) {
  std::vector<T> b(static_cast<size_t>(kp * np), T{0});
  for (int64_t kk = 0; kk < k; ++kk) {
    for (int64_t col = 0; col < n; ++col) b[col * kp + kk] = weight[kk * n + col];
  }
  return b;
}

// run_resident_gemm's stage_row copying row `row` of a (k wide), and its emit_row copying an
// output row's first n values into row `row` of c.
template <typename T>
auto copy_rows_from(const T* a, int64_t k) {
  return [a, k](int64_t row, T* dst) {
    std::memcpy(dst, a + row * k, static_cast<size_t>(k) * sizeof(T));
  };
}
template <typename T>
auto copy_rows_into(T* c, int64_t n) {
  return [c, n](int64_t row, const T* src) {
    std::memcpy(c + row * n, src, static_cast<size_t>(n) * sizeof(T));
  };
}

}  // namespace

namespace {

class RocketWeight final : public PackedWeight {
 public:
  RocketWeight(int64_t k, int64_t n, ElementType type, int64_t kp, int64_t np,
               std::shared_ptr<RocketDevice::State> state, int64_t group = 0)
      : PackedWeight(k, n, type, group), kp(kp), np(np), state(std::move(state)) {}
  ~RocketWeight() override {
    std::lock_guard<std::mutex> lock(state->mutex);
    if (fp16 != nullptr) state->library->weights_free(state->fp16_ctx, fp16);
    if (int8 != nullptr) state->library->i8_weights_free(state->int8_ctx, int8);
    if (int4 != nullptr) state->library->i4_weights_free(state->int4_ctx, int4);
    std::lock_guard<std::mutex> profile(state->profile_mutex);
    state->resident_bytes -= static_cast<int64_t>(bytes);
  }
  size_t resident_bytes() const override { return bytes; }

  int64_t kp, np;
  std::shared_ptr<RocketDevice::State> state;
  rocket_weights* fp16 = nullptr;
  rocket_i8_weights* int8 = nullptr;
  rocket_i4_weights* int4 = nullptr;
  std::vector<int64_t> column_sums;  // int8: for uint8 activations
  size_t bytes = 0;
};

const RocketWeight* as_rocket(const PackedWeight& weight, ElementType type) {
  const auto* rocket = dynamic_cast<const RocketWeight*>(&weight);
  return rocket != nullptr && rocket->type() == type ? rocket : nullptr;
}

}  // namespace

RocketDevice::RocketDevice(std::shared_ptr<RocketLibrary> library, RocketDeviceOptions options)
    : state_(std::make_shared<State>()) {
  state_->library = std::move(library);
  state_->options = std::move(options);
  state_->sim_group = str_cat("npuflow-", reinterpret_cast<uintptr_t>(state_.get()));
}

std::string_view RocketDevice::name() const {
  return state_->options.name;
}

RocketDevice::~RocketDevice() = default;

std::string RocketDevice::description() const {
  return str_cat("RK3588 NPU through librocketnpu (", state_->library->path, "), ",
                 state_->options.workers > 0 ? str_cat(state_->options.workers, " worker fds")
                                             : std::string("the library's worker count"));
}

int64_t RocketDevice::row_multiple(ElementType) const {
  return kRowMultiple;
}

int64_t RocketDevice::resident_min_rows(ElementType operand) const {
  return operand == ElementType::kFloat16 ? kPlanRows : 1;
}

Result<std::unique_ptr<PackedWeight>> RocketDevice::pack_int8_weight(const int8_t* weight,
                                                                     int64_t k, int64_t n) {
  if (k <= 0 || n <= 0) return invalid_argument(str_cat("weight shape ", k, "x", n, " is empty"));
  const int64_t kp = round_up(k, kKMultiple), np = round_up(n, kInt8NMultiple);
  auto packed = std::make_unique<RocketWeight>(k, n, ElementType::kInt8, kp, np, state_);
  packed->column_sums.assign(static_cast<size_t>(n), 0);
  for (int64_t kk = 0; kk < k; ++kk) {
    for (int64_t col = 0; col < n; ++col) packed->column_sums[col] += weight[kk * n + col];
  }
  const std::vector<int8_t> b = transpose_padded(weight, k, n, kp, np);
  const RocketLibrary& lib = *state_->library;
  NPUFLOW_RETURN_IF_ERROR(state_->pack_resident(
      state_->int8_ctx, "rocket_i8_ctx_create", lib.i8_ctx_create, "rocket_i8_weights_pack",
      packed->int8,
      [&](rocket_i8_ctx* ctx) {
        return lib.i8_weights_pack(ctx, kPlanRows, static_cast<int>(kp), static_cast<int>(np),
                                   b.data());
      },
      str_cat(kp, "x", np)));
  packed->bytes = lib.i8_weights_bytes(packed->int8);
  state_->add_resident(packed->bytes);
  return std::unique_ptr<PackedWeight>(std::move(packed));
}

Status RocketDevice::gemm_int8(const void* a, ElementType a_type, int64_t m, const PackedWeight& pw,
                               int32_t* c, const ExecContext& context) {
  const RocketWeight* w = as_rocket(pw, ElementType::kInt8);
  if (w == nullptr || w->group() != 0) {
    return invalid_argument("gemm_int8 needs an int8 weight packed by rocket");
  }
  if (a_type != ElementType::kInt8 && a_type != ElementType::kUInt8) {
    return invalid_argument("gemm_int8 takes int8 or uint8 activations");
  }
  const int64_t k = w->k(), n = w->n();
  const bool shifted = a_type == ElementType::kUInt8;
  const auto copy = copy_rows_from(static_cast<const int8_t*>(a), k);
  return state_->run_resident_gemm<int8_t, int32_t>(
      "rocket_matmul_int8_prepacked", m, k, w->kp, w->np, context,
      [&](int64_t row, int8_t* dst) {
        if (!shifted) return copy(row, dst);
        const uint8_t* src = static_cast<const uint8_t*>(a) + row * k;
        for (int64_t kk = 0; kk < k; ++kk) dst[kk] = static_cast<int8_t>(src[kk] - 128);
      },
      [&](int mi, int ki, int ni, const int8_t* staged, int32_t* out) {
        return state_->library->matmul_int8_prepacked(state_->int8_ctx, mi, ki, ni, staged, out,
                                                      w->int8);
      },
      [&](int64_t row, const int32_t* src) {
        for (int64_t col = 0; col < n; ++col) {
          int64_t value = src[col];
          if (shifted) value += 128 * w->column_sums[static_cast<size_t>(col)];
          c[row * n + col] = static_cast<int32_t>(value);
        }
      });
}

Result<std::unique_ptr<PackedWeight>> RocketDevice::pack_float_weight(const float*, int64_t,
                                                                      int64_t) {
  return unsupported("the RK3588 NPU has no fp32 matmul (float work is packed as fp16)");
}

Status RocketDevice::gemm_float(const float*, int64_t, const PackedWeight&, float*,
                                const ExecContext&) {
  return unsupported("the RK3588 NPU has no fp32 matmul (float work is packed as fp16)");
}

Result<std::unique_ptr<PackedWeight>> RocketDevice::pack_fp16_weight(const uint16_t* weight,
                                                                     int64_t k, int64_t n) {
  if (k <= 0 || n <= 0) return invalid_argument(str_cat("weight shape ", k, "x", n, " is empty"));
  const int64_t kp = round_up(k, kKMultiple), np = round_up(n, kFp16NMultiple);
  auto packed = std::make_unique<RocketWeight>(k, n, ElementType::kFloat16, kp, np, state_);
  const std::vector<uint16_t> b = transpose_padded(weight, k, n, kp, np);
  const RocketLibrary& lib = *state_->library;
  NPUFLOW_RETURN_IF_ERROR(state_->pack_resident(
      state_->fp16_ctx, "rocket_ctx_create", lib.ctx_create, "rocket_weights_pack", packed->fp16,
      [&](rocket_ctx* ctx) {
        return lib.weights_pack(ctx, kPlanRows, static_cast<int>(kp), static_cast<int>(np),
                                reinterpret_cast<const _Float16*>(b.data()));
      },
      str_cat(kp, "x", np)));
  packed->bytes = static_cast<size_t>(kp * np) * sizeof(uint16_t);
  state_->add_resident(packed->bytes);
  return std::unique_ptr<PackedWeight>(std::move(packed));
}

Status RocketDevice::gemm_fp16(const uint16_t* a, int64_t m, const PackedWeight& pw, void* c,
                               ElementType c_type, const ExecContext& context) {
  const RocketWeight* w = as_rocket(pw, ElementType::kFloat16);
  if (w == nullptr) return invalid_argument("gemm_fp16 needs an fp16 weight packed by rocket");
  if (c_type != ElementType::kFloat16 && c_type != ElementType::kFloat32) {
    return invalid_argument("gemm_fp16 writes float16 or float32");
  }
  const int64_t k = w->k(), n = w->n();
  const auto copy_half = copy_rows_into(static_cast<uint16_t*>(c), n);
  return state_->run_resident_gemm<uint16_t, uint16_t>(
      "rocket_matmul_fp16_prepacked", m, k, w->kp, w->np, context, copy_rows_from(a, k),
      [&](int mi, int ki, int ni, const uint16_t* staged, uint16_t* out) {
        return state_->library->matmul_fp16_prepacked(state_->fp16_ctx, mi, ki, ni,
                                                      reinterpret_cast<const _Float16*>(staged),
                                                      reinterpret_cast<_Float16*>(out), w->fp16);
      },
      [&](int64_t row, const uint16_t* src) {
        if (c_type == ElementType::kFloat16) return copy_half(row, src);
        float* dst = static_cast<float*>(c) + row * n;
        for (int64_t col = 0; col < n; ++col) dst[col] = half_bits_to_float(src[col]);
      });
}

Result<std::unique_ptr<PackedWeight>> RocketDevice::pack_int4_weight(const int8_t* weight,
                                                                     int64_t k, int64_t n) {
  return pack_integer(weight, k, n, ElementType::kInt4, 0);
}

Result<std::unique_ptr<PackedWeight>> RocketDevice::pack_groupwise_weight(const int8_t* weight,
                                                                          int64_t k, int64_t n,
                                                                          ElementType type,
                                                                          int64_t group) {
  if (type != ElementType::kInt8 && type != ElementType::kInt4) {
    return invalid_argument("group-wise weights are int8 or int4");
  }
  if (group <= 0 || k % group != 0) {
    return unsupported(str_cat("ROCKET_E_SHAPE: K ", k, " is not a multiple of the group ", group));
  }
  return pack_integer(weight, k, n, type, group);
}

// int4 and group-wise weights: padded as int8 ones (a group-wise weight's K is the caller's, a
// multiple of its group), packed on the int4 or int8 context.
Result<std::unique_ptr<PackedWeight>> RocketDevice::pack_integer(const int8_t* weight, int64_t k,
                                                                 int64_t n, ElementType type,
                                                                 int64_t group) {
  const RocketLibrary& lib = *state_->library;
  const bool int4 = type == ElementType::kInt4;
  if (int4 ? (group > 0 ? !lib.has_groupwise_int4() : !lib.has_int4())
           : !lib.has_groupwise_int8()) {
    return unsupported(str_cat("librocketnpu '", lib.path, "' has no ",
                               group > 0 ? "group-wise " : "", int4 ? "int4" : "int8",
                               " resident matmul"));
  }
  if (k <= 0 || n <= 0) return invalid_argument(str_cat("weight shape ", k, "x", n, " is empty"));
  const int64_t kp = group > 0 ? k : round_up(k, kKMultiple);
  const int64_t np = round_up(n, int4 ? kInt4NMultiple : kInt8NMultiple);
  auto packed = std::make_unique<RocketWeight>(k, n, type, kp, np, state_, group);
  const std::vector<int8_t> b = transpose_padded(weight, k, n, kp, np);
  const int g = static_cast<int>(group), ki = static_cast<int>(kp), ni = static_cast<int>(np);
  if (int4) {
    NPUFLOW_RETURN_IF_ERROR(state_->pack_resident(
        state_->int4_ctx, "rocket_i4_ctx_create", lib.i4_ctx_create,
        group > 0 ? "rocket_i4_weights_pack_gw" : "rocket_i4_weights_pack", packed->int4,
        [&](rocket_i4_ctx* ctx) {
          return group > 0 ? lib.i4_weights_pack_gw(ctx, kPlanRows, ki, ni, b.data(), g)
                           : lib.i4_weights_pack(ctx, kPlanRows, ki, ni, b.data());
        },
        str_cat(kp, "x", np)));
    packed->bytes = lib.i4_weights_bytes(packed->int4);
  } else {
    NPUFLOW_RETURN_IF_ERROR(state_->pack_resident(
        state_->int8_ctx, "rocket_i8_ctx_create", lib.i8_ctx_create, "rocket_i8_weights_pack_gw",
        packed->int8,
        [&](rocket_i8_ctx* ctx) {
          return lib.i8_weights_pack_gw(ctx, kPlanRows, ki, ni, b.data(), g);
        },
        str_cat(kp, "x", np)));
    packed->bytes = lib.i8_weights_bytes(packed->int8);
  }
  state_->add_resident(packed->bytes);
  return std::unique_ptr<PackedWeight>(std::move(packed));
}

Status RocketDevice::gemm_int4(const int8_t* a, int64_t m, const PackedWeight& pw, int32_t* c,
                               const ExecContext& context) {
  const RocketWeight* w = as_rocket(pw, ElementType::kInt4);
  if (w == nullptr || w->group() != 0) {
    return invalid_argument("gemm_int4 needs an int4 weight packed by rocket");
  }
  return state_->run_resident_gemm<int8_t, int32_t>(
      "rocket_matmul_int4_prepacked", m, w->k(), w->kp, w->np, context, copy_rows_from(a, w->k()),
      [&](int mi, int ki, int ni, const int8_t* staged, int32_t* out) {
        return state_->library->matmul_int4_prepacked(state_->int4_ctx, mi, ki, ni, staged, out,
                                                      w->int4);
      },
      copy_rows_into(c, w->n()));
}

Status RocketDevice::gemm_groupwise(const int8_t* a, const float* a_scales, int64_t m,
                                    const PackedWeight& pw, const float* w_scales, float* c,
                                    const ExecContext& context) {
  const auto* w = dynamic_cast<const RocketWeight*>(&pw);
  if (w == nullptr || w->group() == 0) {
    return invalid_argument("gemm_groupwise needs a group-wise weight packed by rocket");
  }
  const int64_t groups = w->k() / w->group();
  const bool int4 = w->type() == ElementType::kInt4;
  const char* entry = int4 ? "rocket_matmul_int4_prepacked_gw" : "rocket_matmul_int8_prepacked_gw";
  // A group-wise weight's K is the caller's (kp == k): A goes to the library unstaged.
  return state_->run_resident_gemm<int8_t, float>(
      entry, m, w->k(), w->kp, w->np, context, nullptr,
      [&](int mi, int ki, int ni, const int8_t*, float* out) {
        const RocketLibrary& lib = *state_->library;
        const float* scales = state_->padded_scales(w_scales, w->n(), w->np, groups);
        return int4 ? lib.matmul_int4_prepacked_gw(state_->int4_ctx, mi, ki, ni, a, a_scales,
                                                   scales, out, w->int4)
                    : lib.matmul_int8_prepacked_gw(state_->int8_ctx, mi, ki, ni, a, a_scales,
                                                   scales, out, w->int8);
      },
      copy_rows_into(c, w->n()));
}

void RocketDevice::account_host_pass(double multiply_adds, double bytes) {
  if (state_->library->sim_account_host != nullptr) {
    state_->library->sim_account_host(state_->sim_group.c_str(), multiply_adds, bytes);
  }
}

std::string RocketDevice::profile_report() const {
  std::lock_guard<std::mutex> lock(state_->profile_mutex);
  std::string report = str_cat("rocket: ", state_->library->path, ", ", state_->resident_bytes,
                               " resident weight bytes\n");
  for (const auto& [entry, count] : state_->calls) {
    report = str_cat(report, "rocket: ", entry, " calls=", count, "\n");
  }
  for (const auto& [entry, count] : state_->refusals) {
    report = str_cat(report, "rocket: refused ", entry, " x", count, "\n");
  }
  if (state_->library->sim_report != nullptr) {
    std::string sim(state_->library->sim_report(state_->sim_group.c_str(), nullptr, 0) + 1, '\0');
    const size_t size =
        state_->library->sim_report(state_->sim_group.c_str(), sim.data(), sim.size());
    sim.resize(std::min(size, sim.size() - 1));
    report += sim;
  }
  return report;
}

}  // namespace npuflow::rocket

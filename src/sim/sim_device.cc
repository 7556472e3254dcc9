#include "sim/sim_device.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>
#include <vector>

#include "core/fp16.h"
#include "core/scratch.h"
#include "core/strings.h"
#include "sim/board_cpu_model.h"
#include "sim/cost_model.h"
#include "sim/sim_device_state.h"

namespace npuflow::sim {
namespace {

constexpr uint64_t kPage = 4096;
constexpr int64_t kRowsPerTask = 32;
constexpr int64_t kResidentPlanRows = 256;  // resident weights are planned at M = 256

uint64_t page_round(uint64_t bytes) {
  return (bytes + kPage - 1) / kPage * kPage;
}

// Bytes one element takes in a device buffer (int4 sits one value per int8).
int64_t buffer_bytes(NpuType type) {
  return type == NpuType::kFp16 ? 2 : 1;
}

std::string mib(int64_t bytes) {
  return str_cat(static_cast<double>(bytes) / (1024.0 * 1024.0), " MiB");
}

}  // namespace

namespace {

class SimWeight final : public PackedWeight {
 public:
  SimWeight(int64_t k, int64_t n, ElementType type, int64_t group, NpuType npu, int64_t kp,
            int64_t np, std::shared_ptr<SimDevice::State> state)
      : PackedWeight(k, n, type, group), npu(npu), kp(kp), np(np), state_(std::move(state)) {}
  ~SimWeight() override {
    if (reserved_) state_->release(fd_bytes);
  }
  size_t resident_bytes() const override {
    uint64_t total = 0;
    for (uint64_t bytes : fd_bytes) total += bytes;
    return total;
  }
  void mark_reserved() { reserved_ = true; }

  NpuType npu;
  int64_t kp, np;                    // padded to the contract
  std::vector<int8_t> ints;          // int8/int4: Kp x Np row-major
  std::vector<float> halves;         // fp16 (widened exactly): Kp x Np row-major
  std::vector<int64_t> column_sums;  // int8: for uint8 activations
  std::vector<WorkerSlice> slices;   // the resident plan (M = 256)
  std::vector<uint64_t> fd_bytes;    // IOVA held on each worker fd

 private:
  std::shared_ptr<SimDevice::State> state_;
  bool reserved_ = false;
};

const SimWeight* as_sim(const PackedWeight& w, NpuType npu, bool groupwise) {
  const auto* weight = dynamic_cast<const SimWeight*>(&w);
  if (weight == nullptr || weight->npu != npu || (weight->group() > 0) != groupwise) return nullptr;
  return weight;
}

// Operand values outside the type's range (int4: [-7, 7]) are refused as the library refuses
// them, and counted in the profile.
Status check_values(SimDevice::State& state, const int8_t* values, int64_t count, NpuType type,
                    const char* what) {
  const ShapeContract& c = contract_for(type);
  for (int64_t i = 0; i < count; ++i) {
    if (values[i] < c.value_min || values[i] > c.value_max) {
      state.refused();
      return unsupported(str_cat("ROCKET_E_SHAPE: ", npu_type_name(type), " ", what, " value ",
                                 int{values[i]}, " at ", i, " is outside [", c.value_min, ", ",
                                 c.value_max, "]"));
    }
  }
  return Status::ok();
}

}  // namespace

SimDevice::SimDevice(const SimOptions& options) : state_(new State) {
  state_->options = options;
  state_->options.workers = std::clamp(options.workers, 1, kMaxWorkers);
  state_->iova.assign(static_cast<size_t>(state_->options.workers), 0);
}

SimDevice::~SimDevice() = default;

std::string SimDevice::description() const {
  const SimOptions& o = state_->options;
  return str_cat(
      "sim (RK3588 NPU simulator: ", kCores, " cores, ", o.workers, " worker fds, fp16 KACC ",
      kacc_mode_name(o.kacc), ", ", o.iova_bytes_per_fd >> 20, " MiB IOVA per fd",
      o.fail_every > 0 ? str_cat(", every ", o.fail_every, "th submit fails") : "",
      o.corrupt_every > 0 ? str_cat(", every ", o.corrupt_every, "th call's output corrupted") : "",
      ")");
}

const SimOptions& SimDevice::options() const {
  return state_->options;
}

SimProfile SimDevice::profile() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->profile;
}

uint64_t SimDevice::iova_in_use(int fd) const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return fd >= 0 && static_cast<size_t>(fd) < state_->iova.size() ? state_->iova[fd] : 0;
}

int64_t SimDevice::resident_min_rows(ElementType operand) const {
  // A resident fp16 weight serves only row counts that plan its tiles (RU
  // src/rocket_prepacked.c:409-446); padding to the plan's rows always does.
  return operand == ElementType::kFloat16 ? kResidentPlanRows : 1;
}

int64_t SimDevice::row_multiple(ElementType) const {
  return 4;
}

namespace {

// Shape checks, padding, the resident plan and the IOVA reservation shared by every pack.
Result<std::unique_ptr<SimWeight>> prepare_weight(SimDevice::State& state,
                                                  const std::shared_ptr<SimDevice::State>& shared,
                                                  NpuType npu, ElementType type, int64_t k,
                                                  int64_t n, int64_t group) {
  const SimOptions& o = state.options;
  const ShapeContract& c = contract_for(npu);
  if (k <= 0 || n <= 0) return invalid_argument(str_cat("weight shape ", k, "x", n, " is empty"));
  int64_t kp = k, np = n;
  if (group > 0) {
    NPUFLOW_RETURN_IF_ERROR(check_group(npu, k, group));
  } else if (o.pad_weights) {
    kp = round_up(k, c.k_multiple);
  }
  if (o.pad_weights) np = round_up(n, c.n_multiple);
  Status shape = check_shape(npu, kResidentPlanRows, kp, np);
  if (!shape.is_ok()) {
    state.refused();
    return shape;
  }
  PlanOptions plan_options;
  plan_options.asym = o.asym;
  plan_options.group = group;
  if (npu == NpuType::kInt4) plan_options.kt_cap = group > 0 ? group : o.int4_kt_cap;
  auto slices = plan_workers(npu, kResidentPlanRows, kp, np, o.workers, plan_options);
  if (!slices.is_ok()) {
    state.refused();
    return slices.status();
  }
  auto weight = std::make_unique<SimWeight>(k, n, type, group, npu, kp, np, shared);
  weight->slices = std::move(slices).value();
  weight->fd_bytes.assign(state.iova.size(), 0);
  for (size_t i = 0; i < weight->slices.size(); ++i) {
    weight->fd_bytes[i] =
        page_round(static_cast<uint64_t>(kp * weight->slices[i].n * buffer_bytes(npu)));
  }
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    for (size_t fd = 0; fd < state.iova.size(); ++fd) {
      if (state.iova[fd] + weight->fd_bytes[fd] > o.iova_bytes_per_fd) {
        state.profile.refused++;
        return Status(StatusCode::kResourceExhausted,
                      str_cat("ROCKET_E_NOMEM: fd ", fd, " has ", state.iova[fd], " of ",
                              o.iova_bytes_per_fd, " IOVA bytes in use; a ", kp, "x", np, " ",
                              npu_type_name(npu), " weight needs ", weight->fd_bytes[fd], " more"));
      }
    }
    for (size_t fd = 0; fd < state.iova.size(); ++fd) state.iova[fd] += weight->fd_bytes[fd];
    const auto bytes = static_cast<int64_t>(weight->resident_bytes());
    state.profile.weights++;
    state.profile.resident_bytes += bytes;
    state.profile.bytes_packed += bytes;
    state.profile.host_ms += static_cast<double>(bytes) / (cost_constant("pack_gbps") * 1e6);
  }
  weight->mark_reserved();
  return weight;
}

}  // namespace

// Everything between a call's arguments and its arithmetic: the contract, the plan for this M,
// the IOVA its buffers need, the injected failure and the profile.
struct CallPlan {
  std::vector<WorkerSlice> slices;
  CostEstimate cost;
  bool corrupt = false;  // corrupt_every picked this call: its first output element goes wrong
};

namespace {}  // namespace

static Result<CallPlan> begin_call(SimDevice::State& state, const SimWeight& w, int64_t m,
                                   int64_t output_bytes, void* c, size_t c_bytes) {
  const SimOptions& o = state.options;
  Status shape = check_shape(w.npu, m, w.kp, w.np);
  if (!shape.is_ok()) {
    state.refused();
    return shape;
  }
  CallPlan call;
  call.slices = w.slices;
  for (WorkerSlice& slice : call.slices) {
    TilePlan& plan = slice.plan;
    if (w.npu == NpuType::kFp16) {
      // A resident fp16 weight serves only an M that plans the same tiling.
      PlanOptions plan_options;
      plan_options.asym = o.asym;
      auto fresh = plan_tiles(w.npu, m, w.kp, slice.n, plan_options);
      if (!fresh.is_ok() || fresh.value().kt != plan.kt || fresh.value().nt != plan.nt ||
          fresh.value().k_tiles != plan.k_tiles) {
        state.refused();
        return unsupported(str_cat(
            "ROCKET_E_TILING: fp16 resident weight planned at M=256 (Kt=", plan.kt, " Nt=", plan.nt,
            ") does not serve M=", m,
            fresh.is_ok() ? str_cat(" (plans Kt=", fresh.value().kt, " Nt=", fresh.value().nt, ")")
                          : std::string(),
            "; re-pack needed"));
      }
      plan = fresh.value();
    } else {
      plan.mt = std::min(m, kMaxTile);
      plan.m_tiles = (m + plan.mt - 1) / plan.mt;
    }
  }
  CostQuery query;
  query.type = w.npu;
  query.m = m;
  query.k = w.kp;
  query.n = w.np;
  query.workers = o.workers;
  query.output_bytes = output_bytes;
  query.patched_kernel = o.patched_kernel;
  call.cost = CostModel::npu(query);
  std::lock_guard<std::mutex> lock(state.mutex);
  for (size_t fd = 0; fd < call.slices.size(); ++fd) {
    const uint64_t transient =
        page_round(static_cast<uint64_t>(m * w.kp * buffer_bytes(w.npu))) +
        page_round(static_cast<uint64_t>(m * call.slices[fd].n * output_bytes));
    if (state.iova[fd] + transient > o.iova_bytes_per_fd) {
      state.profile.refused++;
      return Status(StatusCode::kResourceExhausted,
                    str_cat("ROCKET_E_NOMEM: fd ", fd, " cannot map ", transient,
                            " bytes of activation and output buffers (", state.iova[fd], " of ",
                            o.iova_bytes_per_fd, " IOVA bytes held by resident weights)"));
    }
  }
  auto admitted =
      state.admit_locked(call.cost, CostModel::cpu_us(w.npu, m, w.k(), w.n()), c, c_bytes);
  if (!admitted.is_ok()) return admitted.status();
  call.corrupt = admitted.value();
  return call;
}

// Runs task(slice, row0, rows) over every worker slice in row blocks, on the lent pool.
template <typename Task>
void run_slices(const CallPlan& call, int64_t m, const ExecContext& context,
                SimDevice::State& state, const Task& task) {
  const auto start = std::chrono::steady_clock::now();
  const int64_t blocks = (m + kRowsPerTask - 1) / kRowsPerTask;
  const size_t count = call.slices.size() * static_cast<size_t>(blocks);
  context.run(count, [&](size_t index) {
    const WorkerSlice& slice = call.slices[index / static_cast<size_t>(blocks)];
    const int64_t row0 = static_cast<int64_t>(index % static_cast<size_t>(blocks)) * kRowsPerTask;
    task(slice, row0, std::min(kRowsPerTask, m - row0));
  });
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::lock_guard<std::mutex> lock(state.mutex);
  state.profile.emulation_ms += ms;
}

Result<std::unique_ptr<PackedWeight>> SimDevice::pack_int8_weight(const int8_t* weight, int64_t k,
                                                                  int64_t n) {
  auto prepared = prepare_weight(*state_, state_, NpuType::kInt8, ElementType::kInt8, k, n, 0);
  if (!prepared.is_ok()) return prepared.status();
  SimWeight& w = *prepared.value();
  w.ints.assign(static_cast<size_t>(w.kp * w.np), 0);
  w.column_sums.assign(static_cast<size_t>(w.np), 0);
  for (int64_t kk = 0; kk < k; ++kk) {
    std::memcpy(&w.ints[kk * w.np], weight + kk * n, static_cast<size_t>(n));
    for (int64_t col = 0; col < n; ++col) w.column_sums[col] += weight[kk * n + col];
  }
  return std::unique_ptr<PackedWeight>(std::move(prepared).value());
}

Status SimDevice::gemm_int8(const void* a, ElementType a_type, int64_t m, const PackedWeight& pw,
                            int32_t* c, const ExecContext& context) {
  const SimWeight* w = as_sim(pw, NpuType::kInt8, false);
  if (w == nullptr) return invalid_argument("gemm_int8 needs an int8 weight packed by sim");
  if (a_type != ElementType::kInt8 && a_type != ElementType::kUInt8) {
    return invalid_argument("gemm_int8 takes int8 or uint8 activations");
  }
  const int64_t k = w->k(), n = w->n(), kp = w->kp, np = w->np;
  thread_local std::vector<int32_t> padded_out;
  int32_t* out = np == n ? c : sized(padded_out, static_cast<size_t>(m * np));
  auto call = begin_call(*state_, *w, m, 4, c, static_cast<size_t>(m * n) * sizeof(int32_t));
  if (!call.is_ok()) return call.status();
  // The activation pack: K padded with zeros, uint8 shifted into int8.
  const int8_t* staged = static_cast<const int8_t*>(a);
  thread_local std::vector<int8_t> staging;
  if (kp != k || a_type == ElementType::kUInt8) {
    int8_t* buffer = sized(staging, static_cast<size_t>(m * kp));
    for (int64_t row = 0; row < m; ++row) {
      int8_t* dst = buffer + row * kp;
      if (a_type == ElementType::kUInt8) {
        const uint8_t* src = static_cast<const uint8_t*>(a) + row * k;
        for (int64_t kk = 0; kk < k; ++kk) dst[kk] = static_cast<int8_t>(src[kk] - 128);
      } else {
        std::memcpy(dst, static_cast<const int8_t*>(a) + row * k, static_cast<size_t>(k));
      }
      std::fill(dst + k, dst + kp, int8_t{0});
    }
    staged = buffer;
  }
  run_slices(call.value(), m, context, *state_,
             [&](const WorkerSlice& slice, int64_t row0, int64_t rows) {
               int8_slice(staged, kp, w->ints.data(), np,
                          SliceRows{row0, rows, slice.n0, slice.n, kp, slice.plan.kt}, out, np);
             });
  for (int64_t row = 0; row < m; ++row) {
    int32_t* dst = c + row * n;
    const int32_t* src = out + row * np;
    for (int64_t col = 0; col < n; ++col) {
      int64_t value = src[col];
      if (a_type == ElementType::kUInt8) value += 128 * w->column_sums[col];
      dst[col] = static_cast<int32_t>(value);
    }
  }
  if (call.value().corrupt && m > 0 && n > 0) c[0] = corrupted(c[0]);
  return Status::ok();
}

Result<std::unique_ptr<PackedWeight>> SimDevice::pack_float_weight(const float*, int64_t, int64_t) {
  state_->refused();
  return unsupported("ROCKET_E_UNSUPPORTED: the RK3588 NPU has no fp32 matmul (use fp16)");
}

Status SimDevice::gemm_float(const float*, int64_t, const PackedWeight&, float*,
                             const ExecContext&) {
  state_->refused();
  return unsupported("ROCKET_E_UNSUPPORTED: the RK3588 NPU has no fp32 matmul (use fp16)");
}

Result<std::unique_ptr<PackedWeight>> SimDevice::pack_fp16_weight(const uint16_t* weight, int64_t k,
                                                                  int64_t n) {
  auto prepared = prepare_weight(*state_, state_, NpuType::kFp16, ElementType::kFloat16, k, n, 0);
  if (!prepared.is_ok()) return prepared.status();
  SimWeight& w = *prepared.value();
  w.halves.assign(static_cast<size_t>(w.kp * w.np), 0.0f);
  for (int64_t kk = 0; kk < k; ++kk) {
    for (int64_t col = 0; col < n; ++col) {
      w.halves[kk * w.np + col] = half_bits_to_float(weight[kk * n + col]);
    }
  }
  return std::unique_ptr<PackedWeight>(std::move(prepared).value());
}

Status SimDevice::gemm_fp16(const uint16_t* a, int64_t m, const PackedWeight& pw, void* c,
                            ElementType c_type, const ExecContext& context) {
  const SimWeight* w = as_sim(pw, NpuType::kFp16, false);
  if (w == nullptr) return invalid_argument("gemm_fp16 needs an fp16 weight packed by sim");
  if (c_type != ElementType::kFloat16 && c_type != ElementType::kFloat32) {
    return invalid_argument("gemm_fp16 writes float16 or float32");
  }
  const bool fp32_out = c_type == ElementType::kFloat32;
  const int64_t k = w->k(), n = w->n(), kp = w->kp, np = w->np;
  const size_t c_element = fp32_out ? sizeof(float) : sizeof(uint16_t);
  auto call = begin_call(*state_, *w, m, static_cast<int64_t>(c_element), c,
                         static_cast<size_t>(m * n) * c_element);
  if (!call.is_ok()) return call.status();
  thread_local std::vector<float> staging;
  float* staged = sized(staging, static_cast<size_t>(m * kp));
  for (int64_t row = 0; row < m; ++row) {
    for (int64_t kk = 0; kk < k; ++kk) staged[row * kp + kk] = half_bits_to_float(a[row * k + kk]);
    std::fill(staged + row * kp + k, staged + (row + 1) * kp, 0.0f);
  }
  thread_local std::vector<uint8_t> padded_out;
  void* out = np == n ? c : sized(padded_out, static_cast<size_t>(m * np) * c_element);
  run_slices(call.value(), m, context, *state_,
             [&](const WorkerSlice& slice, int64_t row0, int64_t rows) {
               const Fp16Accumulation accumulation =
                   choose_fp16_accumulation(state_->options.kacc, fp32_out, m, slice.plan);
               fp16_slice(staged, kp, w->halves.data(), np,
                          SliceRows{row0, rows, slice.n0, slice.n, kp, slice.plan.kt}, accumulation,
                          out, np);
             });
  if (out != c) {
    for (int64_t row = 0; row < m; ++row) {
      std::memcpy(static_cast<uint8_t*>(c) + row * n * c_element,
                  static_cast<const uint8_t*>(out) + row * np * c_element,
                  static_cast<size_t>(n) * c_element);
    }
  }
  if (call.value().corrupt && m > 0 && n > 0) {
    if (fp32_out) {
      float* first = static_cast<float*>(c);
      *first = corrupted(*first);
    } else {
      uint16_t* first = static_cast<uint16_t*>(c);
      *first = float_to_half_bits(corrupted(half_bits_to_float(*first)));
    }
  }
  return Status::ok();
}

Result<std::unique_ptr<PackedWeight>> SimDevice::pack_int4_weight(const int8_t* weight, int64_t k,
                                                                  int64_t n) {
  NPUFLOW_RETURN_IF_ERROR(check_values(*state_, weight, k * n, NpuType::kInt4, "weight"));
  auto prepared = prepare_weight(*state_, state_, NpuType::kInt4, ElementType::kInt4, k, n, 0);
  if (!prepared.is_ok()) return prepared.status();
  SimWeight& w = *prepared.value();
  w.ints.assign(static_cast<size_t>(w.kp * w.np), 0);
  for (int64_t kk = 0; kk < k; ++kk) {
    std::memcpy(&w.ints[kk * w.np], weight + kk * n, static_cast<size_t>(n));
  }
  return std::unique_ptr<PackedWeight>(std::move(prepared).value());
}

namespace {

// int8/int4 activations staged with K padded to the weight's.
const int8_t* stage_int(const int8_t* a, int64_t m, int64_t k, int64_t kp) {
  if (kp == k) return a;
  thread_local std::vector<int8_t> staging;
  int8_t* buffer = sized(staging, static_cast<size_t>(m * kp));
  for (int64_t row = 0; row < m; ++row) {
    std::memcpy(buffer + row * kp, a + row * k, static_cast<size_t>(k));
    std::fill(buffer + row * kp + k, buffer + (row + 1) * kp, int8_t{0});
  }
  return buffer;
}

}  // namespace

Status SimDevice::gemm_int4(const int8_t* a, int64_t m, const PackedWeight& pw, int32_t* c,
                            const ExecContext& context) {
  const SimWeight* w = as_sim(pw, NpuType::kInt4, false);
  if (w == nullptr) return invalid_argument("gemm_int4 needs an int4 weight packed by sim");
  const int64_t k = w->k(), n = w->n(), kp = w->kp, np = w->np;
  if (m > 0) {
    NPUFLOW_RETURN_IF_ERROR(check_values(*state_, a, m * k, NpuType::kInt4, "activation"));
  }
  auto call = begin_call(*state_, *w, m, 4, c, static_cast<size_t>(m * n) * sizeof(int32_t));
  if (!call.is_ok()) return call.status();
  const int8_t* staged = stage_int(a, m, k, kp);
  thread_local std::vector<int32_t> padded_out;
  int32_t* out = np == n ? c : sized(padded_out, static_cast<size_t>(m * np));
  run_slices(call.value(), m, context, *state_,
             [&](const WorkerSlice& slice, int64_t row0, int64_t rows) {
               int4_slice(staged, kp, w->ints.data(), np,
                          SliceRows{row0, rows, slice.n0, slice.n, kp, slice.plan.kt}, out, np);
             });
  if (out != c) {
    for (int64_t row = 0; row < m; ++row) {
      std::memcpy(c + row * n, out + row * np, static_cast<size_t>(n) * sizeof(int32_t));
    }
  }
  if (call.value().corrupt && m > 0 && n > 0) c[0] = corrupted(c[0]);
  return Status::ok();
}

Result<std::unique_ptr<PackedWeight>> SimDevice::pack_groupwise_weight(const int8_t* weight,
                                                                       int64_t k, int64_t n,
                                                                       ElementType type,
                                                                       int64_t group) {
  if (type != ElementType::kInt8 && type != ElementType::kInt4) {
    return invalid_argument("group-wise weights are int8 or int4");
  }
  const NpuType npu = type == ElementType::kInt4 ? NpuType::kInt4 : NpuType::kInt8;
  if (npu == NpuType::kInt4) {
    NPUFLOW_RETURN_IF_ERROR(check_values(*state_, weight, k * n, npu, "weight"));
  }
  auto prepared = prepare_weight(*state_, state_, npu, type, k, n, group);
  if (!prepared.is_ok()) return prepared.status();
  SimWeight& w = *prepared.value();
  w.ints.assign(static_cast<size_t>(w.kp * w.np), 0);
  for (int64_t kk = 0; kk < k; ++kk) {
    std::memcpy(&w.ints[kk * w.np], weight + kk * n, static_cast<size_t>(n));
  }
  return std::unique_ptr<PackedWeight>(std::move(prepared).value());
}

void SimDevice::account_host_pass(double multiply_adds, double bytes) {
  const double us = board_cpu_us(
      CpuWork{CpuWorkClass::kGemm, 2.0 * multiply_adds, bytes, 0, false, 1}, CpuPool::kNpuflowHost);
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->profile.host_ms += us / 1e3;
}

Status SimDevice::gemm_groupwise(const int8_t* a, const float* a_scales, int64_t m,
                                 const PackedWeight& pw, const float* w_scales, float* c,
                                 const ExecContext& context) {
  const auto* w = dynamic_cast<const SimWeight*>(&pw);
  if (w == nullptr || w->group() == 0) {
    return invalid_argument("gemm_groupwise needs a group-wise weight packed by sim");
  }
  const int64_t k = w->k(), n = w->n(), np = w->np, group = w->group(), groups = k / group;
  if (w->npu == NpuType::kInt4 && m > 0) {
    NPUFLOW_RETURN_IF_ERROR(check_values(*state_, a, m * k, NpuType::kInt4, "activation"));
  }
  auto call = begin_call(*state_, *w, m, 4, c, static_cast<size_t>(m * n) * sizeof(float));
  if (!call.is_ok()) return call.status();
  // Padded columns get zero scales (their weights are zero anyway).
  thread_local std::vector<float> scales;
  const float* padded_scales = w_scales;
  if (np != n) {
    float* buffer = sized(scales, static_cast<size_t>(np * groups));
    std::memcpy(buffer, w_scales, static_cast<size_t>(n * groups) * sizeof(float));
    std::fill(buffer + n * groups, buffer + np * groups, 0.0f);
    padded_scales = buffer;
  }
  thread_local std::vector<float> padded_out;
  float* out = np == n ? c : sized(padded_out, static_cast<size_t>(m * np));
  const bool int4 = w->npu == NpuType::kInt4;
  run_slices(call.value(), m, context, *state_,
             [&](const WorkerSlice& slice, int64_t row0, int64_t rows) {
               groupwise_slice(a, k, a_scales, w->ints.data(), np, padded_scales, group, int4,
                               SliceRows{row0, rows, slice.n0, slice.n, k, slice.plan.kt}, out, np);
             });
  if (out != c) {
    for (int64_t row = 0; row < m; ++row) {
      std::memcpy(c + row * n, out + row * np, static_cast<size_t>(n) * sizeof(float));
    }
  }
  if (call.value().corrupt && m > 0 && n > 0) c[0] = corrupted(c[0]);
  return Status::ok();
}

std::string SimDevice::profile_report() const {
  const SimProfile p = profile();
  return str_cat(
      "npuflow sim profile: ", p.calls, " calls (", p.refused, " refused, ", p.failed,
      " failed submits), ", p.submits, " submits, ", p.tiles, " tiles; ", p.weights,
      " weights resident (", mib(p.resident_bytes), " over ", state_->options.workers,
      " fds)\n  packed ", mib(p.bytes_packed), ", read back ", mib(p.bytes_read_back),
      "; modelled RK3588: device ", p.device_ms, " ms + host ", p.host_ms,
      " ms = ", p.device_ms + p.host_ms, " ms (its CPU alone: ", p.cpu_ms, " ms); emulation here ",
      p.emulation_ms, " ms wall\n",
      p.attention_calls > 0 ? str_cat("  of the calls, ", p.attention_calls, " flash attention\n")
                            : std::string(),
      p.conv_calls > 0 ? str_cat("  of the calls, ", p.conv_calls, " convolution\n")
                       : std::string(),
      state_->options.corrupt_every > 0
          ? str_cat("  corrupted ", p.corrupted, " call outputs on purpose (sim_corrupt_every=",
                    state_->options.corrupt_every, ")\n")
          : std::string());
}

}  // namespace npuflow::sim

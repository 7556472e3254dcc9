// SPDX-License-Identifier: GPL-3.0-or-later
// librocketnpu-sim.so: npuflow's RK3588 simulator (src/sim/) behind librocketnpu's own C API, so
// that the rocket device's code runs unchanged off-board. It implements the resident fp16,
// int8 and int4 (plain and group-wise) matmul entry points, flash attention on a persistent
// context (rocket_fa_ctx_*, rocket_flash_attn_fp16_ctx) and the fp16 convolutions on a conv
// context over a (fake) device fd (rocket_open, rocket_close, rocket_conv_ctx_*,
// rocket_conv2d_fp16_ctx, rocket_conv_transpose2d_fp16_ctx, and their _plan) with the vendor
// headers' exact declarations (they are included: a signature that differs does not compile), and
// behind them the sim's contract, numerics, IOVA accounting, injected failures and cost model, as
// the bare library: weights that are not aligned are refused, not padded.
//
// Environment, as the real library reads it: ROCKET_N_THREADS (workers when a context is
// created with 0), ROCKET_KACC=0 (fp16 K tiles summed on the host). Simulator only:
// ROCKETSIM_FAIL_EVERY=N (every Nth accepted call fails with ROCKET_E_DEVICE).
//
// Simulator-only entry points (rocketsim_*), which an adapter calls only when it finds them:
// - rocketsim_last_error(): why this thread's last failed call failed;
// - rocketsim_next_context(options): the options of the next context this thread creates, as
//   "key=value;..." with workers, kacc (npu|host), fail_every, corrupt_every, iova_bytes_per_fd
//   and group: contexts
//   of one group share one simulated device (its profile, IOVA and failure count), as the `sim`
//   device's GEMMs of every dtype do;
// - rocketsim_lend_pool(run, pool): this thread's calls spread their work over the caller's pool;
// - rocketsim_report(group, out, size): the group's session profile (SimDevice::profile_report);
// - rocketsim_account_host(group, multiply_adds, bytes): the caller's host work beside its calls
//   (Device::account_host_pass), priced into the group's profile.
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/parallel.h"
#include "core/status.h"
#include "core/strings.h"
#include "device/device.h"
#include "sim/sim_conv.h"
#include "sim/sim_device.h"

#if !defined(__FLT16_MAX__) && !defined(ROCKET_FLOAT16_T)
#define ROCKET_FLOAT16_T uint16_t
#endif
#include <rocket_attn.h>
#include <rocket_conv.h>
#include <rocket_matmul.h>
#include <rocket_npu.h>

#define ROCKETSIM_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

using npuflow::ElementType;
using npuflow::PackedWeight;
using npuflow::Status;
using npuflow::StatusCode;

thread_local std::string last_error;

int64_t env_int(const char* name, int64_t fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != 0 ? std::strtoll(value, nullptr, 10) : fallback;
}

// Options a context is created with: the environment's, then rocketsim_next_context's.
struct ContextOptions {
  npuflow::sim::SimOptions sim;
  std::string group;
};

thread_local std::string next_context_options;

ContextOptions options_for(int nthreads) {
  ContextOptions options;
  npuflow::sim::SimOptions& sim = options.sim;
  int64_t workers = nthreads > 0 ? nthreads : env_int("ROCKET_N_THREADS", sim.workers);
  sim.kacc =
      env_int("ROCKET_KACC", 1) == 0 ? npuflow::sim::KAccMode::kHost : npuflow::sim::KAccMode::kNpu;
  sim.fail_every = env_int("ROCKETSIM_FAIL_EVERY", 0);
  std::string text;
  text.swap(next_context_options);
  for (size_t at = 0; at < text.size();) {
    const size_t end = std::min(text.find(';', at), text.size());
    const std::string item = text.substr(at, end - at);
    at = end + 1;
    const size_t eq = item.find('=');
    if (eq == std::string::npos) continue;
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    if (key == "workers") workers = std::strtoll(value.c_str(), nullptr, 10);
    if (key == "kacc")
      sim.kacc = value == "host" ? npuflow::sim::KAccMode::kHost : npuflow::sim::KAccMode::kNpu;
    if (key == "fail_every") sim.fail_every = std::strtoll(value.c_str(), nullptr, 10);
    if (key == "corrupt_every") sim.corrupt_every = std::strtoll(value.c_str(), nullptr, 10);
    if (key == "iova_bytes_per_fd")
      sim.iova_bytes_per_fd = std::strtoull(value.c_str(), nullptr, 10);
    if (key == "group") options.group = value;
  }
  sim.workers = static_cast<int>(workers < 1 ? 1 : workers > 8 ? 8 : workers);
  sim.pad_weights = false;  // the bare library refuses misaligned K and N
  return options;
}

// Simulated devices by group: the contexts of one group share one.
std::mutex groups_mutex;
std::map<std::string, std::weak_ptr<npuflow::sim::SimDevice>> groups;

std::shared_ptr<npuflow::sim::SimDevice> device_for(const ContextOptions& options) {
  if (options.group.empty()) return std::make_shared<npuflow::sim::SimDevice>(options.sim);
  std::lock_guard<std::mutex> lock(groups_mutex);
  std::erase_if(groups, [](const auto& entry) { return entry.second.expired(); });
  std::weak_ptr<npuflow::sim::SimDevice>& slot = groups[options.group];
  std::shared_ptr<npuflow::sim::SimDevice> device = slot.lock();
  if (!device) {
    device = std::make_shared<npuflow::sim::SimDevice>(options.sim);
    slot = device;
  }
  return device;
}

// The caller's pool, lent for this thread's calls.
using LentRun = void (*)(void* pool, size_t count, void (*task)(void* arg, size_t index),
                         void* arg);
thread_local LentRun lent_run = nullptr;
thread_local void* lent_pool = nullptr;

npuflow::ExecContext lent_context() {
  npuflow::ExecContext context;
  if (lent_run == nullptr) return context;
  const LentRun run = lent_run;
  void* pool = lent_pool;
  context.parallel_for = [run, pool](size_t count, const std::function<void(size_t)>& task) {
    run(
        pool, count,
        [](void* arg, size_t index) {
          (*static_cast<const std::function<void(size_t)>*>(arg))(index);
        },
        const_cast<std::function<void(size_t)>*>(&task));
  };
  return context;
}

// A sim Status as the library's return code (enum rocket_status).
int code_of(const Status& status) {
  if (status.is_ok()) return ROCKET_OK;
  last_error = status.message();
  const std::string& message = status.message();
  if (message.rfind("ROCKET_E_TILING", 0) == 0) return ROCKET_E_TILING;
  if (message.rfind("ROCKET_E_UNSUPPORTED", 0) == 0) return ROCKET_E_UNSUPPORTED;
  if (message.rfind("ROCKET_E_DEVICE", 0) == 0) return ROCKET_E_DEVICE;
  switch (status.code()) {
    case StatusCode::kResourceExhausted:
      return ROCKET_E_NOMEM;
    case StatusCode::kDeviceFailure:
    case StatusCode::kInternal:
      return ROCKET_E_DEVICE;
    default:
      return ROCKET_E_SHAPE;
  }
}

// One context = one simulated device (its worker fds and IOVA windows). A context is not
// thread-safe in the real library; here a second caller inside a call fails loudly.
struct Context {
  explicit Context(int nthreads) : device(device_for(options_for(nthreads))) {}
  std::shared_ptr<npuflow::sim::SimDevice> device;
  std::atomic<bool> busy{false};
};

class CallGuard {
 public:
  explicit CallGuard(Context& context) : context_(context) {
    entered_ = !context.busy.exchange(true);
    if (!entered_) last_error = "two threads called into one context at once (not thread-safe)";
  }
  ~CallGuard() {
    if (entered_) context_.busy.store(false);
  }
  bool entered() const { return entered_; }

 private:
  Context& context_;
  bool entered_;
};

struct Weights {
  std::unique_ptr<PackedWeight> packed;
  int k = 0, n = 0;
};

// B[N][K] -> K x N row-major.
template <typename T>
std::vector<T> transposed(const T* b, int k, int n) {
  std::vector<T> w(static_cast<size_t>(k) * static_cast<size_t>(n));
  for (int col = 0; col < n; ++col) {
    for (int kk = 0; kk < k; ++kk)
      w[static_cast<size_t>(kk) * n + col] = b[static_cast<size_t>(col) * k + kk];
  }
  return w;
}

// Packs the library's B[N][K] on the context's simulated device: `pack(device, w)` gets it as the
// device takes weights, K x N row-major.
template <typename W, typename Ctx, typename T, typename Pack>
W* pack_weights(Ctx* ctx, int m, int k, int n, const T* b, Pack&& pack) {
  last_error.clear();
  if (ctx == nullptr || m <= 0 || k <= 0 || n <= 0) {
    last_error = "null context or empty shape";
    return nullptr;
  }
  if (b == nullptr) {
    last_error = "null weights (B)";
    return nullptr;
  }
  CallGuard guard(ctx->context);
  if (!guard.entered()) return nullptr;
  const std::vector<T> w = transposed(b, k, n);
  auto packed = pack(*ctx->context.device, w.data());
  if (!packed.is_ok()) {
    code_of(packed.status());
    return nullptr;
  }
  auto* weights = new W;
  weights->value.packed = std::move(packed).value();
  weights->value.k = k;
  weights->value.n = n;
  return weights;
}

// One call on a resident weight: the library's argument checks, the context taken for the call,
// then `gemm` on its simulated device.
template <typename Ctx, typename W, typename Gemm>
int run_prepacked(Ctx* ctx, int K, int N, const void* A, const void* C, W* w, Gemm&& gemm) {
  last_error.clear();
  if (ctx == nullptr || w == nullptr || A == nullptr || C == nullptr) return ROCKET_E_SHAPE;
  if (K != w->value.k || N != w->value.n) {
    last_error = "K and N differ from the packed weight's";
    return ROCKET_E_SHAPE;
  }
  CallGuard guard(ctx->context);
  if (!guard.entered()) return ROCKET_E_DEVICE;
  return code_of(gemm(*ctx->context.device, *w->value.packed));
}

}  // namespace

struct rocket_ctx {
  explicit rocket_ctx(int nthreads) : context(nthreads) {}
  Context context;
};
struct rocket_weights {
  Weights value;
};
struct rocket_i8_ctx {
  explicit rocket_i8_ctx(int nthreads) : context(nthreads) {}
  Context context;
};
struct rocket_i8_weights {
  Weights value;
};
struct rocket_i4_ctx {
  explicit rocket_i4_ctx(int nthreads) : context(nthreads) {}
  Context context;
};
struct rocket_i4_weights {
  Weights value;
};

ROCKETSIM_EXPORT rocket_ctx* rocket_ctx_create(int nthreads) {
  return new rocket_ctx(nthreads);
}
ROCKETSIM_EXPORT void rocket_ctx_free(rocket_ctx* ctx) {
  delete ctx;
}

ROCKETSIM_EXPORT rocket_weights* rocket_weights_pack(rocket_ctx* ctx, int M, int K, int N,
                                                     const _Float16* B) {
  return pack_weights<rocket_weights>(
      ctx, M, K, N, reinterpret_cast<const uint16_t*>(B),
      [&](npuflow::Device& device, const uint16_t* w) { return device.pack_fp16_weight(w, K, N); });
}
ROCKETSIM_EXPORT void rocket_weights_free(rocket_ctx*, rocket_weights* w) {
  delete w;
}

ROCKETSIM_EXPORT int rocket_matmul_fp16_prepacked(rocket_ctx* ctx, int M, int K, int N,
                                                  const _Float16* A, _Float16* C,
                                                  rocket_weights* w) {
  return run_prepacked(ctx, K, N, A, C, w,
                       [&](npuflow::Device& device, const PackedWeight& packed) {
                         return device.gemm_fp16(reinterpret_cast<const uint16_t*>(A), M, packed, C,
                                                 ElementType::kFloat16, {});
                       });
}

ROCKETSIM_EXPORT rocket_i8_ctx* rocket_i8_ctx_create(int nthreads) {
  return new rocket_i8_ctx(nthreads);
}
ROCKETSIM_EXPORT void rocket_i8_ctx_free(rocket_i8_ctx* ctx) {
  delete ctx;
}

ROCKETSIM_EXPORT rocket_i8_weights* rocket_i8_weights_pack(rocket_i8_ctx* ctx, int M, int K, int N,
                                                           const int8_t* B) {
  return pack_weights<rocket_i8_weights>(
      ctx, M, K, N, B,
      [&](npuflow::Device& device, const int8_t* w) { return device.pack_int8_weight(w, K, N); });
}
ROCKETSIM_EXPORT void rocket_i8_weights_free(rocket_i8_ctx*, rocket_i8_weights* w) {
  delete w;
}
ROCKETSIM_EXPORT size_t rocket_i8_weights_bytes(const rocket_i8_weights* w) {
  return w == nullptr ? 0 : w->value.packed->resident_bytes();
}

ROCKETSIM_EXPORT int rocket_matmul_int8_prepacked(rocket_i8_ctx* ctx, int M, int K, int N,
                                                  const int8_t* A, int32_t* C,
                                                  rocket_i8_weights* w) {
  return run_prepacked(
      ctx, K, N, A, C, w, [&](npuflow::Device& device, const PackedWeight& packed) {
        return device.gemm_int8(A, ElementType::kInt8, M, packed, C, lent_context());
      });
}

ROCKETSIM_EXPORT rocket_i8_weights* rocket_i8_weights_pack_gw(rocket_i8_ctx* ctx, int M, int K,
                                                              int N, const int8_t* B, int group) {
  return pack_weights<rocket_i8_weights>(
      ctx, M, K, N, B, [&](npuflow::Device& device, const int8_t* w) {
        return device.pack_groupwise_weight(w, K, N, ElementType::kInt8, group);
      });
}

ROCKETSIM_EXPORT int rocket_matmul_int8_prepacked_gw(rocket_i8_ctx* ctx, int M, int K, int N,
                                                     const int8_t* A, const float* a_scale,
                                                     const float* b_scale, float* Cf,
                                                     rocket_i8_weights* w) {
  return run_prepacked(
      ctx, K, N, A, Cf, w, [&](npuflow::Device& device, const PackedWeight& packed) {
        return device.gemm_groupwise(A, a_scale, M, packed, b_scale, Cf, lent_context());
      });
}

ROCKETSIM_EXPORT rocket_i4_ctx* rocket_i4_ctx_create(int nthreads) {
  return new rocket_i4_ctx(nthreads);
}
ROCKETSIM_EXPORT void rocket_i4_ctx_free(rocket_i4_ctx* ctx) {
  delete ctx;
}

ROCKETSIM_EXPORT rocket_i4_weights* rocket_i4_weights_pack(rocket_i4_ctx* ctx, int M, int K, int N,
                                                           const int8_t* B) {
  return pack_weights<rocket_i4_weights>(
      ctx, M, K, N, B,
      [&](npuflow::Device& device, const int8_t* w) { return device.pack_int4_weight(w, K, N); });
}

ROCKETSIM_EXPORT rocket_i4_weights* rocket_i4_weights_pack_gw(rocket_i4_ctx* ctx, int M, int K,
                                                              int N, const int8_t* B, int group) {
  return pack_weights<rocket_i4_weights>(
      ctx, M, K, N, B, [&](npuflow::Device& device, const int8_t* w) {
        return device.pack_groupwise_weight(w, K, N, ElementType::kInt4, group);
      });
}

ROCKETSIM_EXPORT void rocket_i4_weights_free(rocket_i4_ctx*, rocket_i4_weights* w) {
  delete w;
}
ROCKETSIM_EXPORT size_t rocket_i4_weights_bytes(const rocket_i4_weights* w) {
  return w == nullptr ? 0 : w->value.packed->resident_bytes();
}

ROCKETSIM_EXPORT int rocket_matmul_int4_prepacked(rocket_i4_ctx* ctx, int M, int K, int N,
                                                  const int8_t* A, int32_t* C,
                                                  rocket_i4_weights* w) {
  return run_prepacked(ctx, K, N, A, C, w,
                       [&](npuflow::Device& device, const PackedWeight& packed) {
                         return device.gemm_int4(A, M, packed, C, lent_context());
                       });
}

ROCKETSIM_EXPORT int rocket_matmul_int4_prepacked_gw(rocket_i4_ctx* ctx, int M, int K, int N,
                                                     const int8_t* A, const float* a_scale,
                                                     const float* b_scale, float* Cf,
                                                     rocket_i4_weights* w) {
  return run_prepacked(
      ctx, K, N, A, Cf, w, [&](npuflow::Device& device, const PackedWeight& packed) {
        return device.gemm_groupwise(A, a_scale, M, packed, b_scale, Cf, lent_context());
      });
}

struct rocket_fa_ctx {
  explicit rocket_fa_ctx(int nthreads) : context(nthreads) {}
  Context context;
};

ROCKETSIM_EXPORT rocket_fa_ctx* rocket_fa_ctx_create(int nthreads) {
  return new rocket_fa_ctx(nthreads);
}
ROCKETSIM_EXPORT void rocket_fa_ctx_free(rocket_fa_ctx* ctx) {
  delete ctx;
}

ROCKETSIM_EXPORT int rocket_flash_attn_fp16_ctx(rocket_fa_ctx* c, int n_tokens, int n_kv,
                                                int head_dim, int dv, int n_head, int n_kv_heads,
                                                float scale, float softcap, const _Float16* Q,
                                                const _Float16* K, const _Float16* V,
                                                const _Float16* mask, _Float16* out) {
  last_error.clear();
  if (c == nullptr) return ROCKET_E_SHAPE;
  CallGuard guard(c->context);
  if (!guard.entered()) return ROCKET_E_DEVICE;
  const auto bits = [](const _Float16* half) { return reinterpret_cast<const uint16_t*>(half); };
  const npuflow::Fp16Attention call{.tokens = n_tokens,
                                    .kv = n_kv,
                                    .head_dim = head_dim,
                                    .dv = dv,
                                    .heads = n_head,
                                    .kv_heads = n_kv_heads,
                                    .scale = scale,
                                    .q = bits(Q),
                                    .k = bits(K),
                                    .v = bits(V),
                                    .mask = bits(mask),
                                    .out = reinterpret_cast<uint16_t*>(out),
                                    .softcap = softcap};
  return code_of(c->context.device->attention_fp16(call, lent_context()));
}

// The device: nothing is opened; an fd only names the caller's intent to the conv context.
ROCKETSIM_EXPORT int rocket_open(void) {
  static std::atomic<int> next_fd{3};
  return next_fd++;
}
ROCKETSIM_EXPORT void rocket_close(int) {}

struct rocket_conv_ctx {
  explicit rocket_conv_ctx(int fd) : context(0), fd(fd) {}
  Context context;
  int fd;
};

ROCKETSIM_EXPORT rocket_conv_ctx* rocket_conv_ctx_create(int fd) {
  return new rocket_conv_ctx(fd);
}
ROCKETSIM_EXPORT void rocket_conv_ctx_free(rocket_conv_ctx* ctx) {
  delete ctx;
}

namespace {

const uint16_t* bits_of(const _Float16* half) {
  return reinterpret_cast<const uint16_t*>(half);
}

// A descriptor as the device's call: the fields both kinds share (null operands stand for the
// plan's "no buffers").
template <typename Call, typename Desc>
Call conv_call(const Desc& d, const _Float16* in, const _Float16* W, _Float16* out) {
  Call call;
  call.ic = d.ic;
  call.ih = d.ih;
  call.iw = d.iw;
  call.oc = d.oc;
  call.kh = d.kh;
  call.kw = d.kw;
  call.stride_y = d.stride_y;
  call.stride_x = d.stride_x;
  call.pad_top = d.pad_top;
  call.pad_left = d.pad_left;
  call.dil_y = d.dil_y;
  call.dil_x = d.dil_x;
  call.depthwise = d.depthwise != 0;
  call.input = bits_of(in);
  call.weight = bits_of(W);
  call.out = reinterpret_cast<uint16_t*>(out);
  return call;
}

npuflow::Fp16Conv2d conv2d_call(const rocket_conv2d_desc& d, const _Float16* in, const _Float16* W,
                                _Float16* out) {
  return conv_call<npuflow::Fp16Conv2d>(d, in, W, out);
}

npuflow::Fp16ConvTranspose2d conv_transpose2d_call(const rocket_conv_transpose2d_desc& d,
                                                   const _Float16* in, const _Float16* W,
                                                   _Float16* out) {
  auto call = conv_call<npuflow::Fp16ConvTranspose2d>(d, in, W, out);
  call.opad_y = d.opad_y;
  call.opad_x = d.opad_x;
  return call;
}

// The RK3588 fp16 path refuses an output extent it did not derive itself (rocket_conv.h).
int check_extent(const rocket_conv2d_desc& d, const npuflow::Fp16Conv2d& call) {
  const int64_t oh = npuflow::conv2d_output_height(call), ow = npuflow::conv2d_output_width(call);
  if ((d.oh != 0 && d.oh != oh) || (d.ow != 0 && d.ow != ow)) {
    last_error = npuflow::str_cat("an explicit output extent ", d.oh, "x", d.ow,
                                  " the RK3588 fp16 path did not derive (", oh, "x", ow, ")");
    return ROCKET_E_SHAPE;
  }
  return ROCKET_OK;
}

// A plan: the call's checks and the library's contract, with stand-in buffers.
template <typename Call, typename Check, typename Shape>
int plan(const Call& call, Check&& check, Shape&& shape) {
  last_error.clear();
  const Status valid = check(call);
  return code_of(valid.is_ok() ? shape(call) : valid);
}

// One convolution on the context's simulated device.
template <typename Run>
int run_conv(rocket_conv_ctx* ctx, Run&& run) {
  CallGuard guard(ctx->context);
  if (!guard.entered()) return ROCKET_E_DEVICE;
  return code_of(run(*ctx->context.device));
}

_Float16 stand_in[1];

}  // namespace

ROCKETSIM_EXPORT int rocket_conv2d_plan(const rocket_conv2d_desc* d) {
  if (d == nullptr) return ROCKET_E_SHAPE;
  const npuflow::Fp16Conv2d call = conv2d_call(*d, stand_in, stand_in, stand_in);
  const int extent = check_extent(*d, call);
  if (extent != ROCKET_OK) return extent;
  return plan(call, npuflow::check_conv2d_call, npuflow::sim::check_conv2d_shape);
}

ROCKETSIM_EXPORT int rocket_conv_transpose2d_plan(const rocket_conv_transpose2d_desc* d) {
  if (d == nullptr) return ROCKET_E_SHAPE;
  return plan(conv_transpose2d_call(*d, stand_in, stand_in, stand_in),
              npuflow::check_conv_transpose2d_call, npuflow::sim::check_conv_transpose2d_shape);
}

ROCKETSIM_EXPORT int rocket_conv2d_fp16_ctx(rocket_conv_ctx* ctx, const rocket_conv2d_desc* d,
                                            const _Float16* in, const _Float16* W, _Float16* out) {
  last_error.clear();
  if (ctx == nullptr || d == nullptr) return ROCKET_E_SHAPE;
  const npuflow::Fp16Conv2d call = conv2d_call(*d, in, W, out);
  const int extent = check_extent(*d, call);
  if (extent != ROCKET_OK) return extent;
  return run_conv(
      ctx, [&](npuflow::Device& device) { return device.conv2d_fp16(call, lent_context()); });
}

ROCKETSIM_EXPORT int rocket_conv_transpose2d_fp16_ctx(rocket_conv_ctx* ctx,
                                                      const rocket_conv_transpose2d_desc* d,
                                                      const _Float16* in, const _Float16* W,
                                                      _Float16* out) {
  last_error.clear();
  if (ctx == nullptr || d == nullptr) return ROCKET_E_SHAPE;
  const npuflow::Fp16ConvTranspose2d call = conv_transpose2d_call(*d, in, W, out);
  return run_conv(ctx, [&](npuflow::Device& device) {
    return device.conv_transpose2d_fp16(call, lent_context());
  });
}

ROCKETSIM_EXPORT const char* rocketsim_last_error() {
  return last_error.c_str();
}

ROCKETSIM_EXPORT void rocketsim_next_context(const char* options) {
  next_context_options = options != nullptr ? options : "";
}

ROCKETSIM_EXPORT void rocketsim_lend_pool(LentRun run, void* pool) {
  lent_run = run;
  lent_pool = pool;
}

// The group's simulated device, or null once every context of it is gone.
std::shared_ptr<npuflow::sim::SimDevice> group_device(const char* group) {
  std::lock_guard<std::mutex> lock(groups_mutex);
  auto it = groups.find(group != nullptr ? group : "");
  return it != groups.end() ? it->second.lock() : nullptr;
}

ROCKETSIM_EXPORT void rocketsim_account_host(const char* group, double multiply_adds,
                                             double bytes) {
  if (auto device = group_device(group)) device->account_host_pass(multiply_adds, bytes);
}

ROCKETSIM_EXPORT size_t rocketsim_report(const char* group, char* out, size_t size) {
  const std::shared_ptr<npuflow::sim::SimDevice> device = group_device(group);
  const std::string report = device ? device->profile_report() : std::string();
  if (out != nullptr && size > 0) {
    const size_t n = std::min(report.size(), size - 1);
    std::memcpy(out, report.data(), n);
    out[n] = 0;
  }
  return report.size();
}

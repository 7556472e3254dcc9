// SPDX-License-Identifier: GPL-3.0-or-later
// librocketnpu-sim.so: npuflow's RK3588 simulator (src/sim/) behind librocketnpu's own C API, so
// that the rocket device's code runs unchanged off-board. It implements the resident fp16 and
// int8 matmul entry points with the vendor headers' exact declarations (they are included: a
// signature that differs does not compile), and behind them the sim's contract, numerics, IOVA
// accounting, injected failures and cost model, as the bare library: weights that are not aligned
// are refused, not padded.
//
// Environment, as the real library reads it: ROCKET_N_THREADS (workers when a context is
// created with 0), ROCKET_KACC=0 (fp16 K tiles summed on the host). Simulator only:
// ROCKETSIM_FAIL_EVERY=N (every Nth accepted call fails with ROCKET_E_DEVICE).
// rocketsim_last_error() says why this thread's last failed call failed.
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "sim/sim_device.h"

#if !defined(__FLT16_MAX__) && !defined(ROCKET_FLOAT16_T)
#define ROCKET_FLOAT16_T uint16_t
#endif
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

npuflow::sim::SimOptions options_for(int nthreads) {
  npuflow::sim::SimOptions options;
  const int64_t workers = nthreads > 0 ? nthreads : env_int("ROCKET_N_THREADS", options.workers);
  options.workers = static_cast<int>(workers < 1 ? 1 : workers > 8 ? 8 : workers);
  options.kacc =
      env_int("ROCKET_KACC", 1) == 0 ? npuflow::sim::KAccMode::kHost : npuflow::sim::KAccMode::kNpu;
  options.fail_every = env_int("ROCKETSIM_FAIL_EVERY", 0);
  options.pad_weights = false;  // the bare library refuses misaligned K and N
  return options;
}

// A sim Status as the library's return code (enum rocket_status).
int code_of(const Status& status) {
  if (status.is_ok()) return ROCKET_OK;
  last_error = status.message();
  const std::string& message = status.message();
  if (message.rfind("ROCKET_E_TILING", 0) == 0) return ROCKET_E_TILING;
  if (message.rfind("ROCKET_E_UNSUPPORTED", 0) == 0) return ROCKET_E_UNSUPPORTED;
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
  explicit Context(int nthreads) : device(options_for(nthreads)) {}
  npuflow::sim::SimDevice device;
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

template <typename Ctx, typename W, typename Pack>
W* pack_weights(Ctx* ctx, int m, int k, int n, Pack&& pack) {
  last_error.clear();
  if (ctx == nullptr || m <= 0 || k <= 0 || n <= 0) {
    last_error = "null context or empty shape";
    return nullptr;
  }
  CallGuard guard(ctx->context);
  if (!guard.entered()) return nullptr;
  auto packed = pack(ctx->context.device);
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
  return code_of(gemm(ctx->context.device, *w->value.packed));
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

ROCKETSIM_EXPORT rocket_ctx* rocket_ctx_create(int nthreads) {
  return new rocket_ctx(nthreads);
}
ROCKETSIM_EXPORT void rocket_ctx_free(rocket_ctx* ctx) {
  delete ctx;
}

ROCKETSIM_EXPORT rocket_weights* rocket_weights_pack(rocket_ctx* ctx, int M, int K, int N,
                                                     const _Float16* B) {
  return pack_weights<rocket_ctx, rocket_weights>(ctx, M, K, N, [&](npuflow::Device& device) {
    const std::vector<uint16_t> w = transposed(reinterpret_cast<const uint16_t*>(B), K, N);
    return device.pack_fp16_weight(w.data(), K, N);
  });
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
  return pack_weights<rocket_i8_ctx, rocket_i8_weights>(ctx, M, K, N, [&](npuflow::Device& device) {
    const std::vector<int8_t> w = transposed(B, K, N);
    return device.pack_int8_weight(w.data(), K, N);
  });
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
  return run_prepacked(ctx, K, N, A, C, w,
                       [&](npuflow::Device& device, const PackedWeight& packed) {
                         return device.gemm_int8(A, ElementType::kInt8, M, packed, C, {});
                       });
}

ROCKETSIM_EXPORT const char* rocketsim_last_error() {
  return last_error.c_str();
}

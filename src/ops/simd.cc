#include "ops/simd.h"

#include <atomic>

namespace npuflow {
namespace {

bool cpu_has_avx2() {
#if NPUFLOW_HAVE_AVX2_KERNELS
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
#else
  return false;
#endif
}

bool cpu_has_avx512() {
#if NPUFLOW_HAVE_AVX2_KERNELS
  static const bool has = __builtin_cpu_supports("avx512f");
  return has;
#else
  return false;
#endif
}

std::atomic<bool> avx2_allowed{true};
std::atomic<bool> avx512_allowed{true};
thread_local bool portable_on_this_thread = false;

}  // namespace

bool avx2_kernels_active() {
  return cpu_has_avx2() && avx2_allowed.load(std::memory_order_relaxed) && !portable_on_this_thread;
}

void allow_avx2_kernels(bool allowed) {
  avx2_allowed.store(allowed, std::memory_order_relaxed);
}

bool avx512_kernels_active() {
  return avx2_kernels_active() && cpu_has_avx512() &&
         avx512_allowed.load(std::memory_order_relaxed);
}

void allow_avx512_kernels(bool allowed) {
  avx512_allowed.store(allowed, std::memory_order_relaxed);
}

ScopedPortableKernels::ScopedPortableKernels(bool portable) : previous_(portable_on_this_thread) {
  portable_on_this_thread = previous_ || portable;
}

ScopedPortableKernels::~ScopedPortableKernels() {
  portable_on_this_thread = previous_;
}

}  // namespace npuflow

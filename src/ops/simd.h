// Which vector kernels the host ops run: AVX2 + FMA where the CPU reports them (decided at run
// time, so one build serves every x86-64 machine and other architectures compile the portable
// loops), else plain loops the compiler vectorizes for the baseline ISA.
#pragma once

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define NPUFLOW_HAVE_AVX2_KERNELS 1
#define NPUFLOW_TARGET_AVX2 __attribute__((target("avx2,fma")))
#define NPUFLOW_TARGET_AVX512 __attribute__((target("avx512f,avx2,fma")))
#else
#define NPUFLOW_HAVE_AVX2_KERNELS 0
#define NPUFLOW_TARGET_AVX2
#define NPUFLOW_TARGET_AVX512
#endif

namespace npuflow {

// True when the AVX2 kernels run: the CPU has AVX2 and FMA and no test turned them off.
bool avx2_kernels_active();

// For tests: false makes every host op take its portable loops (true restores the CPU's choice).
void allow_avx2_kernels(bool allowed);

// True when the AVX-512 kernels run (the attention tiles; the other ops stay AVX2): the AVX2
// kernels are active, the CPU has AVX-512F, and no test turned them off.
bool avx512_kernels_active();

// For tests: false keeps the AVX2 kernels where AVX-512 ones exist (true restores the choice).
void allow_avx512_kernels(bool allowed);

// While alive, host ops started on this thread take their portable loops if `portable` (the
// `host_kernels=portable` knob of one encoder run). Each op reads the choice on the thread that
// calls it, before its row loops fan out on the pool, so the pool's threads follow it too.
class ScopedPortableKernels {
 public:
  explicit ScopedPortableKernels(bool portable);
  ~ScopedPortableKernels();
  ScopedPortableKernels(const ScopedPortableKernels&) = delete;
  ScopedPortableKernels& operator=(const ScopedPortableKernels&) = delete;

 private:
  bool previous_;
};

}  // namespace npuflow

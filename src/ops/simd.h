// Which vector kernels the host ops run: AVX2 + FMA where the CPU reports them (decided at run
// time, so one build serves every x86-64 machine and other architectures compile the portable
// loops), else plain loops the compiler vectorizes for the baseline ISA.
#pragma once

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define NPUFLOW_HAVE_AVX2_KERNELS 1
#define NPUFLOW_TARGET_AVX2 __attribute__((target("avx2,fma")))
#else
#define NPUFLOW_HAVE_AVX2_KERNELS 0
#define NPUFLOW_TARGET_AVX2
#endif

namespace npuflow {

// True when the AVX2 kernels run: the CPU has AVX2 and FMA and no test turned them off.
bool avx2_kernels_active();

// For tests: false makes every host op take its portable loops (true restores the CPU's choice).
void allow_avx2_kernels(bool allowed);

}  // namespace npuflow

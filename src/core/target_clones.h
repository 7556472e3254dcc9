// Functions cloned per x86-64 level (AVX-512, AVX2 with FMA, baseline), the clone picked at load
// time; a plain function elsewhere (aarch64: NEON is the baseline). clang (the libFuzzer build)
// cannot clone a template, so NPUFLOW_CLONED_TEMPLATE is empty there.
#pragma once

#if defined(__x86_64__)
#define NPUFLOW_CLONED __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define NPUFLOW_CLONED
#endif
#if defined(__clang__)
#define NPUFLOW_CLONED_TEMPLATE
#else
#define NPUFLOW_CLONED_TEMPLATE NPUFLOW_CLONED
#endif

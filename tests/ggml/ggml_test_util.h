// Loading the CPU backend and libggml-npuflow.so the way llama.cpp does (ggml_backend_load), for
// the tests that drive the backend through ggml's public API.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

#include "ggml-backend.h"
#include "ggml.h"
#include "ggml/ggml-npuflow.h"

namespace npuflow_test {

struct LoadedBackends {
  ggml_backend_reg_t cpu_reg = nullptr;
  ggml_backend_reg_t npuflow_reg = nullptr;
  ggml_backend_dev_t cpu_dev = nullptr;
  ggml_backend_dev_t npuflow_dev = nullptr;
};

inline LoadedBackends load_backends() {
  LoadedBackends b;
  b.cpu_reg = ggml_backend_load(NPUFLOW_GGML_CPU_MODULE);
  b.npuflow_reg = ggml_backend_load(NPUFLOW_GGML_MODULE);
  if (b.cpu_reg == nullptr || b.npuflow_reg == nullptr) {
    std::fprintf(stderr, "could not load %s or %s\n", NPUFLOW_GGML_CPU_MODULE, NPUFLOW_GGML_MODULE);
    std::exit(1);
  }
  b.cpu_dev = ggml_backend_reg_dev_get(b.cpu_reg, 0);
  b.npuflow_dev = ggml_backend_dev_by_name("NPUFLOW");
  if (b.npuflow_dev == nullptr) {
    std::fprintf(stderr, "no NPUFLOW device after loading %s\n", NPUFLOW_GGML_MODULE);
    std::exit(1);
  }
  return b;
}

inline ggml_npuflow_stats npuflow_stats(ggml_backend_reg_t reg) {
  auto get = reinterpret_cast<ggml_npuflow_get_stats_t>(
      ggml_backend_reg_get_proc_address(reg, "ggml_backend_npuflow_get_stats"));
  ggml_npuflow_stats stats{};
  if (get == nullptr) {
    std::fprintf(stderr, "libggml-npuflow.so has no ggml_backend_npuflow_get_stats\n");
    std::exit(1);
  }
  get(&stats);
  return stats;
}

}  // namespace npuflow_test

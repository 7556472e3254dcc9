// The host device's int8 GEMM at few rows: oneDNN's kernel (one primitive execution per
// 256-column block) against the few-rows kernel (host/vnni_rows_gemm.h) on the same weights, over
// the seven projections of a Qwen3-0.6B layer (what bench/qdq_matmul.py runs). Int8 activations, 2
// threads on an OpenMP pool; the two arms alternate, median of 31 passes. Checks that both arms
// give the same int32 results. Sets kFewRowsMax (host/onednn_weight.h).
//
//   build/bin/npuflow_bench_int8_few_rows
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "core/parallel.h"
#include "host/host_device.h"
#include "median.h"

int main() {
  using namespace npuflow;
  struct Shape {
    int64_t k, n;
  };
  const Shape shapes[] = {{1024, 2048}, {1024, 1024}, {1024, 1024}, {2048, 1024},
                          {1024, 3072}, {1024, 3072}, {3072, 1024}};
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> i8(-128, 127);
  HostDevice onednn(DeviceOptions{.threads = 2, .few_rows_max = 0});
  HostDevice few_rows(DeviceOptions{.threads = 2, .few_rows_max = 1 << 20});
  // Each arm's weights, packed by its own device (a weight runs on the device that packed it).
  std::vector<std::unique_ptr<PackedWeight>> weights[2];
  for (const Shape& s : shapes) {
    std::vector<int8_t> w(static_cast<size_t>(s.k * s.n));
    for (auto& v : w) v = static_cast<int8_t>(i8(rng));
    weights[0].push_back(onednn.pack_int8_weight(w.data(), s.k, s.n).value());
    weights[1].push_back(few_rows.pack_int8_weight(w.data(), s.k, s.n).value());
  }
  const ExecContext pool = openmp_exec_context(2);
  std::printf("Qwen3-0.6B layer, 7 int8 projections, 2 threads, median of 31 (ms per layer):\n");
  std::printf("%4s %10s %10s %8s\n", "M", "oneDNN", "few-rows", "ratio");
  for (int64_t m : {1, 4, 16, 32, 64, 128, 256, 512}) {
    std::vector<int8_t> a(static_cast<size_t>(m * 3072));
    for (auto& v : a) v = static_cast<int8_t>(i8(rng));
    // Each arm's results, one per projection.
    std::vector<std::vector<int32_t>> c_onednn, c_rows;
    for (const Shape& s : shapes) c_onednn.emplace_back(static_cast<size_t>(m * s.n));
    c_rows = c_onednn;
    std::vector<double> ms[2];
    bool same = true;
    for (int pass = 0; pass < 32; ++pass) {
      for (int arm = 0; arm < 2; ++arm) {
        HostDevice& device = arm == 0 ? onednn : few_rows;
        auto& c = arm == 0 ? c_onednn : c_rows;
        const auto start = std::chrono::steady_clock::now();
        for (size_t i = 0; i < weights[arm].size(); ++i) {
          if (!device
                   .gemm_int8(a.data(), ElementType::kInt8, m, *weights[arm][i], c[i].data(), pool)
                   .is_ok()) {
            return 1;
          }
        }
        // The first pass warms caches and creates the primitives.
        if (pass > 0) {
          ms[arm].push_back(
              std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                  .count());
        }
      }
      same = same && c_onednn == c_rows;
    }
    std::printf("%4lld %10.3f %10.3f %7.2fx%s\n", static_cast<long long>(m), bench::median(ms[0]),
                bench::median(ms[1]), bench::median(ms[0]) / bench::median(ms[1]),
                same ? "" : "  RESULTS DIFFER");
    if (!same) return 1;
  }
}

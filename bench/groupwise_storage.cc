// The host group-wise GEMM's weight storages in isolation: the same product (SmolLM2's ffn_down,
// K=1536, N=576, M=512, groups of 16 or 32) over a weight held as int8 values and as 4-, 5- and
// 6-bit codes. A weight's storage follows from its distinct values, so each storage gets its own
// weight: values drawn from 16, 32 and 64 consecutive integers, and from 65 for int8. Single
// thread, the fastest kernel this CPU has; prints the median of 15 passes of each, alternating.
//
//   build/bin/npuflow_bench_groupwise_storage
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <vector>

#include "host/groupwise_gemm.h"
#include "median.h"

namespace {

constexpr int64_t kM = 512, kK = 1536, kN = 576;

}  // namespace

int main() {
  using namespace npuflow;
  using bench::median;
  std::mt19937 rng(1);
  std::uniform_int_distribution<int> i8(-127, 127);
  std::vector<int8_t> a(kM * kK);
  for (auto& v : a) v = static_cast<int8_t>(i8(rng));
  struct Storage {
    const char* name;
    int values;  // distinct weight values
    int64_t group;
  };
  const Storage storages[] = {{"int8 (65 values)", 65, 16},
                              {"6-bit codes", 64, 16},
                              {"int8 (65 values)", 65, 32},
                              {"5-bit codes", 32, 32},
                              {"4-bit codes", 16, 32}};
  std::vector<std::unique_ptr<HostGroupwiseWeight>> weights;
  for (const Storage& storage : storages) {
    std::uniform_int_distribution<int> value(-storage.values / 2,
                                             storage.values - storage.values / 2 - 1);
    std::vector<int8_t> w(kK * kN);
    for (auto& v : w) v = static_cast<int8_t>(value(rng));
    weights.push_back(
        std::make_unique<HostGroupwiseWeight>(w.data(), kK, kN, ElementType::kInt8, storage.group));
  }
  std::uniform_real_distribution<float> scale(0.001f, 0.01f);
  std::vector<float> a_scales(kM * kK / 16), w_scales(kN * kK / 16), c(kM * kN);
  for (auto& v : a_scales) v = scale(rng);
  for (auto& v : w_scales) v = scale(rng);
  std::vector<std::vector<double>> ms(weights.size());
  for (int pass = 0; pass < 15; ++pass) {
    for (size_t i = 0; i < weights.size(); ++i) {
      const auto start = std::chrono::steady_clock::now();
      host_groupwise_gemm(a.data(), a_scales.data(), kM, *weights[i], w_scales.data(), c.data(),
                          {});
      ms[i].push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count());
    }
  }
  std::printf("M=%lld K=%lld N=%lld, one thread, median of 15 (ms):\n", static_cast<long long>(kM),
              static_cast<long long>(kK), static_cast<long long>(kN));
  for (size_t i = 0; i < weights.size(); ++i) {
    std::printf("  group %2lld  %-18s code bits %d  %8.3f ms  %6.2f MiB\n",
                static_cast<long long>(storages[i].group), storages[i].name,
                weights[i]->code_bits(), median(ms[i]),
                static_cast<double>(weights[i]->resident_bytes()) / (1 << 20));
  }
}

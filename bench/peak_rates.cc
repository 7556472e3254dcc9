// This machine's arithmetic ceilings, for reading the host-device figures against them: the fp32
// fused multiply-add rate (AVX2 and AVX-512 where the CPU has them) and the int8 dot-product rate
// (AVX-512 VNNI: VPDPBUSD, u8 x s8 into int32, what oneDNN's and MLAS's int8 GEMMs run on), on 1 to
// N threads. Each thread runs a loop of independent accumulator chains (more than the FMA latency
// times the issue width), with nothing loaded, so the rate is the units' throughput and no GEMM
// can beat it. Prints GFLOP/s (2 per FMA lane) and GOP/s (2 per multiply-add of a byte pair).
//
// Usage: npuflow_bench_peak [threads]   (default: 1 and every core)
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <thread>
#include <vector>

#include "median.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
// GCC 12's AVX-512 helpers start from a deliberately undefined vector, which -Wuninitialized
// (and, at -O2, -Wmaybe-uninitialized) reports where they are inlined.
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#define NPUFLOW_PEAK_X86 1
#else
#define NPUFLOW_PEAK_X86 0
#endif

namespace {

constexpr int64_t kIterations = 20'000'000;
constexpr int kChains = 12;  // independent accumulators per thread

#if NPUFLOW_PEAK_X86
// Each returns a value derived from its accumulators, so that the loop is not dropped.
__attribute__((target("avx2,fma"))) float fma_avx2(int64_t iterations) {
  __m256 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm256_set1_ps(0.001f * static_cast<float>(c));
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (int64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 12
    for (int c = 0; c < kChains; ++c) acc[c] = _mm256_fmadd_ps(acc[c], a, b);
  }
  __m256 sum = acc[0];
  for (int c = 1; c < kChains; ++c) sum = _mm256_add_ps(sum, acc[c]);
  return _mm256_cvtss_f32(sum);
}

__attribute__((target("avx512f"))) float fma_avx512(int64_t iterations) {
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(0.001f * static_cast<float>(c));
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (int64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 12
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], a, b);
  }
  __m512 sum = acc[0];
  for (int c = 1; c < kChains; ++c) sum = _mm512_add_ps(sum, acc[c]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, sum);
  float total = 0.0f;
  for (float lane : lanes) total += lane;
  return total;
}

__attribute__((target("avx512f,avx512vnni"))) float dpbusd_avx512(int64_t iterations) {
  __m512i acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_epi32(c);
  const __m512i u8 = _mm512_set1_epi8(3), s8 = _mm512_set1_epi8(-2);
  for (int64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 12
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_dpbusd_epi32(acc[c], u8, s8);
  }
  __m512i sum = acc[0];
  for (int c = 1; c < kChains; ++c) sum = _mm512_add_epi32(sum, acc[c]);
  alignas(64) int32_t lanes[16];
  _mm512_store_si512(lanes, sum);
  int64_t total = 0;
  for (int32_t lane : lanes) total += lane;
  return static_cast<float>(total);
}
#endif

// Runs `kernel` on `threads` threads at once; the rate in G(FL)OP/s given `ops` per iteration per
// thread. Median of 5.
double rate(int threads, double ops_per_iteration, const std::function<float(int64_t)>& kernel) {
  std::vector<double> rates;
  for (int run = 0; run < 5; ++run) {
    std::vector<std::thread> pool;
    std::vector<float> sink(static_cast<size_t>(threads));
    const auto start = std::chrono::steady_clock::now();
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] { sink[static_cast<size_t>(t)] = kernel(kIterations); });
    }
    for (std::thread& thread : pool) thread.join();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (sink[0] == 12345.0f) std::puts("");  // keeps the results alive
    rates.push_back(ops_per_iteration * static_cast<double>(kIterations) * threads / seconds / 1e9);
  }
  return npuflow::bench::median(rates);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> thread_counts{
      1, static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))};
  if (argc > 1) thread_counts = {std::atoi(argv[1])};
#if NPUFLOW_PEAK_X86
  for (int threads : thread_counts) {
    std::printf("%d thread(s):\n", threads);
    // Per iteration: kChains FMAs of 8 (16) lanes, 2 FLOP each; kChains VPDPBUSD of 64 byte pairs.
    std::printf("  fp32 FMA, AVX2:      %8.1f GFLOP/s\n", rate(threads, kChains * 8 * 2, fma_avx2));
    if (__builtin_cpu_supports("avx512f")) {
      std::printf("  fp32 FMA, AVX-512:   %8.1f GFLOP/s\n",
                  rate(threads, kChains * 16 * 2, fma_avx512));
    }
    if (__builtin_cpu_supports("avx512vnni")) {
      std::printf("  int8 VNNI (VPDPBUSD): %7.1f GOP/s\n",
                  rate(threads, kChains * 64 * 2, dpbusd_avx512));
    }
  }
#else
  std::printf("no rate loops for this architecture\n");
#endif
  return 0;
}

// The simulator's arithmetic against an independent, slow, per-element reference written here
// from rk3588-npu.md §2: its own tiling rule, its own K-tile loops. Every dtype, both fp16
// K-accumulation modes, fp32 output, shapes that need padding, and the cases where the NPU's
// arithmetic visibly differs from the exact host (fp16 rounding, int4 saturation, worker count).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "core/fp16.h"
#include "host/host_device.h"
#include "sim/sim_device.h"

namespace npuflow::sim {
namespace {

// ---- The reference's own reading of the tiling rule (rk3588-npu.md §1 Tile caps). ----

struct RefType {
  int64_t n_multiple, bytes_num, bytes_den, budget;
};
RefType ref_type(NpuType t) {
  if (t == NpuType::kFp16) return {16, 2, 1, 12};
  if (t == NpuType::kInt8) return {32, 1, 1, 11};
  return {64, 1, 2, 12};
}

int64_t ref_banks(int64_t rows, int64_t kt, const RefType& r) {
  const int64_t bytes = (rows * kt * r.bytes_num + r.bytes_den - 1) / r.bytes_den;
  return (bytes + 32767) / 32768;
}

int64_t ref_kt_for(NpuType t, int64_t m, int64_t k, int64_t nt, int64_t cap, int64_t group) {
  const RefType r = ref_type(t);
  const int64_t mt = std::min<int64_t>(m, 256);
  int64_t kt = std::min<int64_t>(k, 16384);
  if (cap > 0) kt = std::min(kt, cap);
  for (; kt >= 32; kt -= 32) {
    if (group > 0 && group % kt != 0) continue;
    if (ref_banks(mt, kt, r) + ref_banks(nt, kt, r) <= r.budget) return kt;
  }
  return -1;
}

// Kt of the worker slice holding column `col` of an N-column (padded) weight.
int64_t ref_kt(NpuType t, int64_t m, int64_t k, int64_t n, int workers, int64_t col,
               int64_t cap = 0, int64_t group = 0) {
  const int64_t multiple = std::max<int64_t>(16, ref_type(t).n_multiple);
  const int64_t width = ((n + workers - 1) / workers + multiple - 1) / multiple * multiple;
  const int64_t slice = std::min(width, n - col / width * width);
  int64_t kt = ref_kt_for(t, m, k, std::min<int64_t>(slice, 256), cap, group);
  if (t == NpuType::kFp16 && slice > 256 && (k + kt - 1) / kt > 1) {
    kt = ref_kt_for(t, m, k, 128, cap, group);  // ASYM
  }
  return kt;
}

int64_t pad(int64_t v, int64_t multiple) {
  return (v + multiple - 1) / multiple * multiple;
}

// ---- Random operands ----

std::vector<uint16_t> random_half(size_t count, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<uint16_t> v(count);
  for (auto& x : v) x = float_to_half_bits(dist(rng));
  return v;
}

std::vector<int8_t> random_int(size_t count, uint32_t seed, int lo, int hi) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(lo, hi);
  std::vector<int8_t> v(count);
  for (auto& x : v) x = static_cast<int8_t>(dist(rng));
  return v;
}

// ---- fp16 ----

enum class RefMode { kKacc, kHost, kF32 };

// One output element, K tiles of kt over the zero-padded length kp.
float ref_fp16_element(const std::vector<uint16_t>& a, const std::vector<uint16_t>& w, int64_t k,
                       int64_t n, int64_t kp, int64_t row, int64_t col, int64_t kt, RefMode mode) {
  float kacc = 0.0f, host = 0.0f;
  double wide = 0.0;
  for (int64_t k0 = 0; k0 < kp; k0 += kt) {
    float conv = 0.0f;
    for (int64_t kk = k0; kk < std::min(kp, k0 + kt); ++kk) {
      if (kk >= k) break;  // padding is zero
      conv += half_bits_to_float(a[row * k + kk]) * half_bits_to_float(w[kk * n + col]);
    }
    if (k0 == 0) {
      kacc = round_to_half(conv);
    } else {
      kacc = round_to_half(conv + kacc);
    }
    host += round_to_half(conv);
    wide += conv;
  }
  if (mode == RefMode::kKacc) return kacc;
  if (mode == RefMode::kHost) return round_to_half(host);
  return static_cast<float>(wide);
}

struct Fp16Case {
  int64_t m, k, n;
  int workers;
  KAccMode kacc;
  bool fp32_out;
};

// Runs the sim and compares every element with the reference; returns the sim's output widened.
std::vector<float> check_fp16(const Fp16Case& t, const std::vector<uint16_t>& a,
                              const std::vector<uint16_t>& w, RefMode expected_mode) {
  SimOptions options;
  options.workers = t.workers;
  options.kacc = t.kacc;
  SimDevice sim(options);
  auto packed = sim.pack_fp16_weight(w.data(), t.k, t.n);
  EXPECT_TRUE(packed.is_ok()) << packed.status().to_string();
  if (!packed.is_ok()) return {};
  std::vector<float> out(static_cast<size_t>(t.m * t.n));
  std::vector<uint16_t> out16(static_cast<size_t>(t.m * t.n));
  Status status =
      t.fp32_out
          ? sim.gemm_fp16(a.data(), t.m, *packed.value(), out.data(), ElementType::kFloat32, {})
          : sim.gemm_fp16(a.data(), t.m, *packed.value(), out16.data(), ElementType::kFloat16, {});
  EXPECT_TRUE(status.is_ok()) << status.to_string();
  if (!t.fp32_out) {
    for (size_t i = 0; i < out.size(); ++i) out[i] = half_bits_to_float(out16[i]);
  }
  const int64_t kp = pad(t.k, 32), np = pad(t.n, 16);
  int64_t mismatches = 0;
  for (int64_t row = 0; row < t.m; ++row) {
    for (int64_t col = 0; col < t.n; ++col) {
      const int64_t kt = ref_kt(NpuType::kFp16, t.m, kp, np, t.workers, col);
      const float want = ref_fp16_element(a, w, t.k, t.n, kp, row, col, kt, expected_mode);
      const float got = out[row * t.n + col];
      if (std::bit_cast<uint32_t>(want) != std::bit_cast<uint32_t>(got) && mismatches++ < 5) {
        ADD_FAILURE() << "m=" << t.m << " k=" << t.k << " n=" << t.n << " row " << row << " col "
                      << col << " kt " << kt << ": sim " << got << " reference " << want;
      }
    }
  }
  EXPECT_EQ(mismatches, 0);
  return out;
}

TEST(SimNumerics, Fp16KaccMatchesTheReferenceOnPaddedShapes) {
  // K 1000 -> 1024 and N 600 -> 608 are padded; several K tiles and ASYM slices.
  const Fp16Case t{256, 1000, 600, 5, KAccMode::kNpu, false};
  const auto a = random_half(t.m * t.k, 1, 1.0f);
  const auto w = random_half(t.k * t.n, 2, 0.5f);
  check_fp16(t, a, w, RefMode::kKacc);
}

TEST(SimNumerics, Fp16HostAccumulationMatchesTheReference) {
  const Fp16Case t{256, 1000, 600, 3, KAccMode::kHost, false};
  const auto a = random_half(t.m * t.k, 3, 1.0f);
  const auto w = random_half(t.k * t.n, 4, 0.5f);
  const auto host_mode = check_fp16(t, a, w, RefMode::kHost);
  // The two modes round at different points: on this shape they must disagree somewhere.
  Fp16Case kacc = t;
  kacc.kacc = KAccMode::kNpu;
  EXPECT_NE(check_fp16(kacc, a, w, RefMode::kKacc), host_mode);
}

TEST(SimNumerics, Fp16KaccTinyLastMTileTakesTheHostPath) {
  // M = 260: the last M tile has 4 rows (< 12), so the library accumulates on the host.
  const Fp16Case t{260, 1024, 64, 1, KAccMode::kNpu, false};
  const auto a = random_half(t.m * t.k, 5, 1.0f);
  const auto w = random_half(t.k * t.n, 6, 0.5f);
  check_fp16(t, a, w, RefMode::kHost);
}

TEST(SimNumerics, Fp16Fp32OutputSumsTilePartialsInDouble) {
  const Fp16Case t{256, 2048, 48, 2, KAccMode::kNpu, true};
  const auto a = random_half(t.m * t.k, 7, 1.0f);
  const auto w = random_half(t.k * t.n, 8, 0.5f);
  check_fp16(t, a, w, RefMode::kF32);
}

TEST(SimNumerics, Fp16SmallShapesAndOneKTile) {
  for (int64_t m : {4, 8, 12}) {
    const Fp16Case t{m, 72, 40, 5, KAccMode::kNpu, false};  // K 72 -> 96, N 40 -> 48
    check_fp16(t, random_half(t.m * t.k, 9, 1.0f), random_half(t.k * t.n, 10, 1.0f),
               RefMode::kKacc);
  }
}

TEST(SimNumerics, Fp16RoundingDependsOnTheWorkerCount) {
  // Eight workers give 80-column slices planned at Kt 576; one worker an ASYM Kt of 512.
  const auto a = random_half(256 * 1024, 11, 1.0f);
  const auto w = random_half(1024 * 600, 12, 0.5f);
  const auto one = check_fp16({256, 1024, 600, 1, KAccMode::kNpu, false}, a, w, RefMode::kKacc);
  const auto eight = check_fp16({256, 1024, 600, 8, KAccMode::kNpu, false}, a, w, RefMode::kKacc);
  EXPECT_NE(one, eight);
}

TEST(SimNumerics, Fp16DiffersFromTheExactHostButStaysClose) {
  const int64_t m = 256, k = 3840, n = 64;
  const auto a = random_half(m * k, 13, 1.0f);
  const auto w = random_half(k * n, 14, 0.5f);
  SimDevice sim;
  HostDevice host({});
  auto ps = sim.pack_fp16_weight(w.data(), k, n);
  auto ph = host.pack_fp16_weight(w.data(), k, n);
  ASSERT_TRUE(ps.is_ok() && ph.is_ok());
  std::vector<float> cs(m * n), ch(m * n);
  ASSERT_TRUE(
      sim.gemm_fp16(a.data(), m, *ps.value(), cs.data(), ElementType::kFloat32, {}).is_ok());
  ASSERT_TRUE(
      host.gemm_fp16(a.data(), m, *ph.value(), ch.data(), ElementType::kFloat32, {}).is_ok());
  std::vector<uint16_t> hs(m * n);
  ASSERT_TRUE(
      sim.gemm_fp16(a.data(), m, *ps.value(), hs.data(), ElementType::kFloat16, {}).is_ok());
  double worst_f32 = 0, worst_f16 = 0, scale = 0;
  for (int64_t i = 0; i < m * n; ++i) {
    scale = std::max(scale, std::fabs(static_cast<double>(ch[i])));
    worst_f32 = std::max(worst_f32, std::fabs(static_cast<double>(cs[i]) - ch[i]));
    worst_f16 =
        std::max(worst_f16, std::fabs(static_cast<double>(half_bits_to_float(hs[i])) - ch[i]));
  }
  EXPECT_LT(worst_f32, 1e-5 * scale);  // fp32 output: near-exact
  EXPECT_GT(worst_f16, 0.0);           // fp16 partials: visible drift ...
  EXPECT_LT(worst_f16, 2e-2 * scale);  // ... of the documented size (~0.2-0.4 %)
}

TEST(SimNumerics, Fp16ResidentWeightRefusesAnMThatPlansOtherTiles) {
  SimDevice sim;
  const auto w = random_half(1024 * 64, 15, 1.0f);
  auto packed = sim.pack_fp16_weight(w.data(), 1024, 64);
  ASSERT_TRUE(packed.is_ok());
  const auto a = random_half(16 * 1024, 16, 1.0f);
  std::vector<uint16_t> c(16 * 64);
  Status status = sim.gemm_fp16(a.data(), 16, *packed.value(), c.data(), ElementType::kFloat16, {});
  EXPECT_EQ(status.code(), StatusCode::kUnsupported);
  EXPECT_NE(status.message().find("ROCKET_E_TILING"), std::string::npos) << status.message();
}

// ---- int8 ----

TEST(SimNumerics, Int8IsExactPerTileForSignedAndUnsignedActivations) {
  const int64_t k = 1400, n = 72;  // K -> 1408, N -> 96 (32-column slices: 2 tiles of 1152)
  const auto w = random_int(k * n, 17, -128, 127);
  SimDevice sim;
  auto packed = sim.pack_int8_weight(w.data(), k, n);
  ASSERT_TRUE(packed.is_ok());
  for (int64_t m : {4, 20, 260}) {
    const auto a = random_int(m * k, static_cast<uint32_t>(m), -128, 127);
    for (ElementType type : {ElementType::kInt8, ElementType::kUInt8}) {
      std::vector<int32_t> c(m * n);
      ASSERT_TRUE(sim.gemm_int8(a.data(), type, m, *packed.value(), c.data(), {}).is_ok());
      const int64_t kt = ref_kt(NpuType::kInt8, 256, pad(k, 32), pad(n, 32), 5, 0);
      EXPECT_EQ(kt, 1152);  // 9 feature + 2 weight banks of the 11
      for (int64_t row = 0; row < m; ++row) {
        for (int64_t col = 0; col < n; ++col) {
          int64_t total = 0;
          for (int64_t k0 = 0; k0 < k; k0 += kt) {
            int32_t tile = 0;
            for (int64_t kk = k0; kk < std::min(k, k0 + kt); ++kk) {
              const int32_t av = type == ElementType::kUInt8
                                     ? int32_t{static_cast<uint8_t>(a[row * k + kk])}
                                     : int32_t{a[row * k + kk]};
              tile += av * w[kk * n + col];
            }
            total += tile;
          }
          ASSERT_EQ(c[row * n + col], static_cast<int32_t>(total))
              << "m=" << m << " row " << row << " col " << col;
        }
      }
    }
  }
}

// ---- int4 ----

std::vector<int32_t> ref_int4(const std::vector<int8_t>& a, const std::vector<int8_t>& w, int64_t m,
                              int64_t k, int64_t n, int workers, int64_t cap) {
  std::vector<int32_t> c(m * n);
  for (int64_t col = 0; col < n; ++col) {
    const int64_t kt = ref_kt(NpuType::kInt4, 256, pad(k, 32), pad(n, 64), workers, col, cap);
    for (int64_t row = 0; row < m; ++row) {
      int32_t total = 0;
      for (int64_t k0 = 0; k0 < k; k0 += kt) {
        int32_t tile = 0;
        for (int64_t kk = k0; kk < std::min(k, k0 + kt); ++kk)
          tile += a[row * k + kk] * w[kk * n + col];
        total += std::clamp(tile, -32768, 32767);
      }
      c[row * n + col] = total;
    }
  }
  return c;
}

TEST(SimNumerics, Int4TilesSaturateAtInt16) {
  const int64_t m = 8, k = 3000, n = 100;  // K -> 3008, N -> 128
  // Same-sign operands make every tile's partial large: 49 * Kt overflows int16 beyond 668.
  auto a = random_int(m * k, 18, 5, 7);
  auto w = random_int(k * n, 19, 4, 7);
  for (int64_t i = 0; i < k * n; i += 7) w[i] = static_cast<int8_t>(-w[i]);
  for (int64_t cap : {int64_t{0}, int64_t{480}}) {
    SimOptions options;
    options.int4_kt_cap = cap;
    SimDevice sim(options);
    auto packed = sim.pack_int4_weight(w.data(), k, n);
    ASSERT_TRUE(packed.is_ok()) << packed.status().to_string();
    std::vector<int32_t> c(m * n);
    ASSERT_TRUE(sim.gemm_int4(a.data(), m, *packed.value(), c.data(), {}).is_ok());
    EXPECT_EQ(c, ref_int4(a, w, m, k, n, 5, cap)) << "kt_cap " << cap;
    HostDevice host({});
    auto exact_w = host.pack_int4_weight(w.data(), k, n);
    ASSERT_TRUE(exact_w.is_ok());
    std::vector<int32_t> exact(m * n);
    ASSERT_TRUE(host.gemm_int4(a.data(), m, *exact_w.value(), exact.data(), {}).is_ok());
    if (cap == 0) {
      EXPECT_NE(c, exact) << "uncapped Kt must saturate on these operands";
    } else {
      EXPECT_EQ(c, exact) << "Kt 480 keeps every tile within int16";
    }
  }
}

TEST(SimNumerics, Int4RefusesValuesOutsideTheContract) {
  SimDevice sim;
  auto w = random_int(64 * 64, 20, -7, 7);
  auto packed = sim.pack_int4_weight(w.data(), 64, 64);
  ASSERT_TRUE(packed.is_ok());
  auto a = random_int(4 * 64, 21, -7, 7);
  a[10] = -8;
  std::vector<int32_t> c(4 * 64);
  Status status = sim.gemm_int4(a.data(), 4, *packed.value(), c.data(), {});
  EXPECT_EQ(status.code(), StatusCode::kUnsupported);
  EXPECT_NE(status.message().find("value -8 at 10 is outside [-7, 7]"), std::string::npos);
  w[3] = 8;
  EXPECT_FALSE(sim.pack_int4_weight(w.data(), 64, 64).is_ok());
}

// ---- group-wise ----

std::vector<float> ref_groupwise(const std::vector<int8_t>& a, const std::vector<float>& as,
                                 const std::vector<int8_t>& w, const std::vector<float>& ws,
                                 int64_t m, int64_t k, int64_t n, int64_t group, bool int4,
                                 int workers) {
  const int64_t groups = k / group;
  std::vector<float> c(m * n);
  for (int64_t col = 0; col < n; ++col) {
    const NpuType t = int4 ? NpuType::kInt4 : NpuType::kInt8;
    const int64_t kt = ref_kt(t, 256, k, pad(n, int4 ? 64 : 32), workers, col, 0, group);
    for (int64_t row = 0; row < m; ++row) {
      float acc = 0.0f;
      for (int64_t g = 0; g < groups; ++g) {
        int64_t partial = 0;
        for (int64_t k0 = g * group; k0 < (g + 1) * group; k0 += kt) {
          int32_t tile = 0;
          for (int64_t kk = k0; kk < k0 + kt; ++kk) tile += a[row * k + kk] * w[kk * n + col];
          partial += int4 ? std::clamp(tile, -32768, 32767) : tile;
        }
        const float scale = as[row * groups + g] * ws[col * groups + g];
        acc = acc + scale * static_cast<float>(partial);
      }
      c[row * n + col] = acc;
    }
  }
  return c;
}

TEST(SimNumerics, GroupwiseInt8AndInt4MatchTheReferenceAndTheHost) {
  const int64_t m = 12, k = 1536, n = 80, group = 768;  // int8: Kt divides 768 -> 384 tiles
  for (bool int4 : {false, true}) {
    const auto a = int4 ? random_int(m * k, 22, -7, 7) : random_int(m * k, 22, -128, 127);
    const auto w = int4 ? random_int(k * n, 23, -7, 7) : random_int(k * n, 23, -128, 127);
    const int64_t g = int4 ? 384 : group;  // int4: 49 * group <= 32767
    const int64_t groups = k / g;
    std::vector<float> as(m * groups), ws(n * groups);
    std::mt19937 rng(24);
    std::uniform_real_distribution<float> scale(1e-4f, 1e-2f);
    for (auto& s : as) s = scale(rng);
    for (auto& s : ws) s = scale(rng);
    const ElementType type = int4 ? ElementType::kInt4 : ElementType::kInt8;
    SimDevice sim;
    auto packed = sim.pack_groupwise_weight(w.data(), k, n, type, g);
    ASSERT_TRUE(packed.is_ok()) << packed.status().to_string();
    std::vector<float> c(m * n);
    ASSERT_TRUE(sim.gemm_groupwise(a.data(), as.data(), m, *packed.value(), ws.data(), c.data(), {})
                    .is_ok());
    EXPECT_EQ(c, ref_groupwise(a, as, w, ws, m, k, n, g, int4, 5)) << "int4=" << int4;
    HostDevice host({});
    auto hp = host.pack_groupwise_weight(w.data(), k, n, type, g);
    ASSERT_TRUE(hp.is_ok());
    std::vector<float> hc(m * n);
    ASSERT_TRUE(
        host.gemm_groupwise(a.data(), as.data(), m, *hp.value(), ws.data(), hc.data(), {}).is_ok());
    EXPECT_EQ(c, hc) << "no tile saturates here, so sim and host agree bit for bit";
  }
  SimDevice sim;
  const auto w = random_int(1344 * 64, 25, -7, 7);
  EXPECT_FALSE(sim.pack_groupwise_weight(w.data(), 1344, 64, ElementType::kInt4, 672).is_ok());
}

}  // namespace
}  // namespace npuflow::sim

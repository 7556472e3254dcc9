// The sim's convolutions (sim/sim_conv.h): the library's contract, bit-identity with the host
// reference, and what the simulated device does around them: the cost it charges, injected
// failures and corruption.
#include "sim/sim_conv.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/fp16.h"
#include "host/host_device.h"
#include "sim/cost_model.h"
#include "sim/sim_device.h"

namespace npuflow {
namespace {

struct Operands {
  std::vector<uint16_t> input, weight, out;
  Fp16Conv2d call;
};

std::vector<uint16_t> halves(size_t count, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<uint16_t> values(count);
  for (uint16_t& value : values) value = float_to_half_bits(dist(rng));
  return values;
}

// A 3x3, pad 1 convolution of ic x 10 x 12 into oc channels (stride 1: the same plane).
Operands operands(int64_t ic, int64_t oc, uint32_t seed) {
  std::mt19937 rng(seed);
  Operands o;
  o.call = Fp16Conv2d{.ic = ic, .ih = 10, .iw = 12, .oc = oc, .kh = 3, .kw = 3};
  o.call.pad_top = o.call.pad_left = 1;
  o.input = halves(static_cast<size_t>(ic * 10 * 12), rng);
  o.weight = halves(static_cast<size_t>(oc * ic * 9), rng);
  o.out.assign(static_cast<size_t>(oc * 10 * 12), 0);
  o.call.input = o.input.data();
  o.call.weight = o.weight.data();
  o.call.out = o.out.data();
  return o;
}

TEST(SimConv, IsBitIdenticalToTheHostReference) {
  Operands on_sim = operands(33, 32, 1), on_host = operands(33, 32, 1);
  sim::SimDevice sim;
  HostDevice host{DeviceOptions{}};
  ASSERT_TRUE(sim.conv2d_fp16(on_sim.call, {}).is_ok());
  ASSERT_TRUE(host.conv2d_fp16(on_host.call, {}).is_ok());
  EXPECT_EQ(on_sim.out, on_host.out);
}

TEST(SimConv, RefusesOutsideTheLibrarysContract) {
  sim::SimDevice sim;
  Operands narrow = operands(16, 20, 2);
  const Status oc = sim.conv2d_fp16(narrow.call, {});
  EXPECT_EQ(oc.code(), StatusCode::kUnsupported);
  EXPECT_EQ(oc.message().rfind("ROCKET_E_SHAPE", 0), 0u) << oc.to_string();

  Operands depthwise = operands(16, 16, 3);
  depthwise.call.depthwise = true;
  const Status group = sim.conv2d_fp16(depthwise.call, {});
  EXPECT_EQ(group.code(), StatusCode::kUnsupported);
  EXPECT_EQ(group.message().rfind("ROCKET_E_SHAPE", 0), 0u) << group.to_string();

  // A transposed pad beyond dil * (k - 1) would crop the lowered input: the plan's -2.
  std::vector<uint16_t> input(16 * 4 * 4), weight(16 * 16 * 9), out(16 * 64 * 64);
  Fp16ConvTranspose2d cropping{.ic = 16, .ih = 4, .iw = 4, .oc = 16, .kh = 3, .kw = 3};
  cropping.stride_y = cropping.stride_x = 2;
  cropping.pad_top = 3;
  cropping.input = input.data();
  cropping.weight = weight.data();
  cropping.out = out.data();
  const Status crop = sim.conv_transpose2d_fp16(cropping, {});
  EXPECT_EQ(crop.code(), StatusCode::kUnsupported);
  EXPECT_EQ(crop.message().rfind("ROCKET_E_TILING", 0), 0u) << crop.to_string();
  // Any OC and IC otherwise (the library pads a transposed convolution's channels itself).
  cropping.pad_top = 2;
  cropping.oc = 5;
  cropping.ic = 3;
  EXPECT_TRUE(sim.conv_transpose2d_fp16(cropping, {}).is_ok());

  const sim::SimProfile p = sim.profile();
  EXPECT_EQ(p.refused, 3);
  EXPECT_EQ(p.calls, 1);
  EXPECT_EQ(p.conv_calls, 1);
}

// rocket_conv2d_plan's CBUF fit: the smallest tile's kernel within one 32 KiB bank (IC padded to
// 32; 32 channels depthwise) and one output pixel's dilated window within 8 banks. Each pair below
// sits on either side of a bound.
TEST(SimConv, RefusesWhatTheSmallestTileCannotFitAsTheLibrarysPlanDoes) {
  sim::SimDevice sim;
  const auto fits = [&](Fp16Conv2d call) {
    std::vector<uint16_t> input(static_cast<size_t>(call.ic * call.ih * call.iw), 0);
    std::vector<uint16_t> weight(
        static_cast<size_t>(call.oc * (call.depthwise ? 1 : call.ic) * call.kh * call.kw), 0);
    std::vector<uint16_t> out(
        static_cast<size_t>(call.oc * conv2d_output_height(call) * conv2d_output_width(call)));
    call.input = input.data();
    call.weight = weight.data();
    call.out = out.data();
    const Status status = sim.conv2d_fp16(call, {});
    if (!status.is_ok()) {
      EXPECT_EQ(status.code(), StatusCode::kUnsupported);
      EXPECT_EQ(status.message().rfind("ROCKET_E_DEVICE", 0), 0u) << status.to_string();
    }
    return status.is_ok();
  };
  // 3x3 over IC padded to 32: 9 x 1792 x 2 bytes fit a bank, 9 x 1824 x 2 do not (1800 pads up).
  Fp16Conv2d direct{.ic = 1792, .ih = 3, .iw = 3, .oc = 16, .kh = 3, .kw = 3};
  EXPECT_TRUE(fits(direct));
  direct.ic = 1800;
  EXPECT_FALSE(fits(direct));
  // A 7x7 kernel over 512 channels (50 KB) does not; over 320 it does.
  Fp16Conv2d wide{.ic = 512, .ih = 7, .iw = 7, .oc = 16, .kh = 7, .kw = 7};
  EXPECT_FALSE(fits(wide));
  wide.ic = 320;
  EXPECT_TRUE(fits(wide));
  // Dilation grows the window, not the kernel: 63 x 63 x 32 x 2 bytes fit 8 banks, 65 x 65 not.
  Fp16Conv2d dilated{.ic = 32, .ih = 2, .iw = 2, .oc = 16, .kh = 3, .kw = 3};
  dilated.dil_y = dilated.dil_x = 31;
  dilated.pad_top = dilated.pad_left = 31;
  EXPECT_TRUE(fits(dilated));
  dilated.dil_y = dilated.dil_x = 32;
  dilated.pad_top = dilated.pad_left = 32;
  EXPECT_FALSE(fits(dilated));
  // Depthwise: a 32-channel group's kernel, 16 x 32 taps fit a bank, 17 x 31 do not, whatever C.
  Fp16Conv2d depthwise{.ic = 64, .ih = 32, .iw = 32, .oc = 64, .kh = 16, .kw = 32};
  depthwise.depthwise = true;
  EXPECT_TRUE(fits(depthwise));
  depthwise.kh = 17;
  depthwise.kw = 31;
  EXPECT_FALSE(fits(depthwise));

  // A transposed call is planned as its stride-1 lowering: the same kernel bound.
  std::vector<uint16_t> input(1800 * 2 * 2), weight(1800 * 16 * 9), out(16 * 5 * 5);
  Fp16ConvTranspose2d transposed{.ic = 1800, .ih = 2, .iw = 2, .oc = 16, .kh = 3, .kw = 3};
  transposed.stride_y = transposed.stride_x = 2;
  transposed.input = input.data();
  transposed.weight = weight.data();
  transposed.out = out.data();
  const Status overflow = sim.conv_transpose2d_fp16(transposed, {});
  EXPECT_EQ(overflow.message().rfind("ROCKET_E_DEVICE", 0), 0u) << overflow.to_string();
  transposed.ic = 1792;
  EXPECT_TRUE(sim.conv_transpose2d_fp16(transposed, {}).is_ok());
}

TEST(SimConv, InjectedFailureLeavesGarbageAndSaysSo) {
  sim::SimOptions options;
  options.fail_every = 1;
  sim::SimDevice sim(options);
  Operands o = operands(16, 16, 4);
  const Status status = sim.conv2d_fp16(o.call, {});
  EXPECT_EQ(status.code(), StatusCode::kDeviceFailure);
  EXPECT_NE(status.message().find("ROCKET_E_DEVICE"), std::string::npos);
  EXPECT_EQ(o.out[0], 0x5a5a);
  EXPECT_EQ(sim.profile().failed, 1);
}

TEST(SimConv, CorruptionMovesOnlyTheFirstElementFarOff) {
  sim::SimOptions options;
  options.corrupt_every = 1;
  sim::SimDevice corrupting(options), clean;
  Operands bad = operands(16, 16, 5), good = operands(16, 16, 5);
  ASSERT_TRUE(corrupting.conv2d_fp16(bad.call, {}).is_ok());
  ASSERT_TRUE(clean.conv2d_fp16(good.call, {}).is_ok());
  EXPECT_GT(std::abs(half_bits_to_float(bad.out[0]) - half_bits_to_float(good.out[0])), 100.0f);
  EXPECT_TRUE(std::equal(bad.out.begin() + 1, bad.out.end(), good.out.begin() + 1));
  EXPECT_EQ(corrupting.profile().corrupted, 1);
}

// A convolution is priced as one unpacked fp16 GEMM: M output pixels, K = IC x KH x KW (KH x KW
// depthwise), N output channels; a transposed one on its upsampled output.
TEST(SimConv, ChargesTheCostModelsConvolution) {
  sim::SimDevice sim;
  Operands o = operands(33, 32, 6);
  ASSERT_TRUE(sim.conv2d_fp16(o.call, {}).is_ok());
  const sim::ConvGemm gemm = sim::conv2d_gemm(o.call);
  EXPECT_EQ(gemm.m, 10 * 12);
  EXPECT_EQ(gemm.k, 33 * 9);
  EXPECT_EQ(gemm.n, 32);
  const sim::CostEstimate cost = sim::CostModel::convolution(gemm.m, gemm.k, gemm.n, 5, true);
  const sim::SimProfile p = sim.profile();
  EXPECT_EQ(p.conv_calls, 1);
  EXPECT_EQ(p.calls, 1);
  EXPECT_EQ(p.submits, cost.jobs);
  EXPECT_EQ(p.bytes_packed, cost.bytes_packed);
  EXPECT_NEAR(p.device_ms, cost.device_us / 1e3, 1e-9);
  EXPECT_GT(p.device_ms, 0.0);
  EXPECT_GT(p.cpu_ms, 0.0);
  EXPECT_NE(sim.profile_report().find("  of the calls, 1 convolution\n"), std::string::npos);
  EXPECT_EQ(sim.profile_report().find("flash attention"), std::string::npos);

  Fp16Conv2d depthwise = o.call;
  depthwise.depthwise = true;
  depthwise.ic = depthwise.oc = 64;
  const sim::ConvGemm dw = sim::conv2d_gemm(depthwise);
  EXPECT_EQ(dw.k, 9);
  EXPECT_EQ(dw.n, 64);

  Fp16ConvTranspose2d transposed{.ic = 8, .ih = 5, .iw = 6, .oc = 20, .kh = 4, .kw = 4};
  transposed.stride_y = transposed.stride_x = 2;
  transposed.pad_top = transposed.pad_left = 1;
  const sim::ConvGemm up = sim::conv_transpose2d_gemm(transposed);
  EXPECT_EQ(up.m,
            conv_transpose2d_output_height(transposed) * conv_transpose2d_output_width(transposed));
  EXPECT_EQ(up.m, 10 * 12);
  EXPECT_EQ(up.k, 8 * 16);
  EXPECT_EQ(up.n, 20);
}

}  // namespace
}  // namespace npuflow

// The ConvTranspose claim (issue #14 item 3): the kernel against ONNX's definition over seeded
// random attributes (asymmetric pads, output padding, dilation, batch), on the host's fp32 path
// and sim's fp16 one; the fallbacks (a failed device call, an input or an output beyond fp16's
// range); and the matcher's claims and refusals.
#include "ops/conv_transpose.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "convolution_test_support.h"
#include "counting_host_device.h"
#include "encoder_test_graph.h"
#include "graph/conv_transpose_matcher.h"
#include "host/host_device.h"
#include "sim/sim_device.h"

namespace npuflow {
namespace {

using encoder_test::Attrs;
using encoder_test::integer;
using encoder_test::ints;
using encoder_test::TestGraph;

using Case = convolution_test::Case<ConvTransposeSpec>;
using convolution_test::pick;
using convolution_test::rel_l2;
using convolution_test::run;

Case random_case(uint32_t seed) {
  std::mt19937 rng(seed);
  Case c;
  ConvTransposeSpec& s = c.spec;
  convolution_test::pick_sizes(s, rng);
  s.pad_top = pick(rng, 0, s.dil_y * (s.kh - 1));
  s.pad_left = pick(rng, 0, s.dil_x * (s.kw - 1));
  s.pad_bottom = s.pad_top + pick(rng, 0, 2);
  s.pad_right = s.pad_left + pick(rng, 0, 2);
  s.opad_y = pick(rng, 0, s.stride_y - 1);
  s.opad_x = pick(rng, 0, s.stride_x - 1);
  c.batch = pick(rng, 1, 2);
  do {
    c.ih = pick(rng, 1, 9);
    c.iw = pick(rng, 1, 9);
  } while (conv_transpose_extent(c.ih, s.stride_y, s.kh, s.dil_y, s.pad_top, s.pad_bottom,
                                 s.opad_y) <= 0 ||
           conv_transpose_extent(c.iw, s.stride_x, s.kw, s.dil_x, s.pad_left, s.pad_right,
                                 s.opad_x) <= 0);
  convolution_test::fill_values(c, rng);
  return c;
}

// ONNX's definition, in double: every input pixel scatters its weighted kernel.
std::vector<double> definition(const Case& c) {
  const ConvTransposeSpec& s = c.spec;
  const int64_t oh =
      conv_transpose_extent(c.ih, s.stride_y, s.kh, s.dil_y, s.pad_top, s.pad_bottom, s.opad_y);
  const int64_t ow =
      conv_transpose_extent(c.iw, s.stride_x, s.kw, s.dil_x, s.pad_left, s.pad_right, s.opad_x);
  std::vector<double> y(static_cast<size_t>(c.batch * s.oc * oh * ow));
  for (int64_t n = 0; n < c.batch; ++n)
    for (int64_t o = 0; o < s.oc; ++o) {
      double* out = y.data() + (n * s.oc + o) * oh * ow;
      std::fill(out, out + oh * ow, c.b[o]);
      for (int64_t ch = 0; ch < s.ic; ++ch)
        for (int64_t r = 0; r < c.ih; ++r)
          for (int64_t q = 0; q < c.iw; ++q)
            for (int64_t i = 0; i < s.kh; ++i)
              for (int64_t j = 0; j < s.kw; ++j) {
                const int64_t oy = r * s.stride_y - s.pad_top + i * s.dil_y;
                const int64_t ox = q * s.stride_x - s.pad_left + j * s.dil_x;
                if (oy < 0 || oy >= oh || ox < 0 || ox >= ow) continue;
                out[oy * ow + ox] += double(c.x[((n * s.ic + ch) * c.ih + r) * c.iw + q]) *
                                     c.w[((ch * s.oc + o) * s.kh + i) * s.kw + j];
              }
    }
  return y;
}

std::unique_ptr<ConvTranspose2d> make(const Case& c, std::shared_ptr<Device> device) {
  return convolution_test::make<ConvTranspose2d>(c, std::move(device));
}

TEST(ConvTranspose2d, HostIsOnnxsDefinitionInFp32AndSimWithinFp16OverRandomAttributes) {
  int gemm_cases = 0, convolution_cases = 0;
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    SCOPED_TRACE(seed);
    const Case c = random_case(seed);
    (conv_transpose_runs_as_gemm(c.spec) ? gemm_cases : convolution_cases)++;
    const std::vector<double> ref = definition(c);
    auto host = make(c, std::make_shared<HostDevice>(DeviceOptions{}));
    const double host_error = rel_l2(ref, run(*host, c));
    EXPECT_LT(host_error, 1e-6);
    EXPECT_EQ(host->counters().host_calls, c.batch);
    auto sim = make(c, std::make_shared<sim::SimDevice>());
    const double sim_error = rel_l2(ref, run(*sim, c));
    EXPECT_LT(sim_error, 2e-3);
    EXPECT_GT(sim_error, host_error);  // fp16 operands: the device ran it
    EXPECT_EQ(sim->counters().device_calls, c.batch);
    EXPECT_EQ(sim->counters().fallback_calls, 0);
  }
  EXPECT_GT(gemm_cases, 5);  // both of the NPU's paths
  EXPECT_GT(convolution_cases, 5);
}

TEST(ConvTranspose2d, AFailedDeviceCallRerunsOnTheHostPath) {
  const Case c = random_case(77);
  sim::SimOptions options;
  options.fail_every = 1;
  auto failing = make(c, std::make_shared<sim::SimDevice>(options));
  auto host = make(c, std::make_shared<HostDevice>(DeviceOptions{}));
  EXPECT_EQ(run(*failing, c), run(*host, c));  // the same fp32 path, bit for bit
  EXPECT_EQ(failing->counters().fallback_calls, c.batch);
  EXPECT_EQ(failing->counters().device_calls, 0);
}

// The calls a device fails rerun on the host reference the session hands in, not on one of the
// kernel's own.
TEST(ConvTranspose2d, TheFallbackRunsOnTheSessionsHostReference) {
  const Case c = random_case(77);
  sim::SimOptions options;
  options.fail_every = 1;
  auto reference = std::make_shared<device_test::CountingHostDevice>();
  auto failing = convolution_test::make<ConvTranspose2d>(
      c, std::make_shared<sim::SimDevice>(options), reference);
  auto host = make(c, std::make_shared<HostDevice>(DeviceOptions{}));
  EXPECT_EQ(run(*failing, c), run(*host, c));
  EXPECT_EQ(failing->counters().fallback_calls, c.batch);
  EXPECT_EQ(reference->float_gemms.load(), c.batch);
}

TEST(ConvTranspose2d, AWeightTheDeviceCannotHoldRunsOnTheHostPath) {
  Case c = random_case(21);
  c.spec.stride_y = 2;  // the GEMM path, whose weight the device holds
  sim::SimOptions options;
  options.iova_bytes_per_fd = 64;  // no weight fits
  auto full = make(c, std::make_shared<sim::SimDevice>(options));
  auto host = make(c, std::make_shared<HostDevice>(DeviceOptions{}));
  EXPECT_EQ(run(*full, c), run(*host, c));
  EXPECT_EQ(full->counters().device_calls, 0);
  EXPECT_EQ(full->counters().fallback_calls, c.batch);
}

TEST(ConvTranspose2d, ValuesFp16CannotHoldRunOnTheHostPath) {
  Case c = random_case(5);
  auto host = make(c, std::make_shared<HostDevice>(DeviceOptions{}));
  // An input beyond fp16's range, in every image.
  for (int64_t n = 0; n < c.batch; ++n) c.x[n * c.spec.ic * c.ih * c.iw] = 1e6f;
  auto sim = make(c, std::make_shared<sim::SimDevice>());
  EXPECT_EQ(run(*sim, c), run(*host, c));
  EXPECT_EQ(sim->counters().device_calls, 0);
  // Operands within range whose products overflow fp16 (60000 x 4). The device's convolution
  // (stride 1) stores fp16: its infinity is caught and the image reruns on the host.
  Case big = c;
  big.spec.stride_y = big.spec.stride_x = 1;
  big.spec.opad_y = big.spec.opad_x = 0;
  std::fill(big.x.begin(), big.x.end(), 60000.0f);
  std::fill(big.w.begin(), big.w.end(), 4.0f);
  ASSERT_FALSE(conv_transpose_runs_as_gemm(big.spec));
  auto big_host = make(big, std::make_shared<HostDevice>(DeviceOptions{}));
  auto big_sim = make(big, std::make_shared<sim::SimDevice>());
  const std::vector<float> y = run(*big_sim, big);
  for (float v : y) ASSERT_TRUE(std::isfinite(v));
  EXPECT_EQ(y, run(*big_host, big));
  EXPECT_EQ(big_sim->counters().device_calls, 0);
  // The GEMM (stride 2) returns fp32 sums of the fp16 products: finite, on the device.
  big.spec.stride_y = big.spec.stride_x = 2;
  ASSERT_TRUE(conv_transpose_runs_as_gemm(big.spec));
  auto gemm_sim = make(big, std::make_shared<sim::SimDevice>());
  const std::vector<float> z = run(*gemm_sim, big);
  EXPECT_LT(rel_l2(definition(big), z), 1e-3);
  EXPECT_EQ(gemm_sim->counters().device_calls, big.batch);
}

TEST(ConvTranspose2d, RejectsInputsOfAnotherShape) {
  const Case c = random_case(3);
  auto op = make(c, std::make_shared<HostDevice>(DeviceOptions{}));
  EXPECT_FALSE(op->output_shape({1, c.spec.ic + 1, 4, 4}).is_ok());
  EXPECT_FALSE(op->output_shape({1, c.spec.ic, 4}).is_ok());
  EXPECT_FALSE(op->output_shape({1, c.spec.ic, 0, 4}).is_ok());
}

struct ConvGraph {
  TestGraph g;
  NodeId node = kNoNode;
};

// x [1, 8, 5, 5] -> ConvTranspose(w [8, 16, 4, 4], b [16], stride 2, pads 1) + `extra` attributes.
void build(ConvGraph& c, Attrs extra = {}, ValueId weight = kNoValue, bool bias = true) {
  const ValueId x = c.g.input({1, 8, 5, 5});
  const ValueId w = weight != kNoValue ? weight : c.g.weight({8, 16, 4, 4}, "w");
  std::vector<ValueId> in = {x, w};
  if (bias) in.push_back(c.g.weight({16}, "b"));
  const Attrs attrs = encoder_test::with_overrides(
      {{"strides", ints({2, 2})}, {"pads", ints({1, 1, 1, 1})}}, extra);
  const ValueId y = c.g.value({1, 16, 10, 10});
  c.node = c.g.node("ConvTranspose", in, {y}, attrs);
  c.g.output(y);
}

TEST(ConvTransposeMatcher, ClaimsAGroupOneFloatNodeWithItsAttributesAndWork) {
  ConvGraph c;
  build(c, {{"output_padding", ints({1, 0})}, {"pads", ints({1, 0, 2, 1})}});
  const ClaimSet set = match_conv_transposes(c.g.graph, {});
  ASSERT_EQ(set.claims.size(), 1u) << (set.refusals.empty() ? "" : set.refusals[0].detail);
  const Claim& claim = set.claims[0];
  EXPECT_EQ(claim.kind, ClaimKind::kConvTranspose);
  EXPECT_EQ(claim.nodes, std::vector<NodeId>{c.node});
  const ConvTransposeSpec& s = claim.conv_transpose.spec;
  EXPECT_EQ((std::vector<int64_t>{s.ic, s.oc, s.kh, s.kw}), (std::vector<int64_t>{8, 16, 4, 4}));
  EXPECT_EQ((std::vector<int64_t>{s.pad_top, s.pad_left, s.pad_bottom, s.pad_right}),
            (std::vector<int64_t>{1, 0, 2, 1}));
  EXPECT_EQ(s.opad_y, 1);
  EXPECT_EQ(claim.conv_transpose.weight, "w");
  EXPECT_EQ(claim.conv_transpose.bias, "b");
  // Stride 2: one fp16 GEMM over the input's 5 x 5 pixels, IC by OC KH KW.
  ASSERT_EQ(claim.work.size(), 1u);
  EXPECT_EQ(claim.work[0].rows, 25);
  EXPECT_EQ(claim.work[0].k, 8);
  EXPECT_EQ(claim.work[0].n, 16 * 16);
  // Stride 1: the device's convolution, one GEMM over the output's pixels:
  // 4 + 3 + 1 - 1 - 2 = 5 rows by 4 + 3 + 1 - 0 - 1 = 7 columns.
  ConvGraph unit;
  build(unit, {{"strides", ints({1, 1})}, {"pads", ints({1, 0, 2, 1})}});
  const ClaimSet stride1 = match_conv_transposes(unit.g.graph, {});
  ASSERT_EQ(stride1.claims.size(), 1u);
  EXPECT_EQ(stride1.claims[0].work[0].rows, 5 * 7);
  EXPECT_EQ(stride1.claims[0].work[0].k, 8 * 16);
  EXPECT_EQ(stride1.claims[0].work[0].n, 16);
  EXPECT_TRUE(match_conv_transposes(c.g.graph, {c.node}).claims.empty());
  // auto_pad VALID: no padding, whatever pads says.
  ConvGraph valid;
  Attribute valid_text;
  valid_text.text = "VALID";
  build(valid, {{"auto_pad", valid_text}});
  const ClaimSet unpadded = match_conv_transposes(valid.g.graph, {});
  ASSERT_EQ(unpadded.claims.size(), 1u);
  const ConvTransposeSpec& v = unpadded.claims[0].conv_transpose.spec;
  EXPECT_EQ((std::vector<int64_t>{v.pad_top, v.pad_left, v.pad_bottom, v.pad_right}),
            (std::vector<int64_t>(4, 0)));
}

TEST(ConvTransposeMatcher, RefusesWhatTheDeviceOrTheRuntimeCannotStandFor) {
  auto refusal = [](Attrs extra, bool weight_input = false, std::vector<int64_t> w_shape = {}) {
    ConvGraph c;
    ValueId w = kNoValue;
    if (weight_input) w = c.g.input({8, 16, 4, 4});
    if (!w_shape.empty()) w = c.g.weight(w_shape);
    build(c, std::move(extra), w, w_shape.empty());
    const ClaimSet set = match_conv_transposes(c.g.graph, {});
    EXPECT_TRUE(set.claims.empty());
    return set.refusals.size() == 1 ? set.refusals[0].reason : std::string("none");
  };
  EXPECT_EQ(refusal({}, true), "weight_not_constant");
  EXPECT_EQ(refusal({{"group", integer(2)}}), "grouped");
  EXPECT_EQ(refusal({{"group", integer(8)}}, false, {8, 1, 4, 4}), "depthwise");
  EXPECT_EQ(refusal({}, false, {8, 16, 4}), "not_2d");
  EXPECT_EQ(refusal({}, false, {8, 16, 2, 2, 2}), "not_2d");
  EXPECT_EQ(refusal({{"pads", ints({4, 1, 4, 1})}}), "device_contract");
  EXPECT_EQ(refusal({{"output_padding", ints({2, 0})}}), "attributes");
  EXPECT_EQ(refusal({{"strides", ints({2, 2, 2})}}), "attributes");
  EXPECT_EQ(refusal({{"output_shape", ints({10, 10})}}), "output_shape");
  EXPECT_EQ(refusal({{"kernel_shape", ints({3, 3})}}), "kernel_shape");
  Attribute same;
  same.text = "SAME_UPPER";
  EXPECT_EQ(refusal({{"auto_pad", same}}), "auto_pad");
  {
    ConvGraph c;
    std::vector<float> w(8 * 16 * 16, 0.1f);
    w[3] = INFINITY;
    build(c, {}, c.g.floats({8, 16, 4, 4}, w));
    const ClaimSet set = match_conv_transposes(c.g.graph, {});
    ASSERT_EQ(set.refusals.size(), 1u);
    EXPECT_EQ(set.refusals[0].reason, "weight_not_finite");
  }
  {
    ConvGraph c;
    const ValueId x = c.g.input({1, 8, 5, 5}, ElementType::kFloat16);
    const ValueId y = c.g.value({1, 16, 10, 10}, ElementType::kFloat16);
    c.g.node("ConvTranspose", {x, c.g.weight({8, 16, 4, 4})}, {y});
    const ClaimSet set = match_conv_transposes(c.g.graph, {});
    ASSERT_EQ(set.refusals.size(), 1u);
    EXPECT_EQ(set.refusals[0].reason, "unsupported_type");
  }
}

TEST(ConvTransposeMatcher, RefusesShapesAndAttributesWhoseArithmeticWouldOverflow) {
  {
    ConvGraph c;
    build(c, {}, c.g.floats({4, (int64_t{1} << 62) + 1, 1, 1}, std::vector<float>(4, 0.1f)), false);
    const ClaimSet set = match_conv_transposes(c.g.graph, {});
    EXPECT_TRUE(set.claims.empty());
    ASSERT_EQ(set.refusals.size(), 1u);
    EXPECT_EQ(set.refusals[0].reason, "weight_shape");
  }
  const int64_t huge = int64_t{1} << 40;
  for (const Attrs& attrs : std::vector<Attrs>{{{"pads", ints({1, huge, 1, 1})}},
                                               {{"strides", ints({huge, huge})}},
                                               {{"dilations", ints({2, huge})}}}) {
    ConvGraph c;
    build(c, attrs);
    const ClaimSet set = match_conv_transposes(c.g.graph, {});
    EXPECT_TRUE(set.claims.empty());
    ASSERT_EQ(set.refusals.size(), 1u);
    EXPECT_EQ(set.refusals[0].reason, "attributes") << set.refusals[0].detail;
  }
  ConvTransposeSpec spec;
  spec.ic = spec.oc = 8;
  spec.kh = spec.kw = 4;
  spec.stride_y = spec.stride_x = 2;
  EXPECT_TRUE(check_conv_transpose_spec(spec).is_ok());
  ConvTransposeSpec tall_kernel = spec;
  tall_kernel.kh = kMaxConvolutionWindow + 1;
  EXPECT_FALSE(check_conv_transpose_spec(tall_kernel).is_ok());
  ConvTransposeSpec negative_opad = spec;
  negative_opad.opad_x = -1;
  EXPECT_FALSE(check_conv_transpose_spec(negative_opad).is_ok());
}

}  // namespace
}  // namespace npuflow

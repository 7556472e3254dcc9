// The Conv claim (issue #14: SAM's neck, RF-DETR's projector): the kernel against ONNX's
// definition over seeded random attributes (asymmetric pads, strides, dilation, output channels off
// the device's group of 16, batch), on the host's fp32 path and sim's fp16 one; the fallbacks (a
// failed device call, an input or an output beyond fp16's range); the matcher's claims and
// refusals.
#include "ops/conv2d.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "convolution_test_support.h"
#include "encoder_test_graph.h"
#include "graph/conv_matcher.h"
#include "host/host_device.h"
#include "sim/sim_device.h"

namespace npuflow {
namespace {

using encoder_test::Attrs;
using encoder_test::integer;
using encoder_test::ints;
using encoder_test::TestGraph;

using Case = convolution_test::Case<ConvSpec>;
using convolution_test::pick;
using convolution_test::rel_l2;
using convolution_test::run;

Case random_case(uint32_t seed) {
  std::mt19937 rng(seed);
  Case c;
  ConvSpec& s = c.spec;
  convolution_test::pick_sizes(s, rng);
  s.pad_top = pick(rng, 0, 3);
  s.pad_left = pick(rng, 0, 3);
  // Half the cases symmetric (the device pads), half not (written into the input).
  const bool symmetric = pick(rng, 0, 1) == 0;
  s.pad_bottom = symmetric ? s.pad_top : pick(rng, 0, 3);
  s.pad_right = symmetric ? s.pad_left : pick(rng, 0, 3);
  c.batch = pick(rng, 1, 2);
  do {
    c.ih = pick(rng, 1, 12);
    c.iw = pick(rng, 1, 12);
  } while (conv_extent(c.ih, s.stride_y, s.kh, s.dil_y, s.pad_top, s.pad_bottom) <= 0 ||
           conv_extent(c.iw, s.stride_x, s.kw, s.dil_x, s.pad_left, s.pad_right) <= 0);
  convolution_test::fill_values(c, rng);
  return c;
}

// ONNX's definition, in double: each output sums the kernel's taps over the zero-padded input.
std::vector<double> definition(const Case& c) {
  const ConvSpec& s = c.spec;
  const int64_t oh = conv_extent(c.ih, s.stride_y, s.kh, s.dil_y, s.pad_top, s.pad_bottom);
  const int64_t ow = conv_extent(c.iw, s.stride_x, s.kw, s.dil_x, s.pad_left, s.pad_right);
  std::vector<double> y(static_cast<size_t>(c.batch * s.oc * oh * ow));
  for (int64_t n = 0; n < c.batch; ++n)
    for (int64_t o = 0; o < s.oc; ++o)
      for (int64_t r = 0; r < oh; ++r)
        for (int64_t q = 0; q < ow; ++q) {
          double sum = c.b[o];
          for (int64_t ch = 0; ch < s.ic; ++ch)
            for (int64_t i = 0; i < s.kh; ++i)
              for (int64_t j = 0; j < s.kw; ++j) {
                const int64_t iy = r * s.stride_y - s.pad_top + i * s.dil_y;
                const int64_t ix = q * s.stride_x - s.pad_left + j * s.dil_x;
                if (iy < 0 || iy >= c.ih || ix < 0 || ix >= c.iw) continue;
                sum += double(c.x[((n * s.ic + ch) * c.ih + iy) * c.iw + ix]) *
                       c.w[((o * s.ic + ch) * s.kh + i) * s.kw + j];
              }
          y[((n * s.oc + o) * oh + r) * ow + q] = sum;
        }
  return y;
}

std::unique_ptr<Conv2d> make(const Case& c, std::shared_ptr<Device> device) {
  return convolution_test::make<Conv2d>(c, std::move(device));
}

TEST(Conv2d, HostIsOnnxsDefinitionInFp32AndSimWithinFp16OverRandomAttributes) {
  int asymmetric = 0, off_group = 0, rounded = 0;
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    SCOPED_TRACE(seed);
    const Case c = random_case(seed);
    const ConvSpec& s = c.spec;
    asymmetric += s.pad_top != s.pad_bottom || s.pad_left != s.pad_right;
    off_group += s.oc % 16 != 0;
    const std::vector<double> ref = definition(c);
    auto host = make(c, std::make_shared<HostDevice>(DeviceOptions{}));
    const double host_error = rel_l2(ref, run(*host, c));
    EXPECT_LT(host_error, 1e-6);
    EXPECT_EQ(host->counters().host_calls, c.batch);
    auto sim = make(c, std::make_shared<sim::SimDevice>());
    const double sim_error = rel_l2(ref, run(*sim, c));
    EXPECT_LT(sim_error, 2e-3);
    EXPECT_GE(sim_error, host_error);
    rounded += sim_error > host_error;
    EXPECT_EQ(sim->counters().device_calls, c.batch);
    EXPECT_EQ(sim->counters().fallback_calls, 0);
  }
  // fp16 operands: the device ran them (exact only where every output reads padding alone).
  EXPECT_GE(rounded, 35);
  EXPECT_GT(asymmetric, 5);  // both ways of padding
  EXPECT_GT(off_group, 5);   // output channels the device's group does not divide
}

// The host path cuts an image into bands of output rows (host/onednn_convolution.h), each over
// the input rows it reads, the image's pads where a band meets an edge: a tall image with
// asymmetric pads, stride and dilation against ONNX's definition, and pads wider than the
// kernel, where an edge band would read no input row and the image runs as one band.
TEST(Conv2d, TheHostPathsBandsAreOnnxsDefinition) {
  auto image = [](ConvSpec spec, int64_t ih, int64_t iw, uint32_t seed) {
    Case c;
    c.spec = spec;
    c.ih = ih;
    c.iw = iw;
    std::mt19937 rng(seed);
    convolution_test::fill_values(c, rng);
    return c;
  };
  ConvSpec tall;
  tall.ic = 24;
  tall.oc = 40;
  tall.kh = 5;
  tall.kw = 3;
  tall.stride_y = 2;
  tall.dil_y = 2;
  tall.pad_top = 3;
  tall.pad_bottom = 1;
  tall.pad_left = 2;
  ConvSpec wide_pads;
  wide_pads.ic = 4;
  wide_pads.oc = 8;
  wide_pads.kh = wide_pads.kw = 1;
  wide_pads.pad_top = wide_pads.pad_bottom = 5;
  for (const Case& c : {image(tall, 97, 23, 9), image(wide_pads, 12, 6, 10)}) {
    auto host = make(c, std::make_shared<HostDevice>(DeviceOptions{}));
    EXPECT_LT(rel_l2(definition(c), run(*host, c)), 1e-6);
    // A second input size through the same kernel: a plan of its own, over the weight the first
    // plan reordered (the sharing itself is not observable here; the result must not change).
    Case other = image(c.spec, c.ih + 7, c.iw + 3, 11);
    other.w = c.w;
    other.b = c.b;
    EXPECT_LT(rel_l2(definition(other), run(*host, other)), 1e-6);
  }
}

TEST(Conv2d, AFailedDeviceCallRerunsOnTheHostPath) {
  const Case c = random_case(77);
  sim::SimOptions options;
  options.fail_every = 1;
  auto failing = make(c, std::make_shared<sim::SimDevice>(options));
  auto host = make(c, std::make_shared<HostDevice>(DeviceOptions{}));
  EXPECT_EQ(run(*failing, c), run(*host, c));  // the same fp32 path, bit for bit
  EXPECT_EQ(failing->counters().fallback_calls, c.batch);
  EXPECT_EQ(failing->counters().device_calls, 0);
}

TEST(Conv2d, ValuesFp16CannotHoldRunOnTheHostPath) {
  Case c = random_case(5);
  auto host = make(c, std::make_shared<HostDevice>(DeviceOptions{}));
  for (int64_t n = 0; n < c.batch; ++n) c.x[n * c.spec.ic * c.ih * c.iw] = 1e6f;
  auto sim = make(c, std::make_shared<sim::SimDevice>());
  EXPECT_EQ(run(*sim, c), run(*host, c));
  EXPECT_EQ(sim->counters().device_calls, 0);
  // Operands within range whose sums overflow fp16's store (60000 x 4): the infinity is caught and
  // the image reruns on the host.
  Case big = c;
  std::fill(big.x.begin(), big.x.end(), 60000.0f);
  std::fill(big.w.begin(), big.w.end(), 4.0f);
  auto big_host = make(big, std::make_shared<HostDevice>(DeviceOptions{}));
  auto big_sim = make(big, std::make_shared<sim::SimDevice>());
  const std::vector<float> y = run(*big_sim, big);
  for (float v : y) ASSERT_TRUE(std::isfinite(v));
  EXPECT_EQ(y, run(*big_host, big));
  EXPECT_EQ(big_sim->counters().device_calls, 0);
  // A weight beyond fp16's range: every image on the host from the start.
  Case wide = random_case(6);
  wide.w[0] = 1e6f;
  auto wide_sim = make(wide, std::make_shared<sim::SimDevice>());
  auto wide_host = make(wide, std::make_shared<HostDevice>(DeviceOptions{}));
  EXPECT_EQ(run(*wide_sim, wide), run(*wide_host, wide));
  EXPECT_EQ(wide_sim->counters().device_calls, 0);
}

TEST(Conv2d, RejectsInputsOfAnotherShapeAndEmptyOutputs) {
  Case c = random_case(3);
  c.spec.kh = 3;
  c.spec.pad_top = c.spec.pad_bottom = 0;
  c.spec.dil_y = 1;
  c.w.resize(static_cast<size_t>(c.spec.oc * c.spec.ic * 3 * c.spec.kw));
  auto op = make(c, std::make_shared<HostDevice>(DeviceOptions{}));
  EXPECT_FALSE(op->output_shape({1, c.spec.ic + 1, 4, 4}).is_ok());
  EXPECT_FALSE(op->output_shape({1, c.spec.ic, 4}).is_ok());
  EXPECT_FALSE(op->output_shape({1, c.spec.ic, 0, 4}).is_ok());
  EXPECT_FALSE(op->output_shape({1, c.spec.ic, 2, 8}).is_ok());  // 2 rows under a 3-row kernel
}

struct ConvGraph {
  TestGraph g;
  NodeId node = kNoNode;
};

// x [1, 8, 9, 9] -> Conv(w [24, 8, 3, 3], b [24], stride 2, pads 1) + `extra` attributes.
void build(ConvGraph& c, Attrs extra = {}, ValueId weight = kNoValue, bool bias = true) {
  const ValueId x = c.g.input({1, 8, 9, 9});
  const ValueId w = weight != kNoValue ? weight : c.g.weight({24, 8, 3, 3}, "w");
  std::vector<ValueId> in = {x, w};
  if (bias) in.push_back(c.g.weight({24}, "b"));
  const Attrs attrs = encoder_test::with_overrides(
      {{"strides", ints({2, 2})}, {"pads", ints({1, 1, 1, 1})}}, extra);
  const ValueId y = c.g.value({1, 24, 5, 5});
  c.node = c.g.node("Conv", in, {y}, attrs);
  c.g.output(y);
}

TEST(ConvMatcher, ClaimsAGroupOneFloatNodeWithItsAttributesAndWork) {
  ConvGraph c;
  build(c, {{"pads", ints({1, 0, 2, 1})}, {"dilations", ints({1, 2})}});
  const ClaimSet set = match_convs(c.g.graph, {});
  ASSERT_EQ(set.claims.size(), 1u) << (set.refusals.empty() ? "" : set.refusals[0].detail);
  const Claim& claim = set.claims[0];
  EXPECT_EQ(claim.kind, ClaimKind::kConv);
  EXPECT_EQ(claim.nodes, std::vector<NodeId>{c.node});
  const ConvSpec& s = claim.conv.spec;
  EXPECT_EQ((std::vector<int64_t>{s.oc, s.ic, s.kh, s.kw}), (std::vector<int64_t>{24, 8, 3, 3}));
  EXPECT_EQ((std::vector<int64_t>{s.pad_top, s.pad_left, s.pad_bottom, s.pad_right}),
            (std::vector<int64_t>{1, 0, 2, 1}));
  EXPECT_EQ(s.dil_x, 2);
  EXPECT_EQ(claim.conv.weight, "w");
  EXPECT_EQ(claim.conv.bias, "b");
  // One fp16 GEMM over the output's pixels: (9 + 3 - 2 - 1) / 2 + 1 = 5 rows by
  // (9 + 1 - 4 - 1) / 2 + 1 = 3 columns, IC KH KW taps, OC padded to the device's 16.
  ASSERT_EQ(claim.work.size(), 1u);
  EXPECT_EQ(claim.work[0].rows, 5 * 3);
  EXPECT_EQ(claim.work[0].k, 8 * 9);
  EXPECT_EQ(claim.work[0].n, 32);
  EXPECT_TRUE(match_convs(c.g.graph, {c.node}).claims.empty());
  ConvGraph valid;
  Attribute valid_text;
  valid_text.text = "VALID";
  build(valid, {{"auto_pad", valid_text}});
  const ClaimSet unpadded = match_convs(valid.g.graph, {});
  ASSERT_EQ(unpadded.claims.size(), 1u);
  const ConvSpec& v = unpadded.claims[0].conv.spec;
  EXPECT_EQ((std::vector<int64_t>{v.pad_top, v.pad_left, v.pad_bottom, v.pad_right}),
            (std::vector<int64_t>(4, 0)));
}

TEST(ConvMatcher, RefusesWhatTheDeviceOrTheRuntimeCannotStandFor) {
  auto refusal = [](Attrs extra, bool weight_input = false, std::vector<int64_t> w_shape = {}) {
    ConvGraph c;
    ValueId w = kNoValue;
    if (weight_input) w = c.g.input({24, 8, 3, 3});
    if (!w_shape.empty()) w = c.g.weight(w_shape);
    build(c, std::move(extra), w, w_shape.empty());
    const ClaimSet set = match_convs(c.g.graph, {});
    EXPECT_TRUE(set.claims.empty());
    return set.refusals.size() == 1 ? set.refusals[0].reason : std::string("none");
  };
  EXPECT_EQ(refusal({}, true), "weight_not_constant");
  EXPECT_EQ(refusal({{"group", integer(2)}}, false, {24, 4, 3, 3}), "grouped");
  EXPECT_EQ(refusal({{"group", integer(8)}}, false, {8, 1, 3, 3}), "depthwise");
  EXPECT_EQ(refusal({}, false, {24, 8, 3}), "not_2d");
  EXPECT_EQ(refusal({}, false, {24, 8, 3, 3, 3}), "not_2d");
  EXPECT_EQ(refusal({}, false, {24, 6, 3, 3}), "input_shape");
  EXPECT_EQ(refusal({{"strides", ints({0, 2})}}), "attributes");
  EXPECT_EQ(refusal({{"pads", ints({1, 1})}}), "attributes");
  EXPECT_EQ(refusal({{"kernel_shape", ints({5, 5})}}), "kernel_shape");
  Attribute same;
  same.text = "SAME_LOWER";
  EXPECT_EQ(refusal({{"auto_pad", same}}), "auto_pad");
  {
    ConvGraph c;
    std::vector<float> w(24 * 8 * 9, 0.1f);
    w[3] = NAN;
    build(c, {}, c.g.floats({24, 8, 3, 3}, w));
    const ClaimSet set = match_convs(c.g.graph, {});
    ASSERT_EQ(set.refusals.size(), 1u);
    EXPECT_EQ(set.refusals[0].reason, "weight_not_finite");
  }
  {
    ConvGraph c;
    const ValueId x = c.g.input({1, 8, 9, 9}, ElementType::kFloat16);
    const ValueId y = c.g.value({1, 24, 7, 7}, ElementType::kFloat16);
    c.g.node("Conv", {x, c.g.weight({24, 8, 3, 3})}, {y});
    const ClaimSet set = match_convs(c.g.graph, {});
    ASSERT_EQ(set.refusals.size(), 1u);
    EXPECT_EQ(set.refusals[0].reason, "unsupported_type");
  }
}

// A model's shapes and attributes are untrusted: none may drive the shape arithmetic past int64.
TEST(ConvMatcher, RefusesShapesAndAttributesWhoseArithmeticWouldOverflow) {
  EXPECT_EQ(element_count({int64_t{1} << 31, int64_t{1} << 31}), int64_t{1} << 62);
  EXPECT_EQ(element_count({int64_t{1} << 62, 4}), -1);
  {
    // Dims whose product wraps around int64 to exactly the 4 values stored.
    ConvGraph c;
    build(c, {}, c.g.floats({(int64_t{1} << 62) + 1, 4, 1, 1}, std::vector<float>(4, 0.1f)), false);
    const ClaimSet set = match_convs(c.g.graph, {});
    EXPECT_TRUE(set.claims.empty());
    ASSERT_EQ(set.refusals.size(), 1u);
    EXPECT_EQ(set.refusals[0].reason, "weight_shape");
  }
  const int64_t huge = int64_t{1} << 40;
  for (const Attrs& attrs : std::vector<Attrs>{{{"pads", ints({1, huge, 1, 1})}},
                                               {{"strides", ints({2, huge})}},
                                               {{"dilations", ints({huge, 1})}},
                                               {{"pads", ints({1, 1, INT64_MAX, 1})}}}) {
    ConvGraph c;
    build(c, attrs);
    const ClaimSet set = match_convs(c.g.graph, {});
    EXPECT_TRUE(set.claims.empty());
    ASSERT_EQ(set.refusals.size(), 1u);
    EXPECT_EQ(set.refusals[0].reason, "attributes") << set.refusals[0].detail;
  }
  ConvSpec spec;
  spec.ic = spec.oc = 8;
  spec.kh = spec.kw = 3;
  EXPECT_TRUE(check_conv_spec(spec).is_ok());
  ConvSpec wide_kernel = spec;
  wide_kernel.kw = kMaxConvolutionWindow + 1;
  EXPECT_FALSE(check_conv_spec(wide_kernel).is_ok());
  ConvSpec many_channels = spec;
  many_channels.ic = kMaxConvolutionChannels + 1;
  EXPECT_FALSE(check_conv_spec(many_channels).is_ok());
  ConvSpec big_weight = spec;  // each size within its bound, their product past the weight's
  big_weight.ic = big_weight.oc = kMaxConvolutionChannels;
  EXPECT_FALSE(check_conv_spec(big_weight).is_ok());
}

}  // namespace
}  // namespace npuflow

// The vision-encoder plan against a plain reference written out here: pre- and post-LN blocks,
// LayerScale, every activation, and token counts that need zero-row padding.
#include "ops/vit_encoder.h"

#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <random>
#include <string>

#include "core/strings.h"
#include "counting_host_device.h"
#include "host/host_device.h"
#include "sim/sim_device.h"

namespace npuflow {
namespace {

struct Tensor {
  std::vector<float> data;
  std::vector<int64_t> shape;
  FloatRef ref() const { return {data.data(), shape}; }
};

Tensor random(std::vector<int64_t> shape, std::mt19937& rng, float scale, float offset = 0) {
  std::normal_distribution<float> dist(0.0f, scale);
  Tensor t{{}, shape};
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  for (int64_t i = 0; i < n; ++i) t.data.push_back(offset + dist(rng));
  return t;
}

using Mat = std::vector<float>;  // row-major T x C

Mat linear(const Mat& x, int64_t t, const Tensor& w, const Tensor& b) {
  const int64_t k = w.shape[0], n = w.shape[1];
  Mat y(static_cast<size_t>(t * n));
  for (int64_t r = 0; r < t; ++r)
    for (int64_t c = 0; c < n; ++c) {
      double s = b.data[static_cast<size_t>(c)];
      for (int64_t i = 0; i < k; ++i) s += double(x[r * k + i]) * w.data[i * n + c];
      y[r * n + c] = static_cast<float>(s);
    }
  return y;
}

Mat layer_norm(const Mat& x, int64_t t, int64_t d, const Tensor& g, const Tensor& b) {
  Mat y(x.size());
  for (int64_t r = 0; r < t; ++r) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < d; ++i) mean += x[r * d + i];
    mean /= d;
    for (int64_t i = 0; i < d; ++i) var += (x[r * d + i] - mean) * (x[r * d + i] - mean);
    var /= d;
    for (int64_t i = 0; i < d; ++i)
      y[r * d + i] =
          static_cast<float>((x[r * d + i] - mean) / std::sqrt(var + 1e-6) * g.data[i] + b.data[i]);
  }
  return y;
}

float act(EncoderActivation a, float x) {
  if (a == EncoderActivation::kGeluErf) return 0.5f * x * (1 + std::erf(x / std::sqrt(2.0f)));
  if (a == EncoderActivation::kGeluTanh)
    return 0.5f * x * (1 + std::tanh(std::sqrt(2.0f / 3.14159265f) * (x + 0.044715f * x * x * x)));
  return x / (1 + std::exp(-1.702f * x));
}

double cosine(const Mat& a, const float* b) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ab += double(a[i]) * b[i];
    aa += double(a[i]) * a[i];
    bb += double(b[i]) * b[i];
  }
  return ab / std::sqrt(aa * bb);
}

// A spec whose plan starts at the residual stream ([B, T, D] input).
VitEncoderSpec stream_spec(int64_t hidden, int64_t heads) {
  VitEncoderSpec spec;
  spec.hidden = hidden;
  spec.heads = heads;
  spec.from_pixels = false;
  return spec;
}

struct CheckOptions {
  float scale_over_nominal = 1.0f;  // the attention scale in units of 1/sqrt(head_dim)
  std::shared_ptr<Device> device;   // host when null
  std::shared_ptr<Device> host;     // the host reference handed to create()
  double min_cosine = 0.999999;
  double abs_tolerance = 1e-3;
  std::vector<std::string>* warnings = nullptr;
  int64_t hidden = 32, heads = 4;
  std::optional<int64_t> device_attention_min_tokens;  // VitEncoderSpec's
};

void check(bool pre_norm, EncoderActivation activation, int64_t tokens, bool layer_scale,
           const CheckOptions& options = {}) {
  const int64_t d = options.hidden, heads = options.heads, ff = 64, dh = d / heads;
  std::mt19937 rng(7);
  struct W {
    Tensor g1, b1, g2, b2, wq, bq, wk, bk, wv, bv, wo, bo, w1, b1f, w2, b2f, ls1, ls2;
  } w{random({d}, rng, 0.1f, 1),  random({d}, rng, 0.1f),       random({d}, rng, 0.1f, 1),
      random({d}, rng, 0.1f),     random({d, d}, rng, 0.2f),    random({d}, rng, 0.1f),
      random({d, d}, rng, 0.2f),  random({d}, rng, 0.1f),       random({d, d}, rng, 0.2f),
      random({d}, rng, 0.1f),     random({d, d}, rng, 0.2f),    random({d}, rng, 0.1f),
      random({d, ff}, rng, 0.2f), random({ff}, rng, 0.1f),      random({ff, d}, rng, 0.2f),
      random({d}, rng, 0.1f),     random({d}, rng, 0.3f, 0.5f), random({d}, rng, 0.3f, 0.5f)};
  const Tensor x = random({1, tokens, d}, rng, 1.0f);

  VitEncoderSpec spec;
  spec.hidden = d;
  spec.heads = heads;
  spec.from_pixels = false;
  EncoderLayerWeights l;
  l.pre_norm = pre_norm;
  l.norm1 = {w.g1.ref(), w.b1.ref(), 1e-6f};
  l.norm2 = {w.g2.ref(), w.b2.ref(), 1e-6f};
  l.q = {w.wq.ref(), false, w.bq.ref()};
  l.k = {w.wk.ref(), false, w.bk.ref()};
  l.v = {w.wv.ref(), false, w.bv.ref()};
  l.o = {w.wo.ref(), false, w.bo.ref()};
  l.fc1 = {w.w1.ref(), false, w.b1f.ref()};
  l.fc2 = {w.w2.ref(), false, w.b2f.ref()};
  if (layer_scale) {
    l.layer_scale1 = w.ls1.ref();
    l.layer_scale2 = w.ls2.ref();
  }
  l.attention_scale = options.scale_over_nominal / std::sqrt(float(dh));
  l.activation = activation;
  spec.layers = {l};
  spec.exits = {{1, -1}};
  spec.device_attention_min_tokens = options.device_attention_min_tokens;
  std::shared_ptr<Device> device =
      options.device ? options.device : std::make_shared<HostDevice>(DeviceOptions{});
  Logger logger(LogLevel::kWarning, [&](LogLevel, const std::string& message) {
    if (options.warnings) options.warnings->push_back(message);
  });
  auto plan = VitEncoder::create("test", spec, device, logger, options.host);
  ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
  std::vector<float> out(static_cast<size_t>(tokens * d), -7.0f);
  ASSERT_TRUE(plan.value()->run({x.data.data(), x.shape}, {}, {out.data()}, ExecContext{}).is_ok());

  // Reference.
  Mat h = x.data;
  Mat a = pre_norm ? layer_norm(h, tokens, d, w.g1, w.b1) : h;
  Mat q = linear(a, tokens, w.wq, w.bq), k = linear(a, tokens, w.wk, w.bk),
      v = linear(a, tokens, w.wv, w.bv);
  Mat ctx(static_cast<size_t>(tokens * d), 0.0f);
  for (int64_t hh = 0; hh < heads; ++hh)
    for (int64_t i = 0; i < tokens; ++i) {
      std::vector<double> s(static_cast<size_t>(tokens));
      double mx = -1e30, sum = 0;
      for (int64_t j = 0; j < tokens; ++j) {
        double dot = 0;
        for (int64_t c = 0; c < dh; ++c) dot += q[i * d + hh * dh + c] * k[j * d + hh * dh + c];
        s[j] = dot * l.attention_scale;
        mx = std::max(mx, s[j]);
      }
      for (auto& e : s) sum += (e = std::exp(e - mx));
      for (int64_t j = 0; j < tokens; ++j)
        for (int64_t c = 0; c < dh; ++c)
          ctx[i * d + hh * dh + c] += float(s[j] / sum) * v[j * d + hh * dh + c];
    }
  Mat o = linear(ctx, tokens, w.wo, w.bo);
  for (int64_t i = 0; i < tokens * d; ++i) h[i] += o[i] * (layer_scale ? w.ls1.data[i % d] : 1.0f);
  if (!pre_norm) h = layer_norm(h, tokens, d, w.g1, w.b1);
  Mat m = pre_norm ? layer_norm(h, tokens, d, w.g2, w.b2) : h;
  Mat f = linear(m, tokens, w.w1, w.b1f);
  for (auto& e : f) e = act(activation, e);
  Mat f2 = linear(f, tokens, w.w2, w.b2f);
  for (int64_t i = 0; i < tokens * d; ++i) h[i] += f2[i] * (layer_scale ? w.ls2.data[i % d] : 1.0f);
  if (!pre_norm) h = layer_norm(h, tokens, d, w.g2, w.b2);
  EXPECT_GE(cosine(h, out.data()), options.min_cosine);
  for (size_t i = 0; i < h.size(); ++i) ASSERT_NEAR(out[i], h[i], options.abs_tolerance) << i;
}

TEST(VitEncoder, PreNormGeluErfPaddedTokens) {
  check(true, EncoderActivation::kGeluErf, 17, false);
}
TEST(VitEncoder, PreNormLayerScaleGeluTanh) {
  check(true, EncoderActivation::kGeluTanh, 25, true);
}
TEST(VitEncoder, PostNormQuickGelu) {
  check(false, EncoderActivation::kQuickGelu, 6, false);
}
TEST(VitEncoder, AlignedTokenCount) {
  check(true, EncoderActivation::kQuickGelu, 16, true);
}

// The embedding alone (no layers, the exit is stream 0): patches, class token, position
// embedding, then the register rows inserted after `position` tokens.
void check_registers(int64_t position) {
  std::mt19937 rng(11);
  const int64_t d = 4, channels = 2, side = 2, patches = side * side, registers = 2;
  const Tensor weight = random({d, channels, 1, 1}, rng, 1.0f), bias = random({d}, rng, 0.5f);
  const Tensor cls = random({1, 1, d}, rng, 1.0f), pos = random({1, 1 + patches, d}, rng, 1.0f);
  const Tensor regs = random({1, registers, d}, rng, 1.0f);
  const Tensor image = random({1, channels, side, side}, rng, 1.0f);
  VitEncoderSpec spec;
  spec.hidden = d;
  spec.heads = 1;
  spec.patch = {weight.ref(), bias.ref(), 1, 1};
  spec.cls = {true, cls.ref(), -1};
  spec.pos = {true, pos.ref(), -1};
  spec.registers = {true, regs.ref(), -1};
  spec.register_position = position;
  spec.exits = {{0, -1}};
  auto plan = VitEncoder::create("registers", spec, std::make_shared<HostDevice>(DeviceOptions{}),
                                 Logger());
  ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
  const int64_t tokens = 1 + patches + registers;
  auto shape = plan.value()->output_shape({image.data.data(), image.shape}, {});
  ASSERT_TRUE(shape.is_ok());
  EXPECT_EQ(shape.value(), (std::vector<int64_t>{1, tokens, d}));
  std::vector<float> out(static_cast<size_t>(tokens * d), -7.0f);
  ASSERT_TRUE(
      plan.value()->run({image.data.data(), image.shape}, {}, {out.data()}, ExecContext{}).is_ok());

  Mat embedded;  // (1 + patches) x d
  for (int64_t t = 0; t <= patches; ++t)
    for (int64_t c = 0; c < d; ++c) {
      double x = t == 0 ? cls.data[c] : bias.data[c];
      for (int64_t ch = 0; t > 0 && ch < channels; ++ch)
        x += double(weight.data[c * channels + ch]) * image.data[ch * patches + (t - 1)];
      embedded.push_back(static_cast<float>(x + pos.data[t * d + c]));
    }
  Mat want(embedded.begin(), embedded.begin() + position * d);
  want.insert(want.end(), regs.data.begin(), regs.data.end());
  want.insert(want.end(), embedded.begin() + position * d, embedded.end());
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(out[i], want[i], 1e-5) << i;
}

TEST(VitEncoder, RegistersAfterTheClassToken) {
  check_registers(1);
}
TEST(VitEncoder, RegistersFirst) {
  check_registers(0);
}
TEST(VitEncoder, RegistersLast) {
  check_registers(5);
}

// The sim rounds projections to fp16. At the usual scale that is noise the gate absorbs; at a
// scale many times larger the rounding of q and k moves a sharp softmax (64x and 1000x: max
// error 0.017 and 0.13 with fp16 q/k), so those projections stay exact on the host (0.0025), with
// one warning that says why and no refusal report. 70000 is the fuzz mutant's scale.
TEST(VitEncoder, Fp16DeviceKeepsQkExactUnderAHugeAttentionScale) {
  for (float over : {1.0f, 64.0f, 1000.0f, 70000.0f * std::sqrt(8.0f)}) {
    SCOPED_TRACE(over);
    std::vector<std::string> warnings;
    CheckOptions options;
    options.scale_over_nominal = over;
    options.device = std::make_shared<sim::SimDevice>();
    options.min_cosine = 0.99999;
    options.abs_tolerance = 5e-3;
    options.warnings = &warnings;
    check(true, EncoderActivation::kGeluErf, 24, false, options);
    if (over > 16.0f) {
      ASSERT_EQ(warnings.size(), 1u);
      EXPECT_NE(
          warnings.front().find("through layer 0's q/k/v stay on the host (the attention scale"),
          std::string::npos)
          << warnings.front();
    } else {
      EXPECT_TRUE(warnings.empty()) << warnings.front();
    }
  }
}

// Two heads of 32 (flash attention's contract) on `sim`, attention on it from `min_tokens`.
CheckOptions head_dim_32_on(std::shared_ptr<sim::SimDevice> sim, int64_t min_tokens) {
  CheckOptions options;
  options.device = std::move(sim);
  options.hidden = 64;
  options.heads = 2;
  options.device_attention_min_tokens = min_tokens;
  options.min_cosine = 0.99999;
  options.abs_tolerance = 2e-2;  // outputs reach |5|, where one fp16 ulp is 0.004
  return options;
}

// Attention on the device (librocketnpu's flash attention on the sim: fp16 scores, P rounded to
// fp16 twice) stays within the fp16 encoder gate, and the sim counts one attention call per layer
// and image.
TEST(VitEncoder, AttentionRunsOnTheSimWithinTheGate) {
  for (int64_t tokens : {24, 37}) {
    SCOPED_TRACE(tokens);
    std::vector<std::string> warnings;
    auto sim = std::make_shared<sim::SimDevice>();
    CheckOptions options = head_dim_32_on(sim, 1);
    options.warnings = &warnings;
    check(true, EncoderActivation::kGeluErf, tokens, false, options);
    EXPECT_TRUE(warnings.empty()) << warnings.front();
    EXPECT_EQ(sim->profile().attention_calls, 1);
  }
}

// Below the device attention's threshold, and on the host device, attention stays on the host.
TEST(VitEncoder, AttentionStaysOnTheHostBelowTheThreshold) {
  auto sim = std::make_shared<sim::SimDevice>();
  const CheckOptions options = head_dim_32_on(sim, 25);
  check(true, EncoderActivation::kGeluErf, 24, false, options);
  EXPECT_EQ(sim->profile().attention_calls, 0);
  EXPECT_GT(sim->profile().calls, 0);
}

// A head_dim the library refuses (8, not a multiple of 32): the call runs on the host, with one
// warning naming the refusal, and the result is the host's.
TEST(VitEncoder, RefusedDeviceAttentionFallsBackWithOneWarning) {
  std::vector<std::string> warnings;
  auto sim = std::make_shared<sim::SimDevice>();
  CheckOptions options;
  options.device = sim;
  options.device_attention_min_tokens = 1;
  options.min_cosine = 0.99999;
  options.abs_tolerance = 5e-3;
  options.warnings = &warnings;
  check(true, EncoderActivation::kGeluErf, 24, false, options);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings.front().find("ROCKET_E_SHAPE: flash attention needs head_dim % 32"),
            std::string::npos)
      << warnings.front();
  EXPECT_EQ(sim->profile().attention_calls, 0);
  EXPECT_GE(sim->profile().refused, 1);
}

// Every projection the device fails reruns on the host reference the session hands in.
TEST(VitEncoder, FailedProjectionsRerunOnTheSessionsHostReference) {
  sim::SimOptions failing;
  failing.fail_every = 1;
  auto reference = std::make_shared<device_test::CountingHostDevice>();
  CheckOptions options;
  options.device = std::make_shared<sim::SimDevice>(failing);
  options.host = reference;
  check(true, EncoderActivation::kGeluErf, 24, false, options);
  EXPECT_EQ(reference->float_gemms.load(), 4);  // qkv, output, fc1, fc2 of the one layer
}

// A windowed encoder's global block: with attention_group g the layer attends over g consecutive
// sequences as one. [4, T, D] in groups of 2 is the same memory as [2, 2T, D] in groups of 1, so
// the two runs must agree bit for bit, and differ from [4, T, D] attended sequence by sequence.
TEST(VitEncoder, AttentionGroupJoinsConsecutiveSequences) {
  const int64_t d = 32, tokens = 5, ff = 48;
  std::mt19937 rng(11);
  const Tensor g = random({d}, rng, 0.1f, 1), b = random({d}, rng, 0.1f);
  const Tensor wq = random({d, d}, rng, 0.3f), wk = random({d, d}, rng, 0.3f),
               wv = random({d, d}, rng, 0.3f), wo = random({d, d}, rng, 0.3f),
               w1 = random({d, ff}, rng, 0.2f), w2 = random({ff, d}, rng, 0.2f);
  const Tensor bd = random({d}, rng, 0.1f), bf = random({ff}, rng, 0.1f);
  const Tensor x = random({4, tokens, d}, rng, 1.0f);
  auto spec_with = [&](int64_t group) {
    VitEncoderSpec spec = stream_spec(d, 2);
    EncoderLayerWeights l;
    l.norm1 = l.norm2 = {g.ref(), b.ref(), 1e-6f};
    l.q = {wq.ref(), false, bd.ref()};
    l.k = {wk.ref(), false, bd.ref()};
    l.v = {wv.ref(), false, bd.ref()};
    l.o = {wo.ref(), false, bd.ref()};
    l.fc1 = {w1.ref(), false, bf.ref()};
    l.fc2 = {w2.ref(), false, bd.ref()};
    l.attention_scale = 0.25f;
    l.attention_group = group;
    spec.layers = {l};
    spec.exits = {{1, -1}};
    return spec;
  };
  auto host = std::make_shared<HostDevice>(DeviceOptions{});
  auto run = [&](int64_t group, std::vector<int64_t> shape) {
    auto plan = VitEncoder::create("group", spec_with(group), host, Logger());
    EXPECT_TRUE(plan.is_ok()) << plan.status().to_string();
    std::vector<float> out(x.data.size(), -7.0f);
    const Status status =
        plan.value()->run({x.data.data(), std::move(shape)}, {}, {out.data()}, ExecContext{});
    EXPECT_TRUE(status.is_ok()) << status.to_string();
    return out;
  };
  const std::vector<float> grouped = run(2, {4, tokens, d});
  const std::vector<float> joined = run(1, {2, 2 * tokens, d});
  const std::vector<float> alone = run(1, {4, tokens, d});
  EXPECT_EQ(grouped, joined);
  float moved = 0;
  for (size_t i = 0; i < grouped.size(); ++i)
    moved = std::max(moved, std::fabs(grouped[i] - alone[i]));
  EXPECT_GT(moved, 1e-2f);

  // A batch the groups do not divide, a group of 0 and a group with a bias are refused.
  auto plan = VitEncoder::create("group", spec_with(2), host, Logger());
  ASSERT_TRUE(plan.is_ok());
  std::vector<float> out(static_cast<size_t>(3 * tokens * d));
  EXPECT_EQ(
      plan.value()->run({x.data.data(), {3, tokens, d}}, {}, {out.data()}, ExecContext{}).code(),
      StatusCode::kInvalidArgument);
  EXPECT_FALSE(VitEncoder::create("group", spec_with(0), host, Logger()).is_ok());
  VitEncoderSpec biased = spec_with(2);
  biased.layers[0].attention_bias_input = 0;
  EXPECT_FALSE(VitEncoder::create("group", biased, host, Logger()).is_ok());
}

// SAM's ViT-Det block (GridAttention): the grid zero-padded to whole windows after the first
// LayerNorm, each window attending within itself with the decomposed relative-position bias
// (q . rel_h per key row, q . rel_w per key column, q unscaled), the padding dropped before the
// output projection; or the whole grid attending. Against a reference written out from SAM's
// definition, two images, on the host (exact) and with attention on the sim (fp16).
struct GridCase {
  int64_t grid_h, grid_w, window;
  bool relative;
};

std::vector<float> grid_reference(const GridCase& c, const Tensor& x, int64_t d, int64_t heads,
                                  float scale, const std::vector<const Tensor*>& w,
                                  const Tensor& rel_h, const Tensor& rel_w) {
  // w: g1 b1 wq bq wk bk wv bv wo bo g2 b2 w1 b1f w2 b2f
  const int64_t tokens = c.grid_h * c.grid_w, dh = d / heads, images = x.shape[0];
  const int64_t rows = c.window ? c.window : c.grid_h, cols = c.window ? c.window : c.grid_w;
  const int64_t down = (c.grid_h + rows - 1) / rows, across = (c.grid_w + cols - 1) / cols;
  std::vector<float> out;
  for (int64_t img = 0; img < images; ++img) {
    Mat h(x.data.begin() + img * tokens * d, x.data.begin() + (img + 1) * tokens * d);
    const Mat a = layer_norm(h, tokens, d, *w[0], *w[1]);
    Mat ctx(static_cast<size_t>(tokens * d), 0.0f);
    for (int64_t wy = 0; wy < down; ++wy)
      for (int64_t wx = 0; wx < across; ++wx) {
        const int64_t span = rows * cols;
        Mat win(static_cast<size_t>(span * d), 0.0f);  // zeros where the padded grid has no token
        std::vector<int64_t> token(static_cast<size_t>(span), -1);
        for (int64_t r = 0; r < span; ++r) {
          const int64_t y = wy * rows + r / cols, xx = wx * cols + r % cols;
          if (y >= c.grid_h || xx >= c.grid_w) continue;
          token[r] = y * c.grid_w + xx;
          for (int64_t i = 0; i < d; ++i) win[r * d + i] = a[token[r] * d + i];
        }
        const Mat q = linear(win, span, *w[2], *w[3]), k = linear(win, span, *w[4], *w[5]),
                  v = linear(win, span, *w[6], *w[7]);
        for (int64_t hh = 0; hh < heads; ++hh)
          for (int64_t i = 0; i < span; ++i) {
            if (token[i] < 0) continue;
            std::vector<double> s(static_cast<size_t>(span));
            double mx = -1e30, sum = 0;
            for (int64_t j = 0; j < span; ++j) {
              double dot = 0, rh = 0, rw = 0;
              for (int64_t e = 0; e < dh; ++e) {
                const double qe = q[i * d + hh * dh + e];
                dot += qe * k[j * d + hh * dh + e];
                if (c.relative) {
                  rh += qe * rel_h.data[((i / cols) * rows + j / cols) * dh + e];
                  rw += qe * rel_w.data[((i % cols) * cols + j % cols) * dh + e];
                }
              }
              s[j] = dot * scale + rh + rw;
              mx = std::max(mx, s[j]);
            }
            for (auto& e : s) sum += (e = std::exp(e - mx));
            for (int64_t j = 0; j < span; ++j)
              for (int64_t e = 0; e < dh; ++e)
                ctx[token[i] * d + hh * dh + e] += float(s[j] / sum) * v[j * d + hh * dh + e];
          }
      }
    const Mat o = linear(ctx, tokens, *w[8], *w[9]);
    for (int64_t i = 0; i < tokens * d; ++i) h[i] += o[i];
    Mat f = linear(layer_norm(h, tokens, d, *w[10], *w[11]), tokens, *w[12], *w[13]);
    for (auto& e : f) e = act(EncoderActivation::kGeluErf, e);
    const Mat f2 = linear(f, tokens, *w[14], *w[15]);
    for (int64_t i = 0; i < tokens * d; ++i) h[i] += f2[i];
    out.insert(out.end(), h.begin(), h.end());
  }
  return out;
}

void check_grid(const GridCase& c, std::shared_ptr<Device> device, int64_t min_tokens,
                double tolerance) {
  SCOPED_TRACE(
      str_cat(c.grid_h, "x", c.grid_w, " window ", c.window, c.relative ? " relative" : ""));
  const int64_t d = 64, heads = 2, dh = d / heads, ff = 96, tokens = c.grid_h * c.grid_w;
  const int64_t rows = c.window ? c.window : c.grid_h, cols = c.window ? c.window : c.grid_w;
  std::mt19937 rng(5);
  std::vector<Tensor> w = {
      random({d}, rng, 0.1f, 1),  random({d}, rng, 0.1f),    random({d, d}, rng, 0.2f),
      random({d}, rng, 0.3f),     random({d, d}, rng, 0.2f), random({d}, rng, 0.3f),
      random({d, d}, rng, 0.2f),  random({d}, rng, 0.3f),    random({d, d}, rng, 0.2f),
      random({d}, rng, 0.1f),     random({d}, rng, 0.1f, 1), random({d}, rng, 0.1f),
      random({d, ff}, rng, 0.2f), random({ff}, rng, 0.1f),   random({ff, d}, rng, 0.2f),
      random({d}, rng, 0.1f)};
  const Tensor rel_h = random({rows, rows, dh}, rng, 0.3f);
  const Tensor rel_w = random({cols, cols, dh}, rng, 0.3f);
  const Tensor x = random({2, tokens, d}, rng, 1.0f);
  const float scale = 1.0f / std::sqrt(float(dh));
  VitEncoderSpec spec = stream_spec(d, heads);
  EncoderLayerWeights l;
  l.norm1 = {w[0].ref(), w[1].ref(), 1e-6f};
  l.q = {w[2].ref(), false, w[3].ref()};
  l.k = {w[4].ref(), false, w[5].ref()};
  l.v = {w[6].ref(), false, w[7].ref()};
  l.o = {w[8].ref(), false, w[9].ref()};
  l.norm2 = {w[10].ref(), w[11].ref(), 1e-6f};
  l.fc1 = {w[12].ref(), false, w[13].ref()};
  l.fc2 = {w[14].ref(), false, w[15].ref()};
  l.attention_scale = scale;
  l.grid = GridAttention{c.grid_h, c.grid_w, c.window, std::nullopt, std::nullopt};
  if (c.relative) {
    l.grid->rel_h = rel_h.ref();
    l.grid->rel_w = rel_w.ref();
  }
  spec.layers = {l};
  spec.exits = {{1, -1}};
  spec.device_attention_min_tokens = min_tokens;
  auto plan = VitEncoder::create("grid", spec, device, Logger());
  ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
  std::vector<float> out(x.data.size(), -7.0f);
  const Status status =
      plan.value()->run({x.data.data(), x.shape}, {}, {out.data()}, ExecContext{});
  ASSERT_TRUE(status.is_ok()) << status.to_string();
  std::vector<const Tensor*> refs;
  for (const Tensor& t : w) refs.push_back(&t);
  const std::vector<float> want = grid_reference(c, x, d, heads, scale, refs, rel_h, rel_w);
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(out[i], want[i], tolerance) << i;
  // The grid matters: the same layer attending over the plain sequence differs.
  if (c.window > 0 || c.relative) {
    spec.layers[0].grid.reset();
    auto plain = VitEncoder::create("plain", spec, device, Logger());
    ASSERT_TRUE(plain.is_ok());
    std::vector<float> other(out.size());
    ASSERT_TRUE(
        plain.value()->run({x.data.data(), x.shape}, {}, {other.data()}, ExecContext{}).is_ok());
    float moved = 0;
    for (size_t i = 0; i < out.size(); ++i) moved = std::max(moved, std::fabs(out[i] - other[i]));
    EXPECT_GT(moved, 0.05f);
  }
}

const GridCase kGridCases[] = {
    {5, 7, 3, true},   // padded on both axes: 2 x 3 windows of 3 x 3
    {4, 4, 2, true},   // whole windows
    {5, 7, 0, true},   // global, relative over the whole grid
    {5, 7, 3, false},  // windows without a relative bias
};

TEST(VitEncoder, GridAttentionMatchesSamsBlockOnTheHost) {
  for (const GridCase& c : kGridCases)
    check_grid(c, std::make_shared<HostDevice>(DeviceOptions{}), 0, 1e-4);
}

TEST(VitEncoder, GridAttentionRunsOnTheSimWithinTheGate) {
  for (const GridCase& c : kGridCases) {
    auto sim = std::make_shared<sim::SimDevice>();
    check_grid(c, sim, 1, 3e-2);
    EXPECT_GT(sim->profile().attention_calls, 0);
  }
}

TEST(VitEncoder, GridAttentionRefusesTablesOrTokensThatDoNotFit) {
  const int64_t d = 64;
  std::mt19937 rng(3);
  const Tensor wt = random({d, d}, rng, 0.1f), b = random({d}, rng, 0.1f);
  const Tensor bad = random({3, 2, 32}, rng, 0.1f), good = random({3, 3, 32}, rng, 0.1f);
  VitEncoderSpec spec = stream_spec(d, 2);
  EncoderLayerWeights l;
  l.norm1 = l.norm2 = {b.ref(), b.ref(), 1e-6f};
  l.q = l.k = l.v = l.o = {wt.ref(), false, b.ref()};
  l.fc1 = l.fc2 = {wt.ref(), false, b.ref()};
  l.grid = GridAttention{5, 7, 3, bad.ref(), good.ref()};
  spec.layers = {l};
  spec.exits = {{1, -1}};
  auto host = std::make_shared<HostDevice>(DeviceOptions{});
  EXPECT_FALSE(VitEncoder::create("grid", spec, host, Logger()).is_ok());
  spec.layers[0].grid = GridAttention{5, 7, 3, good.ref(), good.ref()};
  auto plan = VitEncoder::create("grid", spec, host, Logger());
  ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
  const Tensor x = random({1, 36, d}, rng, 1.0f);  // 36 tokens are no 5 x 7 grid
  std::vector<float> out(x.data.size());
  EXPECT_EQ(plan.value()->run({x.data.data(), x.shape}, {}, {out.data()}, ExecContext{}).code(),
            StatusCode::kInvalidArgument);
}

TEST(VitEncoder, RefusesHeadsThatDoNotDivideTheWidth) {
  VitEncoderSpec spec;
  spec.hidden = 30;
  spec.heads = 4;
  spec.from_pixels = false;
  EXPECT_FALSE(
      VitEncoder::create("x", spec, std::make_shared<HostDevice>(DeviceOptions{}), Logger())
          .is_ok());
}

}  // namespace
}  // namespace npuflow

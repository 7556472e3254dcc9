#include "ops/vit_encoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>

#include "core/fp16.h"
#include "core/strings.h"
#include "host/host_device.h"
#include "ops/host_attention.h"
#include "ops/rotary.h"
#include "ops/side_operands.h"
#include "ops/vector_math.h"

namespace npuflow {
namespace {

constexpr int64_t kRowMultiple = 4;  // the device matmul's M contract

int64_t pad_rows(int64_t rows) {
  return (rows + kRowMultiple - 1) / kRowMultiple * kRowMultiple;
}

std::vector<float> copy_of(const FloatRef& ref) {
  return std::vector<float>(ref.data, ref.data + ref.count());
}

void layer_norm_rows(const float* x, int64_t rows, int64_t d, const std::vector<float>& gamma,
                     const std::vector<float>& beta, float epsilon, float* y,
                     const ExecContext& context) {
  layer_norm(x, rows, d, gamma.data(), beta.empty() ? nullptr : beta.data(), epsilon, y, context);
}

void zero_rows(float* buffer, int64_t from, int64_t to, int64_t cols) {
  if (to > from) std::memset(buffer + from * cols, 0, static_cast<size_t>((to - from) * cols) * 4);
}

}  // namespace

struct VitEncoder::Scratch {
  int64_t rows_padded = -1;
  std::vector<float> h, a, qkv, ctx, tmp, ff, patches;
  // For the image being run: the attention biases by side input index (data nullptr where that
  // input is no bias), and each layer's rotary tables (nullptr where it has none).
  std::vector<AttentionBias> biases;
  std::vector<RotaryTables> rotary;
};

Result<std::unique_ptr<VitEncoder>> VitEncoder::create(std::string name, const VitEncoderSpec& spec,
                                                       std::shared_ptr<Device> device,
                                                       Logger logger) {
  std::unique_ptr<VitEncoder> plan(new VitEncoder);
  plan->name_ = std::move(name);
  plan->device_ = std::move(device);
  if (plan->device_->float_compute_type() == ElementType::kFloat16) {
    plan->host_ = std::make_shared<HostDevice>(DeviceOptions{});
  }
  plan->logger_ = std::move(logger);
  plan->hidden_ = spec.hidden;
  plan->heads_ = spec.heads;
  plan->from_pixels_ = spec.from_pixels;
  plan->scratch_ = std::make_unique<Scratch>();
  const int64_t d = spec.hidden;
  if (d <= 0 || spec.heads <= 0 || d % spec.heads != 0) {
    return invalid_argument(
        str_cat("hidden size ", d, " does not split into ", spec.heads, " heads"));
  }
  Device& dev = *plan->device_;

  // Packs a dense layer (or several side by side along N) once onto the device.
  // `keep_exact` keeps the projection off an fp16 device (see `last_hazard` below).
  auto pack = [&](const std::vector<const DenseWeights*>& parts,
                  bool keep_exact = false) -> Result<Dense> {
    Dense dense;
    const DenseWeights& first = *parts.front();
    const int64_t k = first.transposed ? first.weight.shape[1] : first.weight.shape[0];
    int64_t n_total = 0;
    // A part's columns: [col_begin, col_begin + n) of a weight with `full` output columns.
    auto columns = [](const DenseWeights& p) {
      const int64_t full = p.transposed ? p.weight.shape[0] : p.weight.shape[1];
      return std::pair{full, p.cols > 0 ? p.cols : full - p.col_begin};
    };
    for (const DenseWeights* p : parts) {
      if (p->weight.shape.size() != 2) return invalid_argument("a projection weight is not 2-D");
      const int64_t pk = p->transposed ? p->weight.shape[1] : p->weight.shape[0];
      if (pk != k) return invalid_argument("fused projections disagree on K");
      const auto [full, n] = columns(*p);
      if (p->col_begin < 0 || n <= 0 || p->col_begin + n > full ||
          (p->bias && p->bias->count() != full)) {
        return invalid_argument(str_cat("projection columns [", p->col_begin, ", ",
                                        p->col_begin + n, ") do not fit a weight of ", full));
      }
      n_total += n;
    }
    std::vector<float> w(static_cast<size_t>(k * n_total));
    int64_t col = 0;
    for (const DenseWeights* p : parts) {
      const auto [full, n] = columns(*p);
      const int64_t c0 = p->col_begin;
      for (int64_t r = 0; r < k; ++r) {
        for (int64_t c = 0; c < n; ++c) {
          w[static_cast<size_t>(r * n_total + col + c)] =
              p->transposed ? p->weight.data[(c0 + c) * k + r] : p->weight.data[r * full + c0 + c];
        }
      }
      for (int64_t c = 0; c < n; ++c) {
        dense.bias.push_back(p->bias ? p->bias->data[c0 + c] : 0.0f);
      }
      col += n;
    }
    dense.k = k;
    dense.n = n_total;
    if (plan->host_) {
      // An NPU computes fp16: pack the weight rounded to fp16, and keep an exact host copy for
      // the calls it refuses (contract, tiling) or fails.
      if (!keep_exact) {
        std::vector<uint16_t> half(w.size());
        auto packed = floats_to_half_in_range(w.data(), w.size(), half.data())
                          ? dev.pack_fp16_weight(half.data(), k, n_total)
                          : Result<std::unique_ptr<PackedWeight>>(
                                unsupported("a weight is beyond fp16's range"));
        if (packed.is_ok()) {
          dense.packed = std::move(packed).value();
          dense.fp16 = true;
        } else {
          plan->logger_.warning(str_cat(plan->name_, ": ", dev.name(), " cannot hold a ", k, "x",
                                        n_total, " weight (", packed.status().to_string(),
                                        "); it runs on the host"));
        }
      }
      auto fallback = plan->host_->pack_float_weight(w.data(), k, n_total);
      if (!fallback.is_ok()) return fallback.status();
      dense.fallback = std::move(fallback).value();
      return dense;
    }
    auto packed = dev.pack_float_weight(w.data(), k, n_total);
    if (!packed.is_ok()) return packed.status();
    dense.packed = std::move(packed).value();
    return dense;
  };
  auto norm = [](const NormWeights& w) {
    Norm n;
    n.gamma = copy_of(w.gamma);
    if (w.beta) n.beta = copy_of(*w.beta);
    n.epsilon = w.epsilon;
    return n;
  };

  // Everything before a softmax that fp16 rounding would reorder feeds it: on an fp16 device the
  // projections up to and including that layer's q/k/v stay exact.
  std::string hazard;
  const int64_t last_hazard = plan->host_ ? last_fp16_attention_hazard(spec, &hazard) : -1;
  if (last_hazard >= 0) {
    plan->logger_.warning(str_cat(plan->name_, ": the projections through layer ", last_hazard,
                                  "'s q/k/v stay on the host (", hazard, ")"));
  }

  if (spec.from_pixels) {
    const FloatRef& w = spec.patch.weight;
    if (w.shape.size() != 4 || w.shape[0] != d) {
      return invalid_argument(str_cat("patch embedding weight has shape ", shape_string(w.shape)));
    }
    plan->channels_ = w.shape[1];
    plan->kernel_h_ = w.shape[2];
    plan->kernel_w_ = w.shape[3];
    plan->stride_h_ = spec.patch.stride_h;
    plan->stride_w_ = spec.patch.stride_w;
    DenseWeights as_dense;  // D x (C*kh*kw) is a transposed dense weight
    as_dense.weight.data = w.data;
    as_dense.weight.shape = {d, w.shape[1] * w.shape[2] * w.shape[3]};
    as_dense.transposed = true;
    as_dense.bias = spec.patch.bias;
    auto dense = pack({&as_dense}, last_hazard >= 0);
    if (!dense.is_ok()) return dense.status();
    plan->patch_ = std::move(dense).value();
    plan->cls_spec_ = spec.cls;
    plan->pos_spec_ = spec.pos;
    if (spec.cls.present && spec.cls.constant) {
      plan->cls_ = copy_of(*spec.cls.constant);
      plan->cls_shape_ = spec.cls.constant->shape;
      if (plan->cls_shape_.size() == 1) plan->cls_shape_ = {1, plan->cls_shape_[0]};  // CLIP: [D]
    }
    if (spec.pos.present && spec.pos.constant) {
      plan->pos_ = copy_of(*spec.pos.constant);
      plan->pos_shape_ = spec.pos.constant->shape;
    }
    if (spec.registers.present) {
      if (!spec.registers.constant || spec.registers.constant->count() % d != 0 ||
          spec.register_position < 0) {
        return invalid_argument("register tokens must be constant rows of the hidden size");
      }
      plan->registers_ = copy_of(*spec.registers.constant);
      plan->register_rows_ = spec.registers.constant->count() / d;
      plan->register_position_ = spec.register_position;
    }
  }
  if (spec.pre_norm) plan->pre_norm_ = norm(*spec.pre_norm);
  for (const EncoderLayerWeights& lw : spec.layers) {
    const auto index = static_cast<int64_t>(plan->layers_.size());
    Layer layer;
    layer.pre_norm = lw.pre_norm;
    layer.attention_norm = lw.attention_norm || !lw.pre_norm;
    layer.glu = lw.glu;
    layer.bias_input = lw.attention_bias_input;
    if (lw.rope_cos.present != lw.rope_sin.present)
      return invalid_argument("a rotary embedding needs both its cos and its sin table");
    if (lw.rope_cos.present) {
      if ((d / spec.heads) % 2 != 0)
        return invalid_argument("a rotary embedding needs an even head dim");
      Rope rope;
      rope.cos_spec = lw.rope_cos;
      rope.sin_spec = lw.rope_sin;
      if (lw.rope_cos.constant) {
        rope.cos = copy_of(*lw.rope_cos.constant);
        rope.cos_shape = lw.rope_cos.constant->shape;
      }
      if (lw.rope_sin.constant) {
        rope.sin = copy_of(*lw.rope_sin.constant);
        rope.sin_shape = lw.rope_sin.constant->shape;
      }
      layer.rope = std::move(rope);
    }
    if (layer.attention_norm) layer.norm1 = norm(lw.norm1);
    layer.norm2 = norm(lw.norm2);
    auto qkv = pack({&lw.q, &lw.k, &lw.v}, index <= last_hazard);
    if (!qkv.is_ok()) return qkv.status();
    layer.qkv = std::move(qkv).value();
    for (auto [src, dst] : {std::pair{&lw.o, &layer.o}, std::pair{&lw.fc1, &layer.fc1},
                            std::pair{&lw.fc2, &layer.fc2}}) {
      auto dense = pack({src}, index < last_hazard);
      if (!dense.is_ok()) return dense.status();
      *dst = std::move(dense).value();
    }
    const int64_t gated = layer.glu == EncoderGlu::kNone ? layer.fc1.n : layer.fc1.n / 2;
    if (layer.qkv.k != d || layer.qkv.n != 3 * d || layer.o.k != d || layer.o.n != d ||
        layer.fc1.k != d || layer.fc2.k != gated || layer.fc2.n != d ||
        (layer.glu != EncoderGlu::kNone && layer.fc1.n % 2 != 0)) {
      return invalid_argument("encoder layer projections do not chain at the hidden size");
    }
    if (lw.layer_scale1) layer.ls1 = copy_of(*lw.layer_scale1);
    if (lw.layer_scale2) layer.ls2 = copy_of(*lw.layer_scale2);
    layer.scale = lw.attention_scale;
    layer.nan_to_zero = lw.softmax_nan_to_zero;
    layer.activation = lw.activation;
    plan->layers_.push_back(std::move(layer));
  }
  for (const NormWeights& w : spec.exit_norms) plan->exit_norms_.push_back(norm(w));
  plan->exits_ = spec.exits;
  return plan;
}

VitEncoder::~VitEncoder() = default;

size_t VitEncoder::resident_bytes() const {
  auto bytes_of = [](const Dense& d) { return d.packed ? d.packed->resident_bytes() : size_t{0}; };
  size_t bytes = bytes_of(patch_);
  for (const Layer& l : layers_) {
    bytes += bytes_of(l.qkv) + bytes_of(l.o) + bytes_of(l.fc1) + bytes_of(l.fc2);
  }
  return bytes;
}

Result<std::vector<int64_t>> VitEncoder::output_shape(const FloatInput& main,
                                                      const std::vector<FloatInput>& side) const {
  if (!from_pixels_) {
    if (main.shape.size() != 3 || main.shape[2] != hidden_) {
      return invalid_argument(str_cat("stream input has shape ", shape_string(main.shape)));
    }
    return main.shape;
  }
  if (main.shape.size() != 4 || main.shape[1] != channels_) {
    return invalid_argument(str_cat("pixels have shape ", shape_string(main.shape),
                                    ", expected [B,", channels_, ",H,W]"));
  }
  const int64_t gh = (main.shape[2] - kernel_h_) / stride_h_ + 1;
  const int64_t gw = (main.shape[3] - kernel_w_) / stride_w_ + 1;
  if (gh <= 0 || gw <= 0) return invalid_argument("image smaller than one patch");
  int64_t prefix = 0;
  if (cls_spec_.present) {
    const std::vector<int64_t>& shape =
        cls_spec_.constant ? cls_shape_ : side.at(static_cast<size_t>(cls_spec_.input_index)).shape;
    if (shape.size() < 2) return invalid_argument("class token has rank < 2");
    prefix = shape[shape.size() - 2];
  }
  if (register_position_ > prefix + gh * gw) {
    return invalid_argument(
        str_cat("register tokens go after token ", register_position_, " of ", prefix + gh * gw));
  }
  return std::vector<int64_t>{main.shape[0], prefix + gh * gw + register_rows_, hidden_};
}

Status VitEncoder::project(const Dense& dense, const float* x, int64_t rows_padded, int64_t rows,
                           float* y, const ExecContext& context) const {
  // The one device call site.
  Status status;
  if (dense.fp16) {
    // fp16 operands, fp32 results; rows padded with zeros up to what the resident plan serves.
    const int64_t device_rows =
        std::max(rows_padded, device_->resident_min_rows(ElementType::kFloat16));
    thread_local std::vector<uint16_t> half;
    thread_local std::vector<float> padded_out;
    half.assign(static_cast<size_t>(device_rows * dense.k), 0);
    const bool in_range =
        floats_to_half_in_range(x, static_cast<size_t>(rows_padded * dense.k), half.data());
    float* out = y;
    if (device_rows != rows_padded) {
      padded_out.resize(static_cast<size_t>(device_rows * dense.n));
      out = padded_out.data();
    }
    status = in_range ? device_->gemm_fp16(half.data(), device_rows, *dense.packed, out,
                                           ElementType::kFloat32, context)
                      : unsupported("an activation is beyond fp16's range");
    if (status.is_ok() && out != y) std::copy(out, out + rows_padded * dense.n, y);
  } else if (dense.packed) {
    status = device_->gemm_float(x, rows_padded, *dense.packed, y, context);
  } else {
    // Packed for the host at compile time, which logged why; not a device refusal.
    if (!dense.fallback) return internal_error("a projection has no packed weight");
    NPUFLOW_RETURN_IF_ERROR(host_->gemm_float(x, rows_padded, *dense.fallback, y, context));
  }
  if (!status.is_ok()) {
    if (!dense.fallback) return status;
    if (!fallback_logged_.exchange(true)) {
      logger_.warning(str_cat(name_, ": ", device_->name(), " refused a ", rows_padded, "x",
                              dense.k, "x", dense.n, " projection (", status.to_string(),
                              "); such calls run on the host (reported once)"));
    }
    NPUFLOW_RETURN_IF_ERROR(host_->gemm_float(x, rows_padded, *dense.fallback, y, context));
  }
  for (int64_t r = 0; r < rows; ++r) {
    float* out = y + r * dense.n;
    for (int64_t c = 0; c < dense.n; ++c) out[c] += dense.bias[static_cast<size_t>(c)];
  }
  return Status::ok();
}

Status VitEncoder::run(const FloatInput& main, const std::vector<FloatInput>& side,
                       const std::vector<float*>& exits, const ExecContext& context) const {
  auto shape = output_shape(main, side);
  if (!shape.is_ok()) return shape.status();
  const int64_t batch = shape.value()[0];
  const int64_t tokens = shape.value()[1];
  if (exits.size() != exits_.size()) return internal_error("exit count mismatch");

  const float* cls = nullptr;
  std::vector<int64_t> cls_shape, pos_shape;
  bool pos_one_row = false;
  std::vector<float> pos_rows;  // a one-row embedding repeated for each token
  const float* pos = nullptr;
  int64_t prefix = 0;
  if (from_pixels_ && cls_spec_.present) {
    if (cls_spec_.constant) {
      cls = cls_.data();
      cls_shape = cls_shape_;
    } else {
      const FloatInput& in = side.at(static_cast<size_t>(cls_spec_.input_index));
      cls = in.data;
      cls_shape = in.shape;
    }
    prefix = cls_shape[cls_shape.size() - 2];
    NPUFLOW_RETURN_IF_ERROR(check_side_shape("class token", cls_shape, prefix, hidden_, batch));
  }
  if (from_pixels_ && pos_spec_.present) {
    if (pos_spec_.constant) {
      pos = pos_.data();
      pos_shape = pos_shape_;
    } else {
      const FloatInput& in = side.at(static_cast<size_t>(pos_spec_.input_index));
      pos = in.data;
      pos_shape = in.shape;
    }
    // A computed one-row embedding ([.., 1, d] or [d]) is broadcast to every token, as in ONNX.
    if (pos_shape.size() == 1) pos_shape.insert(pos_shape.begin(), 1);
    pos_one_row = pos_shape.size() >= 2 && pos_shape[pos_shape.size() - 2] == 1;
    NPUFLOW_RETURN_IF_ERROR(check_side_shape("position embedding", pos_shape,
                                             pos_one_row ? 1 : tokens - register_rows_, hidden_,
                                             batch));
  }

  // Each attention bias as [B|1, H|1, T|1, T|1], by side input index (empty: not a bias).
  std::vector<std::vector<int64_t>> bias_layouts(side.size());
  // Each layer's rotary tables: data and shape of cos, then of sin.
  struct Tables {
    const float* data[2] = {nullptr, nullptr};
    std::vector<int64_t> shape[2];
  };
  std::vector<Tables> tables(layers_.size());
  std::deque<PermutedTable> laid_out;  // runtime tables stored transposed, laid out for this run
  const int64_t head_dim = hidden_ / heads_;
  for (size_t li = 0; li < layers_.size(); ++li) {
    const Layer& L = layers_[li];
    if (L.bias_input >= 0 && bias_layouts.at(static_cast<size_t>(L.bias_input)).empty()) {
      const FloatInput& in = side.at(static_cast<size_t>(L.bias_input));
      auto layout = bias_layout(in.shape, batch, heads_, tokens);
      if (!layout.is_ok()) return layout.status();
      bias_layouts[static_cast<size_t>(L.bias_input)] = std::move(layout).value();
    }
    if (!L.rope) continue;
    const SideOperand* specs[2] = {&L.rope->cos_spec, &L.rope->sin_spec};
    const std::vector<float>* constants[2] = {&L.rope->cos, &L.rope->sin};
    const std::vector<int64_t>* shapes[2] = {&L.rope->cos_shape, &L.rope->sin_shape};
    for (int i = 0; i < 2; ++i) {
      if (specs[i]->constant) {
        tables[li].data[i] = constants[i]->data();
        tables[li].shape[i] = *shapes[i];
      } else if (specs[i]->perm.empty()) {
        const FloatInput& in = side.at(static_cast<size_t>(specs[i]->input_index));
        tables[li].data[i] = in.data;
        tables[li].shape[i] = in.shape;
      } else {
        const FloatInput& in = side.at(static_cast<size_t>(specs[i]->input_index));
        laid_out.push_back(permute_table(in.data, in.shape, specs[i]->perm));
        if (laid_out.back().shape.empty()) {
          return invalid_argument(str_cat("a rotary table of shape ", shape_string(in.shape),
                                          " does not lay out as [.., T, head_dim]"));
        }
        tables[li].data[i] = laid_out.back().data.data();
        tables[li].shape[i] = laid_out.back().shape;
      }
      NPUFLOW_RETURN_IF_ERROR(check_side_shape(i == 0 ? "rotary cos table" : "rotary sin table",
                                               tables[li].shape[i], tokens, head_dim, batch));
    }
  }

  std::lock_guard<std::mutex> lock(mutex_);
  Scratch& s = *scratch_;
  const int64_t tp = pad_rows(tokens);
  if (s.rows_padded != tp) {
    int64_t ff = 0;
    for (const Layer& l : layers_) ff = std::max(ff, l.fc1.n);
    const auto size = [&](int64_t cols) { return static_cast<size_t>(tp * cols); };
    s.h.assign(size(hidden_), 0.0f);
    s.a.assign(size(hidden_), 0.0f);
    s.qkv.assign(size(3 * hidden_), 0.0f);
    s.ctx.assign(size(hidden_), 0.0f);
    s.tmp.assign(size(std::max(hidden_, patch_.n)), 0.0f);
    s.ff.assign(size(ff), 0.0f);
    s.patches.assign(from_pixels_ ? size(patch_.k) : 0, 0.0f);
    s.rows_padded = tp;
  }
  for (int64_t b = 0; b < batch; ++b) {
    const float* image = nullptr;
    int64_t gw = 0;
    if (from_pixels_) {
      image = main.data + b * main.shape[1] * main.shape[2] * main.shape[3];
      gw = (main.shape[3] - kernel_w_) / stride_w_ + 1;
    } else {
      image = main.data + b * tokens * hidden_;
    }
    s.biases.assign(side.size(), AttentionBias{});
    for (size_t i = 0; i < side.size(); ++i) {
      const std::vector<int64_t>& bs = bias_layouts[i];
      if (bs.empty()) continue;
      AttentionBias& bias = s.biases[i];
      bias.col_stride = bs[3] == 1 ? 0 : 1;
      bias.row_stride = bs[2] == 1 ? 0 : bs[3];
      bias.head_stride = bs[1] == 1 ? 0 : bs[2] * bs[3];
      bias.data = side[i].data + (bs[0] == 1 ? 0 : b * bs[1] * bs[2] * bs[3]);
    }
    s.rotary.assign(layers_.size(), RotaryTables{});
    for (size_t li = 0; li < layers_.size(); ++li) {
      if (!layers_[li].rope) continue;
      s.rotary[li].cos = side_rows(tables[li].data[0], tables[li].shape[0], b);
      s.rotary[li].sin = side_rows(tables[li].data[1], tables[li].shape[1], b);
    }
    const float* cls_b = cls ? side_rows(cls, cls_shape, b) : nullptr;
    const float* pos_b = pos ? side_rows(pos, pos_shape, b) : nullptr;
    if (pos_b && pos_one_row) pos_b = repeat_row(pos_b, tokens - register_rows_, hidden_, pos_rows);
    NPUFLOW_RETURN_IF_ERROR(run_one(image, cls_b, pos_b, tokens, tokens - prefix - register_rows_,
                                    gw, from_pixels_ ? main.shape[1] : 0,
                                    from_pixels_ ? main.shape[2] : 0,
                                    from_pixels_ ? main.shape[3] : 0, exits, b, s, context));
  }
  return Status::ok();
}

Status VitEncoder::run_one(const float* main, const float* cls, const float* pos, int64_t tokens,
                           int64_t patch_rows, int64_t grid_w, int64_t channels, int64_t height,
                           int64_t width, const std::vector<float*>& exits, int64_t image,
                           Scratch& s, const ExecContext& context) const {
  (void)height;
  const int64_t d = hidden_;
  const int64_t tp = pad_rows(tokens);
  float* h = s.h.data();
  const int64_t embedded = tokens - register_rows_;  // registers come with the pixels only
  const int64_t prefix = embedded - patch_rows;

  // Embedding: patches -> device matmul, then class token rows, then + position embedding,
  // then the register rows inserted.
  if (from_pixels_) {
    const int64_t k = patch_.k;
    const int64_t pp = pad_rows(patch_rows);
    float* cols = s.patches.data();
    for (int64_t p = 0; p < patch_rows; ++p) {
      const int64_t py = p / grid_w, px = p % grid_w;
      float* row = cols + p * k;
      for (int64_t c = 0; c < channels; ++c) {
        for (int64_t i = 0; i < kernel_h_; ++i) {
          const float* src = main + (c * height + py * stride_h_ + i) * width + px * stride_w_;
          std::memcpy(row + (c * kernel_h_ + i) * kernel_w_, src,
                      static_cast<size_t>(kernel_w_) * 4);
        }
      }
    }
    zero_rows(cols, patch_rows, pp, k);
    NPUFLOW_RETURN_IF_ERROR(project(patch_, cols, pp, patch_rows, s.tmp.data(), context));
    std::memcpy(h + prefix * d, s.tmp.data(), static_cast<size_t>(patch_rows * d) * 4);
    if (prefix > 0) std::memcpy(h, cls, static_cast<size_t>(prefix * d) * 4);
    if (pos) {
      for (int64_t i = 0; i < embedded * d; ++i) h[i] += pos[i];
    }
    if (register_rows_ > 0) {
      float* at = h + register_position_ * d;
      std::memmove(at + register_rows_ * d, at,
                   static_cast<size_t>((embedded - register_position_) * d) * 4);
      std::memcpy(at, registers_.data(), registers_.size() * 4);
    }
  } else {
    std::memcpy(h, main, static_cast<size_t>(tokens * d) * 4);
  }
  zero_rows(h, tokens, tp, d);
  if (pre_norm_)
    layer_norm_rows(h, tokens, d, pre_norm_->gamma, pre_norm_->beta, pre_norm_->epsilon, h,
                    context);

  auto emit = [&](int stream_index) {
    for (size_t e = 0; e < exits_.size(); ++e) {
      if (exits_[e].stream_index != stream_index) continue;
      float* out = exits[e] + image * tokens * d;
      if (exits_[e].norm < 0) {
        std::memcpy(out, h, static_cast<size_t>(tokens * d) * 4);
      } else {
        const Norm& n = exit_norms_[static_cast<size_t>(exits_[e].norm)];
        layer_norm_rows(h, tokens, d, n.gamma, n.beta, n.epsilon, out, context);
      }
    }
  };
  emit(0);

  for (size_t li = 0; li < layers_.size(); ++li) {
    const Layer& L = layers_[li];
    // Attention.
    const float* attn_in = h;
    if (L.pre_norm && L.attention_norm) {
      layer_norm_rows(h, tokens, d, L.norm1.gamma, L.norm1.beta, L.norm1.epsilon, s.a.data(),
                      context);
      zero_rows(s.a.data(), tokens, tp, d);
      attn_in = s.a.data();
    }
    NPUFLOW_RETURN_IF_ERROR(project(L.qkv, attn_in, tp, tokens, s.qkv.data(), context));
    if (L.rope) apply_rotary(s.qkv.data(), tokens, d, heads_, s.rotary[li]);
    float* ctx = s.ctx.data();
    const AttentionBias no_bias;
    host_attention(s.qkv.data(), {tokens, d, heads_}, L.scale,
                   L.bias_input >= 0 ? s.biases[static_cast<size_t>(L.bias_input)] : no_bias,
                   L.nan_to_zero, ctx, context);
    zero_rows(ctx, tokens, tp, d);
    NPUFLOW_RETURN_IF_ERROR(project(L.o, ctx, tp, tokens, s.tmp.data(), context));
    const auto residual = [&](const float* branch, const std::vector<float>& ls) {
      add_residual(h, branch, ls.empty() ? nullptr : ls.data(), tokens, d);
    };
    residual(s.tmp.data(), L.ls1);
    if (!L.pre_norm)
      layer_norm_rows(h, tokens, d, L.norm1.gamma, L.norm1.beta, L.norm1.epsilon, h, context);

    // MLP.
    const float* mlp_in = h;
    if (L.pre_norm) {
      layer_norm_rows(h, tokens, d, L.norm2.gamma, L.norm2.beta, L.norm2.epsilon, s.a.data(),
                      context);
      zero_rows(s.a.data(), tokens, tp, d);
      mlp_in = s.a.data();
    }
    NPUFLOW_RETURN_IF_ERROR(project(L.fc1, mlp_in, tp, tokens, s.ff.data(), context));
    float* ff = s.ff.data();
    const VectorActivation act = L.activation;
    if (L.glu == EncoderGlu::kNone) {
      activate_rows(act, ff, L.fc1.n, ff, L.fc1.n, tokens, L.fc1.n, context);
    } else {
      // In place, row by row: row r's I results land at r*I, never past what rows >= r still
      // have to read (at r*2I and beyond).
      const int64_t gated = L.fc1.n / 2;
      const int64_t act_half = L.glu == EncoderGlu::kActFirst ? 0 : gated;
      const int64_t gate_half = gated - act_half;
      gated_activation(act, ff, act_half, gate_half, ff, tokens, gated);
    }
    zero_rows(ff, tokens, tp, L.fc2.k);
    NPUFLOW_RETURN_IF_ERROR(project(L.fc2, ff, tp, tokens, s.tmp.data(), context));
    residual(s.tmp.data(), L.ls2);
    if (!L.pre_norm)
      layer_norm_rows(h, tokens, d, L.norm2.gamma, L.norm2.beta, L.norm2.epsilon, h, context);
    emit(static_cast<int>(li + 1));
  }
  return Status::ok();
}

}  // namespace npuflow

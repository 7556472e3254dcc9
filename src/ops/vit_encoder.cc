#include "ops/vit_encoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <numeric>

#include "core/fp16.h"
#include "core/strings.h"
#include "host/host_device.h"
#include "ops/device_attention.h"
#include "ops/host_attention.h"
#include "ops/rotary.h"
#include "ops/side_operands.h"
#include "ops/vector_math.h"

namespace npuflow {
namespace {

// A relative-position table [queries][keys][head_dim] as [queries][head_dim][keys].
std::vector<float> keys_last(const FloatRef& table) {
  const int64_t queries = table.shape[0], keys = table.shape[1], head_dim = table.shape[2];
  std::vector<float> out(static_cast<size_t>(queries * keys * head_dim));
  for (int64_t q = 0; q < queries; ++q)
    for (int64_t k = 0; k < keys; ++k)
      for (int64_t c = 0; c < head_dim; ++c)
        out[static_cast<size_t>((q * head_dim + c) * keys + k)] =
            table.data[(q * keys + k) * head_dim + c];
  return out;
}

std::vector<float> copy_of(const FloatRef& ref) {
  return std::vector<float>(ref.data, ref.data + ref.count());
}

void layer_norm_rows(const float* x, int64_t rows, int64_t d, const std::vector<float>& gamma,
                     const std::vector<float>& beta, float epsilon, float* y,
                     const ExecContext& context) {
  layer_norm(x, rows, d, gamma.data(), beta.empty() ? nullptr : beta.data(), epsilon, y, context);
}

// A grid layer's geometry and tables fit together, and it has nothing laid out per sequence.
Status check_grid(const GridAttention& grid, const EncoderLayerWeights& layer, int64_t index,
                  int64_t head_dim) {
  const auto refuse = [&](const std::string& why) {
    return invalid_argument(str_cat("layer ", index, "'s grid attention: ", why));
  };
  if (grid.grid_h <= 0 || grid.grid_w <= 0 || grid.window < 0) return refuse("an empty grid");
  if (layer.attention_group != 1 || layer.attention_bias_input >= 0 || layer.rope_cos.present)
    return refuse("it takes no group, bias or rotary table");
  if (grid.rel_h.has_value() != grid.rel_w.has_value())
    return refuse("a relative-position bias needs both tables");
  const int64_t rows = grid.window > 0 ? grid.window : grid.grid_h;
  const int64_t cols = grid.window > 0 ? grid.window : grid.grid_w;
  if (grid.rel_h && (grid.rel_h->shape != std::vector<int64_t>{rows, rows, head_dim} ||
                     grid.rel_w->shape != std::vector<int64_t>{cols, cols, head_dim})) {
    return refuse(str_cat("tables ", shape_string(grid.rel_h->shape), " and ",
                          shape_string(grid.rel_w->shape), " do not fit a ", rows, "x", cols,
                          " grid of head_dim ", head_dim));
  }
  return Status::ok();
}

void zero_rows(float* buffer, int64_t from, int64_t to, int64_t cols) {
  if (to > from) std::memset(buffer + from * cols, 0, static_cast<size_t>((to - from) * cols) * 4);
}

}  // namespace

int64_t VitEncoder::pad_rows(int64_t rows) {
  constexpr int64_t kRowMultiple = 4;  // the device matmul's M contract
  return (rows + kRowMultiple - 1) / kRowMultiple * kRowMultiple;
}

struct VitEncoder::Scratch {
  int64_t rows_padded = -1, patch_rows_padded = -1;
  // The pass's images stacked, `tokens` rows each, then zero rows up to rows_padded.
  std::vector<float> h, a, qkv, ctx, tmp, ff, patches;
  GridScratch grid;
  // Per image of the pass: the attention biases by side input index (data nullptr where that
  // input is no bias), and each layer's rotary tables (nullptr where it has none).
  std::vector<std::vector<AttentionBias>> biases;
  std::vector<std::vector<RotaryTables>> rotary;
};

Result<std::unique_ptr<VitEncoder>> VitEncoder::create(std::string name, const VitEncoderSpec& spec,
                                                       std::shared_ptr<Device> device,
                                                       Logger logger,
                                                       std::shared_ptr<Device> host) {
  std::unique_ptr<VitEncoder> plan(new VitEncoder);
  plan->name_ = std::move(name);
  plan->device_ = std::move(device);
  if (plan->device_->float_compute_type() == ElementType::kFloat16) {
    plan->host_ = host ? std::move(host) : std::make_shared<HostDevice>(DeviceOptions{});
  }
  plan->logger_ = std::move(logger);
  plan->hidden_ = spec.hidden;
  plan->heads_ = spec.heads;
  plan->from_pixels_ = spec.from_pixels;
  plan->grid_layers_ = std::any_of(spec.layers.begin(), spec.layers.end(),
                                   [](const EncoderLayerWeights& l) { return l.grid.has_value(); });
  plan->scratch_ = std::make_unique<Scratch>();
  const int64_t d = spec.hidden;
  if (d <= 0 || spec.heads <= 0 || d % spec.heads != 0) {
    return invalid_argument(
        str_cat("hidden size ", d, " does not split into ", spec.heads, " heads"));
  }

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
  plan->last_hazard_ = last_hazard;
  if (plan->host_) plan->device_attention_min_tokens_ = spec.device_attention_min_tokens;
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
    auto dense = plan->pack({&as_dense}, last_hazard >= 0);
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
    auto qkv = plan->pack({&lw.q, &lw.k, &lw.v}, index <= last_hazard);
    if (!qkv.is_ok()) return qkv.status();
    layer.qkv = std::move(qkv).value();
    for (auto [src, dst] : {std::pair{&lw.o, &layer.o}, std::pair{&lw.fc1, &layer.fc1},
                            std::pair{&lw.fc2, &layer.fc2}}) {
      auto dense = plan->pack({src}, index < last_hazard);
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
    if (lw.attention_group < 1 ||
        (lw.attention_group > 1 && (lw.attention_bias_input >= 0 || lw.rope_cos.present))) {
      // A bias or a rotary table is laid out per sequence: a group would need its own.
      return invalid_argument(str_cat("layer ", index, " attends over ", lw.attention_group,
                                      " sequences; a group of several takes no bias or rotary"));
    }
    layer.attention_group = lw.attention_group;
    if (lw.grid) {
      NPUFLOW_RETURN_IF_ERROR(check_grid(*lw.grid, lw, index, d / spec.heads));
      layer.grid = Layer::Grid{lw.grid->grid_h, lw.grid->grid_w, lw.grid->window,
                               lw.grid->rel_h ? keys_last(*lw.grid->rel_h) : std::vector<float>{},
                               lw.grid->rel_w ? keys_last(*lw.grid->rel_w) : std::vector<float>{}};
    }
    plan->sequence_group_ = std::lcm(plan->sequence_group_, lw.attention_group);
    plan->layers_.push_back(std::move(layer));
  }
  for (const NormWeights& w : spec.exit_norms) plan->exit_norms_.push_back(norm(w));
  plan->exits_ = spec.exits;
  return plan;
}

VitEncoder::~VitEncoder() = default;

size_t VitEncoder::resident_bytes() const {
  auto bytes_of = [](const Dense& d) {
    return d.packed    ? d.packed->resident_bytes()
           : d.dynamic ? d.dynamic->resident_bytes()
                       : size_t{0};
  };
  size_t bytes = bytes_of(patch_);
  for (const Layer& l : layers_) {
    bytes += bytes_of(l.qkv) + bytes_of(l.o) + bytes_of(l.fc1) + bytes_of(l.fc2);
  }
  return bytes;
}

Result<std::vector<int64_t>> VitEncoder::output_shape(const FloatInput& main,
                                                      const std::vector<FloatInput>& side) const {
  if (!from_pixels_) {
    // [B, T, D], or a token grid [B, H, W, D] (SAM's layers attend over it as rows of W).
    if ((main.shape.size() != 3 && (main.shape.size() != 4 || !grid_layers_)) ||
        main.shape.back() != hidden_) {
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

Status VitEncoder::run(const FloatInput& main, const std::vector<FloatInput>& side,
                       const std::vector<float*>& exits, const ExecContext& context) const {
  auto shape = output_shape(main, side);
  if (!shape.is_ok()) return shape.status();
  const int64_t batch = shape.value()[0];
  // The stream's rows per sequence ([B, T, D], or [B, H, W, D]: H x W).
  const std::vector<int64_t>& dims = shape.value();
  const int64_t tokens = dims.size() == 4 ? dims[1] * dims[2] : dims[1];
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
  const int64_t d = hidden_;
  if (batch % sequence_group_ != 0) {
    return invalid_argument(str_cat("a batch of ", batch, " sequences does not split into the ",
                                    sequence_group_, "-sequence groups a layer attends over"));
  }
  const int64_t per_pass = batch_wide_ ? std::max<int64_t>(batch, 1) : sequence_group_;
  const int64_t patch_rows_padded = from_pixels_ ? pad_rows(tokens) : 0;
  for (int64_t first = 0; first < batch; first += per_pass) {
    const int64_t images = std::min(per_pass, batch - first);
    const int64_t rp = pad_rows(images * tokens);
    if (s.rows_padded != rp || s.patch_rows_padded != patch_rows_padded) {
      int64_t ff = 0;
      for (const Layer& l : layers_) ff = std::max(ff, l.fc1.n);
      const auto size = [&](int64_t cols) { return static_cast<size_t>(rp * cols); };
      s.h.assign(size(d), 0.0f);
      s.a.assign(size(d), 0.0f);
      s.qkv.assign(size(3 * d), 0.0f);
      s.ctx.assign(size(d), 0.0f);
      s.tmp.assign(std::max(size(d), static_cast<size_t>(patch_rows_padded * patch_.n)), 0.0f);
      s.ff.assign(size(ff), 0.0f);
      s.patches.assign(static_cast<size_t>(patch_rows_padded * patch_.k), 0.0f);
      s.rows_padded = rp;
      s.patch_rows_padded = patch_rows_padded;
    }
    s.biases.assign(static_cast<size_t>(images), std::vector<AttentionBias>(side.size()));
    s.rotary.assign(static_cast<size_t>(images), std::vector<RotaryTables>(layers_.size()));
    for (int64_t i = 0; i < images; ++i) {
      const int64_t b = first + i;
      const float* image = nullptr;
      int64_t gw = 0;
      if (from_pixels_) {
        image = main.data + b * main.shape[1] * main.shape[2] * main.shape[3];
        gw = (main.shape[3] - kernel_w_) / stride_w_ + 1;
      } else {
        image = main.data + b * tokens * d;
      }
      std::vector<AttentionBias>& biases = s.biases[static_cast<size_t>(i)];
      for (size_t j = 0; j < side.size(); ++j) {
        const std::vector<int64_t>& bs = bias_layouts[j];
        if (bs.empty()) continue;
        AttentionBias& bias = biases[j];
        bias.col_stride = bs[3] == 1 ? 0 : 1;
        bias.row_stride = bs[2] == 1 ? 0 : bs[3];
        bias.head_stride = bs[1] == 1 ? 0 : bs[2] * bs[3];
        bias.data = side[j].data + (bs[0] == 1 ? 0 : b * bs[1] * bs[2] * bs[3]);
      }
      for (size_t li = 0; li < layers_.size(); ++li) {
        if (!layers_[li].rope) continue;
        RotaryTables& rotary = s.rotary[static_cast<size_t>(i)][li];
        rotary.cos = side_rows(tables[li].data[0], tables[li].shape[0], b);
        rotary.sin = side_rows(tables[li].data[1], tables[li].shape[1], b);
      }
      const float* cls_b = cls ? side_rows(cls, cls_shape, b) : nullptr;
      const float* pos_b = pos ? side_rows(pos, pos_shape, b) : nullptr;
      if (pos_b && pos_one_row)
        pos_b = repeat_row(pos_b, tokens - register_rows_, hidden_, pos_rows);
      NPUFLOW_RETURN_IF_ERROR(
          embed(image, cls_b, pos_b, tokens, tokens - prefix - register_rows_, gw,
                from_pixels_ ? main.shape[1] : 0, from_pixels_ ? main.shape[2] : 0,
                from_pixels_ ? main.shape[3] : 0, s.h.data() + i * tokens * d, s, context));
    }
    NPUFLOW_RETURN_IF_ERROR(run_layers(tokens, images, first, exits, s, context));
  }
  return Status::ok();
}

Status VitEncoder::embed(const float* main, const float* cls, const float* pos, int64_t tokens,
                         int64_t patch_rows, int64_t grid_w, int64_t channels, int64_t height,
                         int64_t width, float* h, Scratch& s, const ExecContext& context) const {
  (void)height;
  const int64_t d = hidden_;
  const int64_t embedded = tokens - register_rows_;  // registers come with the pixels only
  const int64_t prefix = embedded - patch_rows;
  if (!from_pixels_) {
    std::memcpy(h, main, static_cast<size_t>(tokens * d) * 4);
    return Status::ok();
  }
  // Patches -> device matmul, then class token rows, then + position embedding, then the
  // register rows inserted.
  const int64_t k = patch_.k;
  const int64_t pp = pad_rows(patch_rows);
  float* cols = s.patches.data();
  for (int64_t p = 0; p < patch_rows; ++p) {
    const int64_t py = p / grid_w, px = p % grid_w;
    float* row = cols + p * k;
    for (int64_t c = 0; c < channels; ++c) {
      for (int64_t i = 0; i < kernel_h_; ++i) {
        const float* src = main + (c * height + py * stride_h_ + i) * width + px * stride_w_;
        std::memcpy(row + (c * kernel_h_ + i) * kernel_w_, src, static_cast<size_t>(kernel_w_) * 4);
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
  return Status::ok();
}

Status VitEncoder::run_layers(int64_t tokens, int64_t images, int64_t first_image,
                              const std::vector<float*>& exits, Scratch& s,
                              const ExecContext& context) const {
  const int64_t d = hidden_;
  // Row-wise work runs over every image's rows at once; projections over the padded stack
  // (zero rows past `rows`), attention image by image.
  const int64_t rows = images * tokens;
  const int64_t rp = pad_rows(rows);
  float* h = s.h.data();
  zero_rows(h, rows, rp, d);
  if (pre_norm_)
    layer_norm_rows(h, rows, d, pre_norm_->gamma, pre_norm_->beta, pre_norm_->epsilon, h, context);

  auto emit = [&](int stream_index) {
    for (size_t e = 0; e < exits_.size(); ++e) {
      if (exits_[e].stream_index != stream_index) continue;
      float* out = exits[e] + first_image * tokens * d;
      if (exits_[e].norm < 0) {
        std::memcpy(out, h, static_cast<size_t>(rows * d) * 4);
      } else {
        const Norm& n = exit_norms_[static_cast<size_t>(exits_[e].norm)];
        layer_norm_rows(h, rows, d, n.gamma, n.beta, n.epsilon, out, context);
      }
    }
  };
  emit(0);

  for (size_t li = 0; li < layers_.size(); ++li) {
    const Layer& L = layers_[li];
    // Attention.
    const float* attn_in = h;
    if (L.pre_norm && L.attention_norm) {
      layer_norm_rows(h, rows, d, L.norm1.gamma, L.norm1.beta, L.norm1.epsilon, s.a.data(),
                      context);
      zero_rows(s.a.data(), rows, rp, d);
      attn_in = s.a.data();
    }
    float* ctx = s.ctx.data();
    if (L.grid) {
      NPUFLOW_RETURN_IF_ERROR(grid_attention(L, li, attn_in, tokens, images, ctx, s.grid, context));
    } else {
      NPUFLOW_RETURN_IF_ERROR(project(L.qkv, attn_in, rp, rows, s.qkv.data(), context));
      const AttentionBias no_bias;
      // A group's sequences lie one after another: it attends as one sequence of span rows.
      const int64_t group = L.attention_group;
      for (int64_t i = 0; i < images; i += group) {
        float* qkv = s.qkv.data() + i * tokens * 3 * d;
        const auto image = static_cast<size_t>(i);
        if (L.rope) apply_rotary(qkv, tokens, d, heads_, s.rotary[image][li]);
        const AttentionBias& bias =
            L.bias_input >= 0 ? s.biases[image][static_cast<size_t>(L.bias_input)] : no_bias;
        NPUFLOW_RETURN_IF_ERROR(
            attend(L, li, qkv, group * tokens, bias, ctx + i * tokens * d, context));
      }
    }
    zero_rows(ctx, rows, rp, d);
    NPUFLOW_RETURN_IF_ERROR(project(L.o, ctx, rp, rows, s.tmp.data(), context));
    const auto residual = [&](const float* branch, const std::vector<float>& ls) {
      add_residual(h, branch, ls.empty() ? nullptr : ls.data(), rows, d);
    };
    residual(s.tmp.data(), L.ls1);
    if (!L.pre_norm)
      layer_norm_rows(h, rows, d, L.norm1.gamma, L.norm1.beta, L.norm1.epsilon, h, context);

    // MLP.
    const float* mlp_in = h;
    if (L.pre_norm) {
      layer_norm_rows(h, rows, d, L.norm2.gamma, L.norm2.beta, L.norm2.epsilon, s.a.data(),
                      context);
      zero_rows(s.a.data(), rows, rp, d);
      mlp_in = s.a.data();
    }
    NPUFLOW_RETURN_IF_ERROR(project(L.fc1, mlp_in, rp, rows, s.ff.data(), context));
    float* ff = s.ff.data();
    const VectorActivation act = L.activation;
    if (L.glu == EncoderGlu::kNone) {
      activate_rows(act, ff, L.fc1.n, ff, L.fc1.n, rows, L.fc1.n, context);
    } else {
      // In place, row by row: row r's I results land at r*I, never past what rows >= r still
      // have to read (at r*2I and beyond).
      const int64_t gated = L.fc1.n / 2;
      const int64_t act_half = L.glu == EncoderGlu::kActFirst ? 0 : gated;
      const int64_t gate_half = gated - act_half;
      gated_activation(act, ff, act_half, gate_half, ff, rows, gated);
    }
    zero_rows(ff, rows, rp, L.fc2.k);
    NPUFLOW_RETURN_IF_ERROR(project(L.fc2, ff, rp, rows, s.tmp.data(), context));
    residual(s.tmp.data(), L.ls2);
    if (!L.pre_norm)
      layer_norm_rows(h, rows, d, L.norm2.gamma, L.norm2.beta, L.norm2.epsilon, h, context);
    emit(static_cast<int>(li + 1));
  }
  return Status::ok();
}

}  // namespace npuflow

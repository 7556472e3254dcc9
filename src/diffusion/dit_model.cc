#include "diffusion/dit_model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "core/strings.h"
#include "diffusion/dit_host_ops.h"
#include "ops/device_attention.h"
#include "ops/float_linear.h"
#include "ops/host_attention.h"

namespace npuflow::diffusion {

struct DitModel::Linear {
  std::string name;
  int64_t in = 0, out = 0;
  const float* host = nullptr;           // [out][in]: into the file, or into `fused`
  std::vector<float> fused;              // rows of several tensors stacked (QKV, cross K|V)
  std::unique_ptr<PackedWeight> packed;  // null: not packed now, or the device would not take it
  bool refusal_logged = false;
  bool on_host = false;  // part of the AdaLN modulation: fp32 on the host, never packed
};

struct DitModel::Block {
  struct Modulator {
    const Linear* down = nullptr;  // [r, D]
    const Linear* up = nullptr;    // [3D, r]
  };
  Modulator self_mod, cross_mod, mlp_mod;
  std::vector<Linear*> linears;  // every projection of the block: its context
  bool pinned = true;            // packed for the session, else for each of its turns
  const Linear* qkv = nullptr;   // [3D, D]
  const Linear* self_out = nullptr;
  const float* self_q_norm = nullptr;
  const float* self_k_norm = nullptr;
  const Linear* cross_q = nullptr;
  const Linear* cross_kv = nullptr;  // [2D, Dc]
  const Linear* cross_out = nullptr;
  const float* cross_q_norm = nullptr;
  const float* cross_k_norm = nullptr;
  const Linear* fc1 = nullptr;
  const Linear* fc2 = nullptr;
};

DitModel::~DitModel() = default;

namespace {

Result<int64_t> metadata_int(const SafetensorsFile& file, const std::string& key) {
  const auto text = file.metadata(key);
  if (!text) return invalid_argument(str_cat(file.path(), ": no metadata ", key));
  const auto value = parse_int(*text);
  if (!value || *value <= 0 || *value > (int64_t{1} << 24))
    return invalid_argument(str_cat(file.path(), ": metadata ", key, " = '", *text, "'"));
  return *value;
}

}  // namespace

Result<DitConfig> read_dit_config(const SafetensorsFile& file) {
  DitConfig c;
  struct Field {
    const char* key;
    int64_t* value;
  };
  const Field fields[] = {{"dit.hidden", &c.hidden},
                          {"dit.heads", &c.heads},
                          {"dit.blocks", &c.blocks},
                          {"dit.mlp_ratio", &c.mlp_ratio},
                          {"dit.adaln_rank", &c.adaln_rank},
                          {"dit.context_dim", &c.context_dim},
                          {"dit.context_tokens", &c.context_tokens},
                          {"dit.latent_channels", &c.latent_channels},
                          {"dit.patch", &c.patch},
                          {"dit.image_tokens", &c.image_tokens}};
  for (const Field& f : fields) {
    auto value = metadata_int(file, f.key);
    if (!value.is_ok()) return value.status();
    *f.value = value.value();
  }
  if (c.hidden % c.heads != 0)
    return invalid_argument(
        str_cat(file.path(), ": hidden ", c.hidden, " is not a multiple of ", c.heads, " heads"));
  const auto split = file.metadata("dit.rope_split");
  if (!split) return invalid_argument(str_cat(file.path(), ": no metadata dit.rope_split"));
  std::vector<int64_t> parts;
  for (size_t start = 0; start <= split->size();) {
    const size_t comma = std::min(split->find(',', start), split->size());
    const auto part = parse_int(std::string_view(*split).substr(start, comma - start));
    if (!part) return invalid_argument(str_cat(file.path(), ": dit.rope_split '", *split, "'"));
    parts.push_back(*part);
    start = comma + 1;
  }
  // Even sections summing to head_dim; the h and w bases need d > 2 (theta * 4^(d / (d - 2))).
  if (parts.size() != 3 || parts[0] < 0 || parts[1] < 4 || parts[2] < 4 || parts[0] % 2 ||
      parts[1] % 2 || parts[2] % 2 || parts[0] + parts[1] + parts[2] != c.head_dim())
    return invalid_argument(str_cat(file.path(), ": dit.rope_split '", *split,
                                    "' is not three even sections (h and w >= 4) summing to ",
                                    c.head_dim()));
  c.rope_split = {parts[0], parts[1], parts[2]};
  return c;
}

Result<std::unique_ptr<DitModel>> DitModel::load(std::shared_ptr<const SafetensorsFile> file,
                                                 Device& device, const Logger& logger,
                                                 const DitLoadOptions& options) {
  std::unique_ptr<DitModel> model(new DitModel());
  auto config = read_dit_config(*file);
  if (!config.is_ok()) return config.status();
  model->config_ = config.value();
  model->file_ = file;
  model->device_ = &device;
  model->logger_ = logger;
  model->load_options_ = options;
  // Blocks after the first are packed once the residency plan says which stay (below).
  bool pack_now = true;
  Block* loading_block = nullptr;
  const DitConfig& c = model->config_;
  const int64_t d = c.hidden, r = c.adaln_rank;

  // One projection from the rows of `names` stacked, each [rows_i, in]. The AdaLN modulation's
  // own linears (timestep MLP, modulators: M=1 and a function of sigma only) stay on the host in
  // fp32 with the rest of the modulation, as seed 002 partitions Anima.
  auto add_linear = [&](const std::vector<std::string>& names,
                        const std::vector<int64_t>& rows_each, int64_t in,
                        bool on_host = false) -> Result<const Linear*> {
    auto layer = std::make_unique<Linear>();
    layer->name = join(names, "+");
    layer->in = in;
    layer->on_host = on_host;
    std::vector<TensorView> views;
    for (size_t i = 0; i < names.size(); ++i) {
      auto view = file->tensor(names[i], {rows_each[i], in});
      if (!view.is_ok()) return view.status();
      views.push_back(view.value());
      layer->out += rows_each[i];
    }
    if (views.size() == 1) {
      layer->host = views[0].data;
    } else {
      for (const TensorView& v : views)
        layer->fused.insert(layer->fused.end(), v.data, v.data + v.elements());
      layer->host = layer->fused.data();
    }
    if (!on_host) {
      if (pack_now) NPUFLOW_RETURN_IF_ERROR(model->pack(*layer));
      if (loading_block != nullptr) loading_block->linears.push_back(layer.get());
    }
    model->linears_.push_back(std::move(layer));
    return model->linears_.back().get();
  };
  auto add_vector = [&](const std::string& name, int64_t size) -> Result<const float*> {
    auto view = file->tensor(name, {size});
    if (!view.is_ok()) return view.status();
    return view.value().data;
  };
#define NPUFLOW_DIT_TAKE(target, expr)           \
  do {                                           \
    auto taken_ = (expr);                        \
    if (!taken_.is_ok()) return taken_.status(); \
    target = taken_.value();                     \
  } while (0)

  NPUFLOW_DIT_TAKE(model->x_embedder_, add_linear({"x_embedder.weight"}, {d}, c.patch_features()));
  NPUFLOW_DIT_TAKE(model->t_linear_1_, add_linear({"t_embedder.linear_1.weight"}, {d}, d, true));
  NPUFLOW_DIT_TAKE(model->t_linear_2_,
                   add_linear({"t_embedder.linear_2.weight"}, {3 * d}, d, true));
  NPUFLOW_DIT_TAKE(model->t_norm_, add_vector("t_norm.weight", d));
  const int64_t hd = c.head_dim();
  model->blocks_.resize(static_cast<size_t>(c.blocks));
  size_t shared_bytes = 0;
  for (const auto& layer : model->linears_)
    shared_bytes += layer->packed ? layer->packed->resident_bytes() : 0;
  for (int64_t b = 0; b < c.blocks; ++b) {
    Block& block = model->blocks_[b];
    loading_block = &block;
    pack_now = b == 0;  // block 0 measures what one block's context takes
    const std::string p = str_cat("blocks.", b, ".");
    auto modulator = [&](const std::string& sub, Block::Modulator& m) -> Status {
      NPUFLOW_DIT_TAKE(m.down, add_linear({p + "adaln_" + sub + ".linear_1.weight"}, {r}, d, true));
      NPUFLOW_DIT_TAKE(m.up,
                       add_linear({p + "adaln_" + sub + ".linear_2.weight"}, {3 * d}, r, true));
      return Status::ok();
    };
    NPUFLOW_RETURN_IF_ERROR(modulator("self_attn", block.self_mod));
    NPUFLOW_RETURN_IF_ERROR(modulator("cross_attn", block.cross_mod));
    NPUFLOW_RETURN_IF_ERROR(modulator("mlp", block.mlp_mod));
    NPUFLOW_DIT_TAKE(block.qkv, add_linear({p + "self_attn.q.weight", p + "self_attn.k.weight",
                                            p + "self_attn.v.weight"},
                                           {d, d, d}, d));
    NPUFLOW_DIT_TAKE(block.self_out, add_linear({p + "self_attn.o.weight"}, {d}, d));
    NPUFLOW_DIT_TAKE(block.self_q_norm, add_vector(p + "self_attn.q_norm.weight", hd));
    NPUFLOW_DIT_TAKE(block.self_k_norm, add_vector(p + "self_attn.k_norm.weight", hd));
    NPUFLOW_DIT_TAKE(block.cross_q, add_linear({p + "cross_attn.q.weight"}, {d}, d));
    NPUFLOW_DIT_TAKE(
        block.cross_kv,
        add_linear({p + "cross_attn.k.weight", p + "cross_attn.v.weight"}, {d, d}, c.context_dim));
    NPUFLOW_DIT_TAKE(block.cross_out, add_linear({p + "cross_attn.o.weight"}, {d}, d));
    NPUFLOW_DIT_TAKE(block.cross_q_norm, add_vector(p + "cross_attn.q_norm.weight", hd));
    NPUFLOW_DIT_TAKE(block.cross_k_norm, add_vector(p + "cross_attn.k_norm.weight", hd));
    NPUFLOW_DIT_TAKE(block.fc1, add_linear({p + "mlp.fc1.weight"}, {c.mlp_ratio * d}, d));
    NPUFLOW_DIT_TAKE(block.fc2, add_linear({p + "mlp.fc2.weight"}, {d}, c.mlp_ratio * d));
  }
  loading_block = nullptr;
  pack_now = true;
  NPUFLOW_DIT_TAKE(model->final_adaln_1_,
                   add_linear({"final.adaln.linear_1.weight"}, {r}, d, true));
  NPUFLOW_DIT_TAKE(model->final_adaln_2_,
                   add_linear({"final.adaln.linear_2.weight"}, {2 * d}, r, true));
  NPUFLOW_DIT_TAKE(model->final_linear_,
                   add_linear({"final.linear.weight"}, {c.latent_channels * c.patch * c.patch}, d));
#undef NPUFLOW_DIT_TAKE

  // Every block has block 0's shapes, so its packed size is every block's.
  size_t block_bytes = 0;
  for (const Linear* layer : model->blocks_[0].linears)
    block_bytes += layer->packed ? layer->packed->resident_bytes() : 0;
  for (const Linear* layer : {model->final_adaln_1_, model->final_adaln_2_, model->final_linear_})
    shared_bytes += layer->packed ? layer->packed->resident_bytes() : 0;
  model->residency_ =
      plan_block_residency(options.mem_budget_bytes, shared_bytes, block_bytes, c.blocks);
  for (int64_t b = 0; b < c.blocks; ++b) {
    Block& block = model->blocks_[b];
    block.pinned = b < model->residency_.pinned_blocks;
    for (Linear* layer : block.linears) {
      if (!block.pinned) {
        layer->packed.reset();
      } else if (b > 0) {
        NPUFLOW_RETURN_IF_ERROR(model->pack(*layer));
      }
    }
  }
  const std::string violation = memory_floor_violation(options.mem_floor_bytes);
  if (!violation.empty()) return Status(StatusCode::kResourceExhausted, violation);
  return model;
}

Status DitModel::pack(Linear& layer) {
  auto packed = pack_linear_weight(*device_, layer.host, layer.in, layer.out);
  if (packed.is_ok()) {
    layer.packed = std::move(packed).value();
  } else if (packed.status().code() == StatusCode::kUnsupported) {
    // Runs on the host reference (DeviceFallback); said once per layer, at its first pack.
    if (!layer.refusal_logged) {
      logger_.warning(
          str_cat("dit: ", layer.name, " stays on the host: ", packed.status().message()));
      layer.refusal_logged = true;
    }
  } else {
    return packed.status();
  }
  return Status::ok();
}

Status DitModel::pack_streamed_block(const Block& block) {
  const std::string violation = memory_floor_violation(load_options_.mem_floor_bytes);
  if (!violation.empty()) return Status(StatusCode::kResourceExhausted, violation);
  const auto start = std::chrono::steady_clock::now();
  for (Linear* layer : block.linears) NPUFLOW_RETURN_IF_ERROR(pack(*layer));
  counters_.pack_nanoseconds.fetch_add(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
          .count());
  counters_.block_packs.fetch_add(1);
  return Status::ok();
}

size_t DitModel::resident_bytes() const {
  size_t total = 0;
  for (const auto& layer : linears_)
    if (layer->packed) total += layer->packed->resident_bytes();
  return total;
}

Status DitModel::linear(const Linear& layer, const float* x, int64_t rows, float* y,
                        const ExecContext& exec) {
  const auto on_host = [&] {
    reference_linear(
        x, rows, layer.in, layer.out,
        [&](int64_t row, float* out) {
          std::memcpy(out, layer.host + row * layer.in, sizeof(float) * layer.in);
        },
        y, exec);
    return Status::ok();
  };
  if (layer.on_host) return on_host();
  return linear_fallback_.run(
      [&] {
        if (!layer.packed) return unsupported("the device did not take the weight");
        return run_linear(*device_, x, rows, *layer.packed, y, exec);
      },
      on_host, counters_.linear_fallbacks, logger_,
      [&](const Status& s) {
        return str_cat("dit: ", layer.name, " ran on the host: ", s.message());
      });
}

Status DitModel::self_attention(float* qkv, int64_t tokens, float* out, const ExecContext& exec) {
  const AttentionShape shape{tokens, config_.hidden, config_.heads};
  const float scale = 1.0f / std::sqrt(static_cast<float>(config_.head_dim()));
  auto on_host = [&] {
    host_attention(qkv, shape, scale, AttentionBias{}, false, out, exec);
    return Status::ok();
  };
  // The host device's attention is host_attention itself.
  if (device_->float_compute_type() != ElementType::kFloat16) return on_host();
  return attention_fallback_.run(
      [&] {
        bool expressible = false;
        Status status =
            device_attention(*device_, qkv, shape, scale, AttentionBias{}, out, exec, &expressible);
        if (status.is_ok()) counters_.attention_on_device.fetch_add(1);
        return status;
      },
      on_host, counters_.attention_fallbacks, logger_,
      [](const Status& s) {
        return str_cat("dit: self-attention ran on the host: ", s.message());
      });
}

Status DitModel::attend_context(const float* q, const float* context_kv, int64_t queries,
                                int64_t keys, float* out, const ExecContext& exec) {
  const int64_t hd = config_.head_dim(), d = config_.hidden;
  auto on_host = [&] {
    cross_attention(q, context_kv, queries, keys, config_.heads, hd, out, exec);
    return Status::ok();
  };
  if (device_->float_compute_type() != ElementType::kFloat16) return on_host();
  const CrossAttentionOperands operands{.q = q,
                                        .q_stride = d,
                                        .k = context_kv,
                                        .v = context_kv + d,
                                        .kv_stride = 2 * d,
                                        .queries = queries,
                                        .keys = keys,
                                        .heads = config_.heads,
                                        .head_dim = hd};
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  return attention_fallback_.run(
      [&] {
        Status status = device_cross_attention(*device_, operands, scale, out, exec);
        if (status.is_ok()) counters_.attention_on_device.fetch_add(1);
        return status;
      },
      on_host, counters_.attention_fallbacks, logger_,
      [](const Status& s) {
        return str_cat("dit: cross-attention ran on the host: ", s.message());
      });
}

Status DitModel::forward(const float* latent, int64_t height, int64_t width, float sigma,
                         const float* context, float* velocity, const ExecContext& exec,
                         DitTrace* trace) {
  const DitConfig& c = config_;
  const int64_t p = c.patch;
  if (height <= 0 || width <= 0 || height % p || width % p)
    return invalid_argument(
        str_cat("dit: a ", height, "x", width, " latent is not a multiple of the patch ", p));
  if (!std::isfinite(sigma)) return invalid_argument("dit: sigma is not finite");
  counters_.evaluations.fetch_add(1);
  const int64_t rows = height / p, cols = width / p, n = rows * cols, d = c.hidden;
  const int64_t features = c.patch_features(), hd = c.head_dim();

  // 1. Patchify (the padding-mask channel, index C, is zero) and embed.
  std::vector<float> patches(static_cast<size_t>(n * features), 0.0f);
  for (int64_t ch = 0; ch < c.latent_channels; ++ch)
    for (int64_t y = 0; y < height; ++y)
      for (int64_t x = 0; x < width; ++x)
        patches[((y / p) * cols + x / p) * features + ch * p * p + (y % p) * p + x % p] =
            latent[(ch * height + y) * width + x];
  std::vector<float> stream(static_cast<size_t>(n * d));
  NPUFLOW_RETURN_IF_ERROR(linear(*x_embedder_, patches.data(), n, stream.data(), exec));

  // 2. Timestep: the sinusoid, temb3 and the modulators' input silu(rmsnorm(s) * w).
  std::vector<float> sinusoid(static_cast<size_t>(d));
  const int64_t half = d / 2;
  for (int64_t k = 0; k < half; ++k) {
    const double arg = 1000.0 * sigma * std::exp(-std::log(10000.0) * double(k) / double(half));
    sinusoid[k] = static_cast<float>(std::cos(arg));
    sinusoid[half + k] = static_cast<float>(std::sin(arg));
  }
  std::vector<float> hidden_t(static_cast<size_t>(d)), temb3(static_cast<size_t>(3 * d));
  NPUFLOW_RETURN_IF_ERROR(linear(*t_linear_1_, sinusoid.data(), 1, hidden_t.data(), exec));
  for (float& u : hidden_t) u = silu(u);
  NPUFLOW_RETURN_IF_ERROR(linear(*t_linear_2_, hidden_t.data(), 1, temb3.data(), exec));
  std::vector<float> emb = sinusoid;
  rms_normalize(emb.data(), d, t_norm_);
  for (float& u : emb) u = silu(u);

  std::vector<float> low(static_cast<size_t>(c.adaln_rank)), mod(static_cast<size_t>(3 * d));
  auto modulate = [&](const Linear& down, const Linear& up, int64_t width_out) -> Status {
    NPUFLOW_RETURN_IF_ERROR(linear(down, emb.data(), 1, low.data(), exec));
    NPUFLOW_RETURN_IF_ERROR(linear(up, low.data(), 1, mod.data(), exec));
    for (int64_t i = 0; i < width_out; ++i) mod[i] += temb3[i];
    return Status::ok();
  };

  const RopeTable rope = rope_table(c, rows, cols);
  std::vector<float> zeros;
  if (context == nullptr) {
    zeros.assign(static_cast<size_t>(c.context_tokens * c.context_dim), 0.0f);
    context = zeros.data();
  }
  std::vector<float> h(static_cast<size_t>(n * d)), f(static_cast<size_t>(n * d));
  std::vector<float> qkv(static_cast<size_t>(n * 3 * d)), attended(static_cast<size_t>(n * d));
  std::vector<float> context_kv(static_cast<size_t>(c.context_tokens * 2 * d));
  std::vector<float> mlp(static_cast<size_t>(n * c.mlp_ratio * d));
  if (trace != nullptr) trace->blocks.clear();

  for (const Block& block : blocks_) {
    if (!block.pinned) NPUFLOW_RETURN_IF_ERROR(pack_streamed_block(block));
    // Self-attention with QK-norm and 3-D RoPE.
    NPUFLOW_RETURN_IF_ERROR(modulate(*block.self_mod.down, *block.self_mod.up, 3 * d));
    modulated_layernorm(stream.data(), n, d, mod.data(), mod.data() + d, h.data(), exec);
    NPUFLOW_RETURN_IF_ERROR(linear(*block.qkv, h.data(), n, qkv.data(), exec));
    normalize_heads(qkv.data(), n, 3 * d, 0, c.heads, hd, block.self_q_norm, exec);
    normalize_heads(qkv.data(), n, 3 * d, d, c.heads, hd, block.self_k_norm, exec);
    apply_rope(qkv.data(), n, 3 * d, 0, c.heads, hd, rope);
    apply_rope(qkv.data(), n, 3 * d, d, c.heads, hd, rope);
    NPUFLOW_RETURN_IF_ERROR(self_attention(qkv.data(), n, attended.data(), exec));
    NPUFLOW_RETURN_IF_ERROR(linear(*block.self_out, attended.data(), n, f.data(), exec));
    gated_residual(stream.data(), f.data(), mod.data() + 2 * d, n, d);

    // Cross-attention on the context, QK-norm, no RoPE.
    NPUFLOW_RETURN_IF_ERROR(modulate(*block.cross_mod.down, *block.cross_mod.up, 3 * d));
    modulated_layernorm(stream.data(), n, d, mod.data(), mod.data() + d, h.data(), exec);
    NPUFLOW_RETURN_IF_ERROR(linear(*block.cross_q, h.data(), n, attended.data(), exec));
    NPUFLOW_RETURN_IF_ERROR(
        linear(*block.cross_kv, context, c.context_tokens, context_kv.data(), exec));
    normalize_heads(attended.data(), n, d, 0, c.heads, hd, block.cross_q_norm, exec);
    normalize_heads(context_kv.data(), c.context_tokens, 2 * d, 0, c.heads, hd, block.cross_k_norm,
                    exec);
    NPUFLOW_RETURN_IF_ERROR(
        attend_context(attended.data(), context_kv.data(), n, c.context_tokens, h.data(), exec));
    NPUFLOW_RETURN_IF_ERROR(linear(*block.cross_out, h.data(), n, f.data(), exec));
    gated_residual(stream.data(), f.data(), mod.data() + 2 * d, n, d);

    // GELU MLP.
    NPUFLOW_RETURN_IF_ERROR(modulate(*block.mlp_mod.down, *block.mlp_mod.up, 3 * d));
    modulated_layernorm(stream.data(), n, d, mod.data(), mod.data() + d, h.data(), exec);
    NPUFLOW_RETURN_IF_ERROR(linear(*block.fc1, h.data(), n, mlp.data(), exec));
    for (float& u : mlp) u = gelu_tanh(u);
    NPUFLOW_RETURN_IF_ERROR(linear(*block.fc2, mlp.data(), n, f.data(), exec));
    gated_residual(stream.data(), f.data(), mod.data() + 2 * d, n, d);
    if (!block.pinned)
      for (Linear* layer : block.linears) layer->packed.reset();
    if (trace != nullptr) trace->blocks.push_back(stream);
  }

  // 4. Final layer: shift and scale only, then unpatchify into the velocity.
  NPUFLOW_RETURN_IF_ERROR(modulate(*final_adaln_1_, *final_adaln_2_, 2 * d));
  modulated_layernorm(stream.data(), n, d, mod.data(), mod.data() + d, h.data(), exec);
  const int64_t out_features = c.latent_channels * p * p;
  std::vector<float> tokens_out(static_cast<size_t>(n * out_features));
  NPUFLOW_RETURN_IF_ERROR(linear(*final_linear_, h.data(), n, tokens_out.data(), exec));
  for (int64_t ch = 0; ch < c.latent_channels; ++ch)
    for (int64_t y = 0; y < height; ++y)
      for (int64_t x = 0; x < width; ++x)
        velocity[(ch * height + y) * width + x] =
            tokens_out[((y / p) * cols + x / p) * out_features + ch * p * p + (y % p) * p + x % p];
  if (trace != nullptr) trace->final_tokens = std::move(tokens_out);
  return Status::ok();
}

}  // namespace npuflow::diffusion

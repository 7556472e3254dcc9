// One claimed vision-transformer encoder as a resident plan: patch embedding, class token and
// position embedding, L pre- or post-LN blocks and the exits the graph reads (last hidden state,
// intermediate taps, each optionally through a LayerNorm). Every projection weight is packed once
// onto the device at create(); the residual stream stays fp32 on the host; the token count is
// padded to a multiple of 4 with zero rows (the RK3588 matmul contract, M % 4); projections run as
// device matmuls (one call site, `project`: float, fp16, or dynamic int8 as the graph's
// DynamicQuantizeLinear -> MatMulInteger), attention, norms and activations as host ops. Images
// go through the layers one at a time, or all together when a dynamic int8 projection's range
// must span the batch.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/log.h"
#include "core/parallel.h"
#include "core/status.h"
#include "device/device.h"
#include "ops/device_fallback.h"
#include "ops/vector_math.h"
#include "quant/integer_matmul.h"

namespace npuflow {

struct AttentionBias;  // ops/host_attention.h

// The MLP activation a claim found: the vector kernels' own enum (one list of GELU forms).
using EncoderActivation = VectorActivation;
const char* encoder_activation_name(EncoderActivation activation);
// A gated MLP (GLU): fc1 writes 2I columns; the activation of one half times the other half
// feeds fc2. kActFirst: act(first half) * second half (ModernBERT's GeGLU).
enum class EncoderGlu { kNone, kActFirst, kActSecond };

// A borrowed fp32 tensor (constant data from the graph, valid during create() only).
struct FloatRef {
  const float* data = nullptr;
  std::vector<int64_t> shape;
  int64_t count() const;
};

// A dynamic int8 linear (DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul): the integer
// weight behind DenseWeights::weight (its dequantized reading), run natively. Borrowed.
struct DynamicInt8Projection {
  ElementType type = ElementType::kInt8;  // int8 or uint8
  const void* data = nullptr;             // K x N, as `weight`
  std::vector<int32_t> zero_points;       // 1 or N
  std::vector<float> scales;              // 1 or N
};

struct DenseWeights {
  FloatRef weight;               // K x N (MatMul) or N x K (Gemm transB=1)
  bool transposed = false;       // weight is N x K
  std::optional<FloatRef> bias;  // N
  int64_t col_begin = 0;         // output columns [col_begin, col_begin + cols) of weight and bias
  int64_t cols = 0;              // 0: all N columns
  // Set: the projection quantizes its input as DynamicQuantizeLinear does (over the whole
  // [B, T, K] tensor) and runs an int8 GEMM with the graph's float epilogue, bit for bit.
  std::optional<DynamicInt8Projection> dynamic;
};

struct NormWeights {
  FloatRef gamma;
  std::optional<FloatRef> beta;
  float epsilon = 1e-5f;
};

// Where a side operand (class token, position embedding) comes from.
struct SideOperand {
  bool present = false;
  std::optional<FloatRef> constant;  // resolved at create()
  int64_t input_index = -1;          // else a runtime input of the fused node
  // A runtime rotary table stored transposed (ORT's transpose optimizer): the perm that lays it
  // out as [.., T, head_dim] at rank 4, applied at each run; empty when it already is.
  std::vector<int64_t> perm;
};

// SAM's ViT-Det attention geometry. Each sequence's tokens are a grid_h x grid_w grid, row-major.
// window > 0: after the block's first LayerNorm the grid is zero-padded to multiples of `window`
// and cut into window x window windows, each attending within itself (the padding's rows take part
// as SAM's do: zeros into q/k/v); the results go back to their tokens before the output projection.
// window 0: the whole grid attends. rel_h [q rows][k rows][head_dim] and rel_w [q cols][k cols]
// [head_dim] over the attended grid (window x window, or the whole grid): the decomposed
// relative-position bias, (q . rel_h) added per key row and (q . rel_w) per key column to the
// scaled scores (q unscaled, as SAM's add_decomposed_rel_pos).
struct GridAttention {
  int64_t grid_h = 0, grid_w = 0, window = 0;
  std::optional<FloatRef> rel_h, rel_w;
};

struct EncoderLayerWeights {
  bool pre_norm = true;        // pre-LN: x + f(LN(x)); post-LN: LN(x + f(x))
  bool attention_norm = true;  // pre-LN only: false when the attention reads x itself
  NormWeights norm1, norm2;
  DenseWeights q, k, v, o, fc1, fc2;
  std::optional<FloatRef> layer_scale1, layer_scale2;  // LayerScale (DINOv2): per-channel gains
  float attention_scale = 1.0f;  // the product of every scale the exporter put on q, k or scores
  bool softmax_nan_to_zero = false;  // NaN probabilities (a fully masked row) become 0
  EncoderActivation activation = EncoderActivation::kGeluErf;
  EncoderGlu glu = EncoderGlu::kNone;
  // The side input added to the scaled scores (broadcastable to [B, heads, T, T]), -1: none.
  int64_t attention_bias_input = -1;
  // Rotary position embedding on q and k: cos and sin broadcastable to [B|1, 1, T, head_dim].
  SideOperand rope_cos, rope_sin;
  // This many consecutive sequences of the batch attend as one sequence (a windowed encoder's
  // global block: its windows are the sequences); 1: each sequence attends within itself.
  int64_t attention_group = 1;
  // SAM's ViT-Det attention (see GridAttention); nullopt: the sequence attends as it is.
  std::optional<GridAttention> grid;
};

struct PatchEmbedWeights {
  FloatRef weight;  // D x C x kh x kw
  std::optional<FloatRef> bias;
  int64_t stride_h = 1, stride_w = 1;
};

struct EncoderExit {
  int stream_index = 0;  // 0: the embedding output (after any pre-encoder norm), i: after layer i
  int norm = -1;         // index into exit_norms, or -1 for the raw stream
};

struct VitEncoderSpec {
  int64_t hidden = 0;
  int64_t heads = 0;
  bool from_pixels = true;  // false: the plan starts at the residual stream (a [B,T,D] input)
  PatchEmbedWeights patch;
  SideOperand cls;                      // [.., n_prefix, D] tokens before the patches
  SideOperand pos;                      // [.., T, D] added after the concat
  std::optional<NormWeights> pre_norm;  // CLIP's pre-encoder LayerNorm
  // Register tokens: constant [.., R, D] rows inserted after the first register_position tokens,
  // after the position embedding (they have no position).
  SideOperand registers;
  int64_t register_position = 0;
  std::vector<EncoderLayerWeights> layers;
  std::vector<NormWeights> exit_norms;
  std::vector<EncoderExit> exits;
  // On an fp16 device, attention over at least this many tokens runs on the device
  // (Device::attention_fp16, the host again for a call it refuses); nullopt: always the host.
  std::optional<int64_t> device_attention_min_tokens;
};

// The last layer whose softmax fp16 rounding before it would reorder (an attention scale over
// 16x 1/sqrt(head_dim), or not finite), with why in `why`; -1 when there is none.
int64_t last_fp16_attention_hazard(const VitEncoderSpec& spec, std::string* why);

// A runtime tensor handed in by the front end.
struct FloatInput {
  const float* data = nullptr;
  std::vector<int64_t> shape;
};

class VitEncoder {
 public:
  // host: the session's host reference, on which the projections and attention a device that
  // computes fp16 refuses or fails rerun in fp32 (route/device_selection.h); null builds one with
  // default options. Unused when `device` computes fp32.
  static Result<std::unique_ptr<VitEncoder>> create(std::string name, const VitEncoderSpec& spec,
                                                    std::shared_ptr<Device> device, Logger logger,
                                                    std::shared_ptr<Device> host = nullptr);

  // `main` is the pixels [B,C,H,W] (from_pixels) or the stream [B,T,D]; `side` the runtime inputs
  // by their index. Returns the output shape every exit has: [B, T, D].
  Result<std::vector<int64_t>> output_shape(const FloatInput& main,
                                            const std::vector<FloatInput>& side) const;
  Status run(const FloatInput& main, const std::vector<FloatInput>& side,
             const std::vector<float*>& exits, const ExecContext& context) const;

  ~VitEncoder();
  const std::string& name() const { return name_; }
  size_t resident_bytes() const;
  int64_t hidden() const { return hidden_; }
  size_t exit_count() const { return exits_.size(); }

 private:
  struct Dense {
    // On the session's device: fp32 where it computes fp32 (host), else fp16 (an NPU), with
    // fp32 results. `fallback` (host, fp32) serves calls the device refuses or fails.
    std::unique_ptr<PackedWeight> packed;
    bool fp16 = false;
    std::unique_ptr<PackedWeight> fallback;
    // A dynamic int8 projection instead (DenseWeights::dynamic): its int8 weight resident on
    // the session's device, the activation quantized over the whole call.
    std::unique_ptr<IntegerMatMul> dynamic;
    std::vector<float> bias;
    int64_t k = 0, n = 0;
  };
  struct Norm {
    std::vector<float> gamma, beta;
    float epsilon = 1e-5f;
  };
  struct Rope {
    SideOperand cos_spec, sin_spec;
    std::vector<float> cos, sin;  // constant tables
    std::vector<int64_t> cos_shape, sin_shape;
  };
  struct Layer {
    bool pre_norm = true;
    bool attention_norm = true;
    EncoderGlu glu = EncoderGlu::kNone;
    int64_t bias_input = -1;
    std::optional<Rope> rope;
    Norm norm1, norm2;
    Dense qkv;  // q, k and v side by side: one device matmul
    Dense o, fc1, fc2;
    std::vector<float> ls1, ls2;
    float scale = 1.0f;
    bool nan_to_zero = false;
    int64_t attention_group = 1;
    struct Grid {  // no member initializers: clang cannot construct it in the incomplete class
      int64_t grid_h, grid_w, window;
      // [queries][head_dim][keys] (the factors' loop runs over keys): empty: no relative bias.
      std::vector<float> rel_h, rel_w;
    };
    std::optional<Grid> grid;
    EncoderActivation activation = EncoderActivation::kGeluErf;
  };
  struct Scratch;
  // A grid layer's windows (rows, [q|k|v], context) and relative-position factors.
  struct GridScratch {
    std::vector<float> windows, qkv, ctx, rel_rows, rel_cols;
  };

  VitEncoder() = default;
  // Packs a dense layer (or several side by side along N) once onto the device; `keep_exact`
  // keeps it off an fp16 device (ops/vit_encoder_dense.cc).
  Result<Dense> pack(const std::vector<const DenseWeights*>& parts, bool keep_exact);
  Result<Dense> pack_dynamic(const std::vector<const DenseWeights*>& parts, int64_t k,
                             int64_t n_total, Dense dense);
  Status project(const Dense& dense, const float* x, int64_t rows_padded, int64_t rows, float* y,
                 const ExecContext& context) const;
  // One image's (or sequence's) embedding into its `tokens` rows at `h`.
  Status embed(const float* main, const float* cls, const float* pos, int64_t tokens,
               int64_t patch_rows, int64_t grid_w, int64_t channels, int64_t height, int64_t width,
               float* h, Scratch& scratch, const ExecContext& context) const;
  // One attention call of `span` rows of [q|k|v] into ctx: on the device when it takes attention
  // of that size past the layers kept exact, else (or when it refuses or fails) on the host.
  Status attend(const Layer& layer, size_t layer_index, const float* qkv, int64_t span,
                const AttentionBias& bias, float* ctx, const ExecContext& context) const;
  // A grid layer's q/k/v projection and attention (ops/vit_encoder_attention.cc): `attn_in` and
  // ctx are `images` sequences of `tokens` rows in stream order.
  Status grid_attention(const Layer& layer, size_t layer_index, const float* attn_in,
                        int64_t tokens, int64_t images, float* ctx, GridScratch& scratch,
                        const ExecContext& context) const;
  // Rows padded to the device matmul's row multiple.
  static int64_t pad_rows(int64_t rows);
  // The layers over `images` embedded images of `tokens` rows each, stacked in scratch.h, and
  // the exits of images [first_image, first_image + images).
  Status run_layers(int64_t tokens, int64_t images, int64_t first_image,
                    const std::vector<float*>& exits, Scratch& scratch,
                    const ExecContext& context) const;

  std::string name_;
  std::shared_ptr<Device> device_;
  std::shared_ptr<Device> host_;  // the exact fallback when device_ is not the host
  DeviceFallback projection_fallback_, attention_fallback_;
  mutable std::atomic<int64_t> fallback_calls_{0};  // projections and attention rerun on the host
  mutable std::atomic<bool> inexpressible_attention_logged_{false};  // fp16 or one mask cannot
  std::optional<int64_t> device_attention_min_tokens_;
  int64_t last_hazard_ = -1;  // layers up to this one keep attention on the host
  Logger logger_;
  int64_t hidden_ = 0, heads_ = 0;
  bool from_pixels_ = true;
  bool grid_layers_ = false;  // a layer attends over a token grid: the stream may be [B, H, W, D]
  Dense patch_;
  int64_t channels_ = 0, kernel_h_ = 0, kernel_w_ = 0, stride_h_ = 1, stride_w_ = 1;
  SideOperand cls_spec_, pos_spec_;
  std::vector<float> cls_, pos_;  // constant side operands
  std::vector<int64_t> cls_shape_, pos_shape_;
  std::vector<float> registers_;  // register_rows_ x hidden_
  int64_t register_rows_ = 0, register_position_ = 0;
  std::optional<Norm> pre_norm_;
  std::vector<Layer> layers_;
  // Some projection is dynamic int8: its quantization spans the batch, so every image of it
  // goes through each layer together (one pass); else one image per pass.
  bool batch_wide_ = false;
  // The sequences a pass must hold whole: every layer's attention group divides it.
  int64_t sequence_group_ = 1;
  std::vector<Norm> exit_norms_;
  std::vector<EncoderExit> exits_;
  mutable std::mutex mutex_;
  std::unique_ptr<Scratch> scratch_;
};

}  // namespace npuflow

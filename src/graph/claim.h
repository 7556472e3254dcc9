// Claims are data (DESIGN.md principle 2): a matcher returns what it would run as one fused node,
// with every parameter the kernel needs, or a refusal with a stable reason key and a detail.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "graph/graph_view.h"
#include "ops/conv2d.h"
#include "ops/conv_transpose.h"
#include "ops/tensor_program.h"
#include "ops/vit_encoder.h"
#include "quant/integer_matmul.h"
#include "quant/qdq_epilogue.h"

namespace npuflow {

enum class ClaimKind {
  kQdqMatMul,
  kVisionEncoder,
  kIntegerMatMul,
  kTensorProgram,
  kFloatMatMul,
  kConvTranspose,
  kConv
};

// One GEMM a claim (or the CPU EP, for what is not claimed) will run per inference: what
// `npuflow plan` prices. rows is -1 when it depends on a symbolic dimension.
struct GemmWork {
  std::string name;
  int64_t rows = -1;
  int64_t k = 0;
  int64_t n = 0;
  ElementType type = ElementType::kFloat32;  // the operand type the device would see
  bool attention = false;  // a score/value matmul (contraction over head_dim or tokens)
};

const char* claim_kind_name(ClaimKind kind);

struct QdqMatMulClaim {
  std::string matmul_output;  // identifies the group again at compile time
  std::string weight_name;    // constant row-major K x N initializer
  ElementType weight_type = ElementType::kInt8;
  std::string activation_name;                       // the fused node's activation input
  ElementType activation_type = ElementType::kInt8;  // the quantized activation type
  bool activation_dequantized = false;  // a shared DequantizeLinear stays outside: input is float
  std::string output_name;
  QdqGemmSpec spec;
  // spec.x_per_row: the activation's scales and zero points per row, along axis `x_axis` of it:
  // constants here (one, or one per index of that axis), or the runtime values named.
  std::vector<float> x_row_scales;
  std::vector<int32_t> x_row_zero_points;
  std::string x_scale_input, x_zero_point_input;
  int64_t x_axis = 0;
};

// A MatMulInteger group (graph/integer_matmul_matcher.h): dynamic int8 as quantize_dynamic emits
// it, or a MatMulInteger with constant zero points. Runtime values are named so Compile finds them
// among the fused node's inputs again; constants are copied (they are small) except the weight.
struct IntegerMatMulClaim {
  std::string matmul_output;  // the MatMulInteger's output: identifies the group at compile time
  std::string weight_name;    // constant row-major K x N initializer
  ElementType weight_type = ElementType::kInt8;
  // The activation: a float input the group quantizes itself (its DynamicQuantizeLinear is
  // claimed), or the 8-bit A with its zero point, a runtime scalar (a shared
  // DynamicQuantizeLinear's) or a constant.
  bool quantize_inside = false;
  std::string activation_name;
  ElementType activation_type = ElementType::kUInt8;  // of the 8-bit A
  std::string activation_zero_point_name;             // runtime zero point; "" when constant
  int32_t activation_zero_point = 0;
  std::string activation_scale_name;  // float output with a shared DynamicQuantizeLinear
  std::string output_name;
  IntegerMatMulSpec spec;
  // A float MatMul taken as int8 (kFloatMatMul, NPUFLOW_FLOAT_MATMUL=int8): the weight is a float
  // initializer quantized per column at compile time, the float activation per row at run time.
  bool quantize_rows = false;
};

// A vision-transformer encoder: every weight by the name of its constant initializer, so Compile
// can read them from the fused subgraph. Names of runtime values identify the fused node's inputs
// and outputs again.
struct DenseRef {
  std::string weight;
  bool transposed = false;  // Gemm transB=1: weight is N x K
  std::string bias;         // "" when there is none
  // Output columns [col_begin, col_begin + cols) of the weight and bias (cols 0: all of N). A
  // fused QKV projection names its one weight three times, as columns [0,D), [D,2D), [2D,3D).
  int64_t col_begin = 0;
  int64_t cols = 0;
};
struct NormRef {
  std::string gamma, beta;  // beta "" when there is none
  float epsilon = 1e-5f;
};
// A class token or position embedding: a constant (possibly gathered from a constant table by
// constant indices, as nn.Embedding(position_ids) exports) or a runtime input of the fused node.
struct SideRef {
  bool present = false;
  std::string constant;        // a constant initializer ("" if not constant)
  std::string gather_indices;  // with `constant` as the table: rows gathered at compile time
  std::string runtime;         // else the fused node's input of that name
  // Else values the matcher derived from constants (a rotary table read off its subgraph).
  std::vector<float> values;
  std::vector<int64_t> values_shape;
};
// SAM's ViT-Det attention on a channels-last [B, grid_h, grid_w, D] stream: windows of `window`
// tokens a side cut from the zero-padded grid (0: the whole grid attends), with the decomposed
// relative-position tables [q][k][head_dim] of the attended rows and columns (empty: none).
struct GridRef {
  int64_t grid_h = 0, grid_w = 0, window = 0;
  std::vector<float> rel_h, rel_w;
  std::vector<int64_t> rel_h_shape, rel_w_shape;
};
struct EncoderLayerRef {
  bool pre_norm = true;
  NormRef norm1, norm2;
  DenseRef q, k, v, o, fc1, fc2;
  bool fused_qkv = false;  // q, k and v are the three column blocks of one projection
  std::string layer_scale1, layer_scale2;  // "" when there is none
  float attention_scale = 1.0f;
  std::string attention_bias;        // the runtime value added to the scaled scores, "" for none
  bool softmax_nan_to_zero = false;  // Where(IsNaN(P), 0, P): a fully masked row gives zeros
  EncoderActivation activation = EncoderActivation::kGeluErf;
  EncoderGlu glu = EncoderGlu::kNone;  // a gated MLP: fc1's two halves, one activated
  // A pre-LN block whose attention reads the stream itself (ModernBERT's first layer).
  bool attention_norm = true;
  // Rotary position embedding on q and k: x cos + rotate_half(x) sin, with cos and sin
  // broadcast to [.., T, head_dim] (rope_cos.present false: none).
  SideRef rope_cos, rope_sin;
  // Constant tables stored transposed (ORT's transpose optimizer): the perm that lays them out
  // as [.., T, head_dim] at rank 4; empty when they already are.
  std::vector<int64_t> rope_perm;
  // Windowed encoders (RF-DETR's DINOv2): this many consecutive sequences of the stream attend as
  // one (a global block over its windows); 1: each sequence attends within itself.
  int64_t attention_group = 1;
  std::optional<GridRef> grid;  // SAM's ViT-Det attention, or none
};
struct EncoderExitRef {
  std::string value;  // the graph value it writes
  int stream_index = 0;
  int norm = -1;
};
struct VisionEncoderClaim {
  std::string family;  // vit | clip | siglip | dinov2 | depth_anything
  int64_t hidden = 0;
  int64_t heads = 0;
  std::string heads_source;  // how the head count was found: graph | knob
  bool from_pixels = true;
  // Matched on a QDQ graph's float reading (NPUFLOW_QUANT=fp16): weights read through their
  // DequantizeLinear, activation Q/DQ pairs dropped.
  bool dequantized = false;
  // How its weights are quantized (dequantized only): "dynamic_int8" (DynamicQuantizeLinear ->
  // MatMulInteger linears) or "qdq" (DequantizeLinear weights). The CPU EP runs the two forms at
  // different speeds, so a measured cost vouches only for its own form.
  std::string quant_form;
  std::string input;  // pixels [B,C,H,W] or the stream [B,T,D]
  std::string patch_weight, patch_bias;
  int64_t stride_h = 1, stride_w = 1;
  SideRef cls, pos;
  // Register tokens (DINOv2 with registers): register_count constant rows inserted after the
  // first register_position tokens of the embedding, after the position embedding.
  SideRef registers;
  int64_t register_position = 0;
  int64_t register_count = 0;
  std::optional<NormRef> pre_norm;
  std::vector<EncoderLayerRef> layers;
  std::vector<NormRef> exit_norms;
  std::vector<EncoderExitRef> exits;
  // Runtime values the claim computes itself from its inputs (a text encoder's embedding sum,
  // its attention masks, rotary tables from the sequence length), by an exact tensor program;
  // each of `input`, an attention bias or a runtime side operand that names one of its outputs
  // is read from there instead of from a fused node input.
  TensorProgram program;
  std::string note;  // e.g. why the embedding stayed on the CPU EP
};

// A claimed convolution's float input and output by name, its constant weight and optional
// constant bias [oc] by initializer name.
struct ConvolutionRef {
  std::string input, output, weight, bias;  // bias "" when there is none
};

// A ConvTranspose node (graph/conv_transpose_matcher.h); weight [ic][oc][kh][kw].
struct ConvTransposeClaim : ConvolutionRef {
  ConvTransposeSpec spec;
};

// A Conv node (graph/conv_matcher.h); weight [oc][ic][kh][kw].
struct ConvClaim : ConvolutionRef {
  ConvSpec spec;
};

struct Claim {
  ClaimKind kind = ClaimKind::kQdqMatMul;
  std::vector<NodeId> nodes;
  std::string anchor_name;  // the main node's name, for logs
  std::vector<GemmWork> work;
  QdqMatMulClaim qdq;
  IntegerMatMulClaim integer;
  VisionEncoderClaim encoder;
  ConvTransposeClaim conv_transpose;
  ConvClaim conv;
  TensorProgram program;  // kTensorProgram (the program_ops test knob)
};

struct Refusal {
  NodeId node = kNoNode;
  std::string node_name;
  std::string reason;  // stable key, e.g. "scale_along_k"
  std::string detail;
};

struct ClaimSet {
  int candidates = 0;  // nodes a matcher looked at seriously (e.g. MatMuls fed by a weight DQ)
  std::vector<Claim> claims;
  std::vector<Refusal> refusals;
};

}  // namespace npuflow

// The device interface: the primitive set every device (host, sim, rocket, xdna) offers. Ops
// compose these primitives; a device that cannot take a call returns kUnsupported and the caller
// runs the same primitive on the host device (DESIGN.md principles 3 and 5).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "core/element_type.h"
#include "core/parallel.h"
#include "core/status.h"

namespace npuflow {

// A constant K x N weight in the device's own resident layout, packed once per session. group is
// the K group of a group-wise weight (0 otherwise).
class PackedWeight {
 public:
  PackedWeight(int64_t k, int64_t n, ElementType type, int64_t group = 0)
      : k_(k), n_(n), type_(type), group_(group) {}
  virtual ~PackedWeight() = default;
  PackedWeight(const PackedWeight&) = delete;
  PackedWeight& operator=(const PackedWeight&) = delete;

  int64_t k() const { return k_; }
  int64_t n() const { return n_; }
  ElementType type() const { return type_; }
  int64_t group() const { return group_; }
  virtual size_t resident_bytes() const = 0;

 private:
  int64_t k_;
  int64_t n_;
  ElementType type_;
  int64_t group_;
};

struct DeviceOptions {
  // Threads a device may start itself when the caller lends no pool (ExecContext); 0: one per
  // core.
  int threads = 0;
  // Host device only: run int8 GEMMs on the float32 kernels (exactly, host/float_exact_int8.h)
  // even where oneDNN's int8 kernel is exact (it is probed at start); lets the tests cover that
  // path on any CPU.
  bool float_int8 = false;
  // Host device only: an int8 GEMM of at most this many rows runs the few-rows kernel
  // (host/vnni_rows_gemm.h) instead of oneDNN, where oneDNN packed its VNNI layout. -1: the
  // measured default (host_device.cc); 0: never. Lets the tests pick either path.
  int few_rows_max = -1;
};

// Receives finished int32 results: a block of `rows` x `cols` at (row, col) of the M x N result,
// with row stride `ld`. A device may call it concurrently from worker threads for disjoint
// blocks; the data is valid only during the call.
using Int32BlockSink = std::function<void(int64_t row, int64_t col, int64_t rows, int64_t cols,
                                          const int32_t* data, int64_t ld)>;

// One multi-head attention call in fp16, in librocketnpu's flash-attention layout (head-major,
// every array dense, binary16 bit patterns). For query head h and its kv head h / (heads /
// kv_heads):
//   S = scale * Q_h K_kv^T + mask;  P = softmax(S) over the keys;  out_h = P V_kv
// With softcap > 0 (Gemma 2's logit soft-cap, as ggml's FLASH_ATTN_EXT and librocketnpu define
// it) the scaled scores are capped before the mask: S = softcap * tanh(scale Q_h K_kv^T / softcap)
// + mask.
// q: [heads][tokens][head_dim]; k: [kv_heads][kv][head_dim]; v: [kv_heads][dv][kv] (transposed);
// mask: [tokens][kv] additive, shared by every head (nullptr: none); out: [heads][tokens][dv].
// With a relative bias (below) its terms follow the mask: S = (scaled + mask + row) + col, in fp32.
// A query row whose scores are all -inf gets zeros.
//
// A decomposed relative-position bias (SAM's ViT-Det attention), given by its factors and added
// per score tile, never as a tokens x kv array: the keys form a grid_h x grid_w grid (kv = grid_h *
// grid_w; key j sits at row j / grid_w, column j % grid_w), and the score of head h, query i, key j
// gets rows[(h * tokens + i) * grid_h + j / grid_w] + cols[(h * tokens + i) * grid_w + j % grid_w].
// rows and cols are fp16 [heads][tokens][grid_h] and [heads][tokens][grid_w] (the model's Q_h R_h^T
// and Q_h R_w^T). The factors are per head, so a windowed block batches its windows as the heads of
// one call.
struct Fp16RelativeBias {
  int64_t grid_h = 0, grid_w = 0;
  const uint16_t* rows = nullptr;
  const uint16_t* cols = nullptr;
  bool present() const { return rows != nullptr || cols != nullptr; }
};

struct Fp16Attention {
  int64_t tokens = 0, kv = 0, head_dim = 0, dv = 0, heads = 0, kv_heads = 0;
  float scale = 1.0f;
  const uint16_t* q = nullptr;
  const uint16_t* k = nullptr;
  const uint16_t* v = nullptr;
  const uint16_t* mask = nullptr;
  uint16_t* out = nullptr;
  float softcap = 0.0f;       // 0: none
  Fp16RelativeBias relative;  // none unless present()
};

// invalid_argument for a call no device could take (empty shapes, null operands, heads not a
// multiple of kv_heads, a soft-cap that is negative or not finite, a relative bias with one factor
// or a grid that is not kv); OK otherwise.
Status check_attention_call(const Fp16Attention& call);

// One raw score (the unscaled Q K^T dot product) scaled, and capped where the call has a soft-cap:
// the step every device's attention shares before the mask is added.
inline float scaled_attention_score(const Fp16Attention& call, float dot) {
  const float scaled = call.scale * dot;
  return call.softcap > 0.0f ? call.softcap * std::tanh(scaled / call.softcap) : scaled;
}

// Adds the relative bias of head `head`, query `query` to its kv scores (the mask already in):
// scores[j] = (scores[j] + row) + col in fp32, the order every device keeps. No-op without one.
void add_relative_bias(const Fp16Attention& call, int64_t head, int64_t query, float* scores);

// Bytes of bias one call hands the device: the dense mask and the relative bias's factors.
int64_t attention_bias_bytes(const Fp16Attention& call);

// One 2-D convolution in fp16 (batch 1), in librocketnpu's layout (rocket_conv.h), every array
// dense and row-major, binary16 bit patterns:
//   input [ic][ih][iw]; weight [oc][ic][kh][kw] (direct) or [oc][1][kh][kw] (depthwise, oc == ic);
//   out [oc][oh][ow], oh = conv2d_output_height(call), ow = conv2d_output_width(call):
//   out[o][y][x] = sum_{c, i, j} weight[o][c][i][j] *
//                  input[c][y * stride_y + i * dil_y - pad_top][x * stride_x + j * dil_x -
//                  pad_left]
// (depthwise: c == o only). The padding is symmetric (pad_top also below, pad_left also right) and
// reads zeros.
struct Fp16Conv2d {
  int64_t ic = 0, ih = 0, iw = 0, oc = 0, kh = 0, kw = 0;
  int64_t stride_y = 1, stride_x = 1, pad_top = 0, pad_left = 0, dil_y = 1, dil_x = 1;
  bool depthwise = false;
  const uint16_t* input = nullptr;
  const uint16_t* weight = nullptr;
  uint16_t* out = nullptr;
};

// One 2-D transposed convolution in fp16 (batch 1), librocketnpu's layout: input [ic][ih][iw];
// weight [ic][oc][kh][kw] (direct, ONNX/PyTorch order) or [c][1][kh][kw] (depthwise, oc == ic);
// out [oc][oh][ow] with oh = (ih - 1) * stride_y - 2 * pad_top + dil_y * (kh - 1) + opad_y + 1 (ow
// likewise). Each input pixel scatters a weighted kernel into the output:
//   out[o][y][x] = sum over c, i, j and input pixels (r, s) with
//                  y = r * stride_y - pad_top + i * dil_y, x = s * stride_x - pad_left + j * dil_x
//                  of input[c][r][s] * weight[c][o][i][j]   (depthwise: c == o only).
// opad_* is ONNX's output_padding (a trailing border, < the stride).
struct Fp16ConvTranspose2d {
  int64_t ic = 0, ih = 0, iw = 0, oc = 0, kh = 0, kw = 0;
  int64_t stride_y = 1, stride_x = 1, pad_top = 0, pad_left = 0, opad_y = 0, opad_x = 0;
  int64_t dil_y = 1, dil_x = 1;
  bool depthwise = false;
  const uint16_t* input = nullptr;
  const uint16_t* weight = nullptr;
  uint16_t* out = nullptr;
};

// Output extents; 0 where the padded input is shorter than the dilated kernel.
int64_t conv2d_output_height(const Fp16Conv2d& call);
int64_t conv2d_output_width(const Fp16Conv2d& call);
int64_t conv_transpose2d_output_height(const Fp16ConvTranspose2d& call);
int64_t conv_transpose2d_output_width(const Fp16ConvTranspose2d& call);

// invalid_argument for a call no device could take (a non-positive extent, stride or dilation, a
// negative pad, null operands, depthwise with oc != ic, an empty output, output padding not below
// the stride); OK otherwise.
Status check_conv2d_call(const Fp16Conv2d& call);
Status check_conv_transpose2d_call(const Fp16ConvTranspose2d& call);

class Device {
 public:
  virtual ~Device() = default;

  virtual std::string_view name() const = 0;
  virtual std::string description() const = 0;

  // Packs a row-major K x N int8 weight. The source may be freed afterwards.
  virtual Result<std::unique_ptr<PackedWeight>> pack_int8_weight(const int8_t* weight, int64_t k,
                                                                 int64_t n) = 0;
  // c[m][n] = sum_k a[m][k] * w[k][n], exactly, in int32. a is int8 or uint8, row-major M x K.
  virtual Status gemm_int8(const void* a, ElementType a_type, int64_t m, const PackedWeight& w,
                           int32_t* c, const ExecContext& context) = 0;

  // The same GEMM, handing results to `sink` block by block as they finish, so a caller can
  // apply its epilogue while the block is hot and never hold all M x N accumulators. The default
  // runs gemm_int8 into one buffer and hands it over whole.
  virtual Status gemm_int8_blocks(const void* a, ElementType a_type, int64_t m,
                                  const PackedWeight& w, const Int32BlockSink& sink,
                                  const ExecContext& context);

  // Packs a row-major K x N fp32 weight.
  virtual Result<std::unique_ptr<PackedWeight>> pack_float_weight(const float* weight, int64_t k,
                                                                  int64_t n) = 0;
  // c[m][n] = sum_k a[m][k] * w[k][n] in the device's float arithmetic.
  virtual Status gemm_float(const float* a, int64_t m, const PackedWeight& w, float* c,
                            const ExecContext& context) = 0;

  // The row count (M) multiple this device's GEMMs on `operand` activations take. A caller pads
  // the activation with zero rows up to it and drops those rows of the result (the RK3588 NPU is
  // wrong below 4 rows, so its planners refuse M % 4 != 0). 1: any M.
  virtual int64_t row_multiple(ElementType /*operand*/) const { return 1; }
  // The fewest rows a call on a resident weight of this operand type may have: a device that
  // plans resident weights for one row count (RK3588 fp16: 256) serves fewer rows only when the
  // caller pads them with zeros. 1 when any count is served.
  virtual int64_t resident_min_rows(ElementType /*operand*/) const { return 1; }
  // The float type the device computes in: float32 (host) or float16 (an NPU). Float work is
  // packed for it (pack_float_weight or pack_fp16_weight).
  virtual ElementType float_compute_type() const { return ElementType::kFloat32; }

  // The primitives below are optional: the defaults refuse with kUnsupported, and the caller runs
  // the same primitive on the host device. The host implements each as the exact reference (fp32
  // or exact integer arithmetic); a device documents where its arithmetic differs.

  // fp16: a row-major K x N weight of IEEE binary16 bit patterns.
  virtual Result<std::unique_ptr<PackedWeight>> pack_fp16_weight(const uint16_t* weight, int64_t k,
                                                                 int64_t n);
  // c = a * w with fp16 operands (a: M x K binary16 bits). c_type: kFloat16 (c is uint16_t
  // binary16 bits) or kFloat32 (c is float). Host: fp32 accumulation, one final rounding. RK3588
  // (sim): fp32 within a K tile, fp16 between tiles (see docs/simulator.md).
  virtual Status gemm_fp16(const uint16_t* a, int64_t m, const PackedWeight& w, void* c,
                           ElementType c_type, const ExecContext& context);

  // int4: values in [-7, 7], one per int8 byte (the RK3588's int4 contract). c is int32. Host:
  // exact. RK3588 (sim): each K tile's partial is int16 and saturates.
  virtual Result<std::unique_ptr<PackedWeight>> pack_int4_weight(const int8_t* weight, int64_t k,
                                                                 int64_t n);
  virtual Status gemm_int4(const int8_t* a, int64_t m, const PackedWeight& w, int32_t* c,
                           const ExecContext& context);

  // Group-wise int8 or int4 (type kInt8 / kInt4) with one scale per K group of `group` columns:
  //   c[m][n] = sum_g (a_scales[m][g] * w_scales[n][g]) * float(sum_{k in g} a[m][k] w[k][n])
  // in fp32, g ascending; a_scales is M x G, w_scales N x G (G = K / group), both row-major.
  virtual Result<std::unique_ptr<PackedWeight>> pack_groupwise_weight(const int8_t* weight,
                                                                      int64_t k, int64_t n,
                                                                      ElementType type,
                                                                      int64_t group);
  virtual Status gemm_groupwise(const int8_t* a, const float* a_scales, int64_t m,
                                const PackedWeight& w, const float* w_scales, float* c,
                                const ExecContext& context);
  // fp32 multiply-adds npuflow runs on the CPU beside a group-wise GEMM (the min terms of GGUF
  // Q4_1 / Q4_K / Q5_K weights), reading `bytes`: work a board's CPU does too. A simulated board
  // prices it into its host time; real devices and the host have nothing to add.
  virtual void account_host_pass(double multiply_adds, double bytes);

  // Attention (see Fp16Attention). Host: the exact reference (fp32 scores, softmax and sums from
  // the fp16 operands, one rounding of the output). RK3588 (sim): librocketnpu's flash attention
  // (fp16 scores, host softmax with P rounded to fp16 twice, fp16 P V; head_dim % 32, dv % 16).
  virtual Status attention_fp16(const Fp16Attention& call, const ExecContext& context);

  // Convolution and transposed convolution (see Fp16Conv2d, Fp16ConvTranspose2d). Host: the exact
  // reference (operands widened exactly, each output summed in fp32, one rounding to fp16).
  // RK3588 (sim): librocketnpu's rocket_conv2d_fp16 / rocket_conv_transpose2d_fp16, which claim
  // bit-exact equality with that reference (direct OC % 16, depthwise C % 32, transposed pads
  // within the dilated kernel).
  virtual Status conv2d_fp16(const Fp16Conv2d& call, const ExecContext& context);
  virtual Status conv_transpose2d_fp16(const Fp16ConvTranspose2d& call, const ExecContext& context);

  // What the device did this session (calls, submits, bytes moved, modelled time), as text lines
  // for NPUFLOW_PROF=1; empty when the device keeps no profile.
  virtual std::string profile_report() const { return {}; }
};

}  // namespace npuflow

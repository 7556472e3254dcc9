#include "graph/host_work.h"

#include <string_view>

#include "core/strings.h"

namespace npuflow {
namespace {

bool has_suffix(const std::string& name, std::string_view suffix) {
  return name.size() >= suffix.size() &&
         name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string layer_of(const std::string& name, std::string_view suffix) {
  return name.substr(0, name.size() - suffix.size());
}

// Per layer (the encoder's work names its GEMMs layerI.qkv, .scores, .values, .o, .fc1, .fc2):
// two norms and two residual adds over the hidden width, one softmax over the scores, one
// activation over fc1's output.
void encoder_host_work(const Claim& claim, std::vector<HostWork>& out) {
  for (const GemmWork& g : claim.work) {
    if (has_suffix(g.name, ".qkv")) {
      const std::string layer = layer_of(g.name, "qkv");
      out.push_back({layer + "norms", HostWorkKind::kNorm, g.rows, 2 * g.k});
      out.push_back({layer + "residuals", HostWorkKind::kElementwise, g.rows, 2 * g.k});
    } else if (has_suffix(g.name, ".scores")) {
      out.push_back({layer_of(g.name, "scores") + "softmax", HostWorkKind::kSoftmax, g.rows, g.n});
    } else if (has_suffix(g.name, ".fc1")) {
      out.push_back(
          {layer_of(g.name, "fc1") + "activation", HostWorkKind::kActivation, g.rows, g.n});
    }
  }
}

}  // namespace

const char* host_work_kind_name(HostWorkKind kind) {
  switch (kind) {
    case HostWorkKind::kNorm:
      return "norm";
    case HostWorkKind::kActivation:
      return "activation";
    case HostWorkKind::kSoftmax:
      return "softmax";
    case HostWorkKind::kElementwise:
      return "elementwise";
    case HostWorkKind::kConvert:
      return "convert";
  }
  return "?";
}

std::vector<HostWork> host_work_of(const Claim& claim) {
  std::vector<HostWork> out;
  if (claim.kind == ClaimKind::kVisionEncoder) {
    encoder_host_work(claim, out);
    return out;
  }
  if (claim.kind == ClaimKind::kTensorProgram || claim.work.empty()) return out;
  if (claim.kind == ClaimKind::kConvTranspose) {
    // fp32 -> fp16 in, then the GEMM's columns scattered into the output (or, for the device's
    // convolution, its fp16 output widened and cropped).
    const GemmWork& g = claim.work.front();
    out.push_back({g.name + ".convert", HostWorkKind::kConvert, g.rows, g.k});
    if (conv_transpose_runs_as_gemm(claim.conv_transpose.spec)) {
      out.push_back({g.name + ".scatter", HostWorkKind::kElementwise, g.rows, g.n});
    } else {
      out.push_back({g.name + ".epilogue", HostWorkKind::kConvert, g.rows, g.n});
    }
    return out;
  }
  if (claim.kind == ClaimKind::kConv) {
    // fp32 -> fp16 in (about stride_y x stride_x input pixels per output pixel), the fp16
    // output widened with the bias.
    const GemmWork& g = claim.work.front();
    const ConvSpec& s = claim.conv.spec;
    out.push_back(
        {g.name + ".convert", HostWorkKind::kConvert, g.rows, s.ic * s.stride_y * s.stride_x});
    out.push_back({g.name + ".epilogue", HostWorkKind::kConvert, g.rows, s.oc});
    return out;
  }
  // One integer GEMM: a float activation is quantized first, the int32 result requantized or
  // dequantized after.
  const GemmWork& g = claim.work.front();
  const bool float_input = claim.kind == ClaimKind::kQdqMatMul
                               ? claim.qdq.activation_dequantized
                               : claim.integer.quantize_inside || claim.integer.quantize_rows;
  if (float_input) out.push_back({g.name + ".quantize", HostWorkKind::kConvert, g.rows, g.k});
  out.push_back({g.name + ".epilogue", HostWorkKind::kConvert, g.rows, g.n});
  return out;
}

}  // namespace npuflow

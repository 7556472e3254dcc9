#include "graph/claim_report.h"

#include <map>
#include <set>

#include "core/strings.h"
#include "graph/host_work.h"

namespace npuflow {

std::string json_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += str_cat("\\u00", "0123456789abcdef"[(c >> 4) & 0xf], "0123456789abcdef"[c & 0xf]);
        } else {
          out += c;
        }
    }
  }
  return out;
}

std::vector<std::string> summarize_claims(const std::string& graph_name, const ClaimSet& claims,
                                          const char* what) {
  size_t nodes = 0;
  for (const Claim& claim : claims.claims) nodes += claim.nodes.size();
  std::vector<std::string> lines;
  lines.push_back(str_cat("graph '", graph_name, "': claimed ", claims.claims.size(), " of ",
                          claims.candidates, " ", what, " (", nodes, " nodes)"));
  for (const Claim& claim : claims.claims) {
    if (claim.kind != ClaimKind::kVisionEncoder) continue;
    const VisionEncoderClaim& e = claim.encoder;
    lines.push_back(str_cat(
        "graph '", graph_name, "': vision encoder '", claim.anchor_name, "' family=", e.family,
        " layers=", e.layers.size(), " hidden=", e.hidden, " heads=", e.heads, " (", e.heads_source,
        ") exits=", e.exits.size(), e.from_pixels ? " from pixels" : " from the stream",
        e.dequantized ? ", weights dequantized (NPUFLOW_QUANT=fp16)" : "",
        e.note.empty() ? "" : " - ", e.note));
  }
  std::map<std::string, std::pair<int, const Refusal*>> by_reason;
  for (const Refusal& refusal : claims.refusals) {
    auto& entry = by_reason[refusal.reason];
    if (entry.first++ == 0) entry.second = &refusal;
  }
  for (const auto& [reason, entry] : by_reason) {
    lines.push_back(str_cat("graph '", graph_name, "': refused ", reason, " x", entry.first,
                            " (e.g. '", entry.second->node_name, "': ", entry.second->detail, ")"));
  }
  return lines;
}

namespace {

std::string gemms_to_json(const std::vector<GemmWork>& gemms) {
  std::vector<std::string> items;
  for (const GemmWork& g : gemms) {
    items.push_back(str_cat("{\"name\":\"", json_escape(g.name), "\",\"rows\":", g.rows, ",\"k\":",
                            g.k, ",\"n\":", g.n, ",\"type\":\"", element_type_name(g.type),
                            "\",\"attention\":", g.attention ? "true" : "false", "}"));
  }
  return str_cat("[", join(items, ","), "]");
}

// A claim's device GEMMs ("work") and the host work around them ("host_work").
std::string work_json(const Claim& claim) {
  std::vector<std::string> host;
  for (const HostWork& h : host_work_of(claim)) {
    host.push_back(str_cat("{\"name\":\"", json_escape(h.name), "\",\"kind\":\"",
                           host_work_kind_name(h.kind), "\",\"rows\":", h.rows,
                           ",\"width\":", h.width, "}"));
  }
  return str_cat(gemms_to_json(claim.work), ",\"host_work\":[", join(host, ","), "]");
}

std::string encoder_json(const Claim& claim, const std::vector<std::string>& node_names) {
  const VisionEncoderClaim& e = claim.encoder;
  std::vector<std::string> exits, activations, groups;
  for (const EncoderExitRef& x : e.exits) {
    exits.push_back(str_cat("{\"value\":\"", json_escape(x.value), "\",\"stream_index\":",
                            x.stream_index, ",\"norm\":", x.norm >= 0 ? "true" : "false", "}"));
  }
  int layer_scale = 0, post_norm = 0, fused_qkv = 0, rotary = 0, gated = 0, rel_pos = 0;
  std::vector<std::string> windows, grid_size;  // SAM's grid layers: window sizes (0: global)
  std::set<std::string> biases;
  for (const EncoderLayerRef& l : e.layers) {
    fused_qkv += l.fused_qkv ? 1 : 0;
    rotary += l.rope_cos.present ? 1 : 0;
    gated += l.glu != EncoderGlu::kNone ? 1 : 0;
    if (!l.attention_bias.empty()) biases.insert(l.attention_bias);
    activations.push_back(str_cat("\"", encoder_activation_name(l.activation), "\""));
    layer_scale += l.layer_scale1.empty() ? 0 : 1;
    post_norm += l.pre_norm ? 0 : 1;
    groups.push_back(str_cat(l.attention_group));
    if (l.grid) {
      windows.push_back(str_cat(l.grid->window));
      rel_pos += l.grid->rel_h.empty() ? 0 : 1;
      grid_size = {str_cat(l.grid->grid_h), str_cat(l.grid->grid_w)};
    }
  }
  return str_cat(
      "{\"kind\":\"", claim_kind_name(claim.kind), "\",\"node\":\"", json_escape(claim.anchor_name),
      "\",\"nodes\":[", join(node_names, ","), "],\"family\":\"", e.family,
      "\",\"layers\":", e.layers.size(), ",\"hidden\":", e.hidden, ",\"heads\":", e.heads,
      ",\"heads_source\":\"", e.heads_source,
      "\",\"from_pixels\":", e.from_pixels ? "true" : "false",
      ",\"dequantized\":", e.dequantized ? "true" : "false", ",\"quant_form\":\"", e.quant_form,
      "\"", ",\"class_token\":", e.cls.present ? "true" : "false",
      ",\"registers\":", e.register_count, ",\"register_position\":", e.register_position,
      ",\"pre_norm\":", e.pre_norm ? "true" : "false", ",\"layer_scale_layers\":", layer_scale,
      ",\"post_norm_layers\":", post_norm, ",\"fused_qkv_layers\":", fused_qkv,
      ",\"activations\":[", join(activations, ","), "],\"exits\":[", join(exits, ","),
      "],\"attention_bias\":", biases.empty() ? "false" : "true",
      ",\"attention_biases\":", biases.size(), ",\"rotary_layers\":", rotary,
      ",\"gated_mlp_layers\":", gated, ",\"attention_groups\":[", join(groups, ","), "],\"grid\":[",
      join(grid_size, ","), "],\"grid_windows\":[", join(windows, ","),
      "],\"rel_pos_layers\":", rel_pos, ",\"program_ops\":", e.program.ops.size(), ",\"note\":\"",
      json_escape(e.note), "\",\"work\":", work_json(claim), "}");
}

// A Conv or ConvTranspose claim's common fields, the object left open for the caller's own.
std::string conv_json(const Claim& claim, int64_t ic, int64_t oc, int64_t kh, int64_t kw,
                      int64_t stride_y, int64_t stride_x, const std::vector<int64_t>& pads,
                      int64_t dil_y, int64_t dil_x, bool bias) {
  return str_cat("{\"kind\":\"", claim_kind_name(claim.kind), "\",\"node\":\"",
                 json_escape(claim.anchor_name), "\",\"nodes\":[\"", json_escape(claim.anchor_name),
                 "\"],\"ic\":", ic, ",\"oc\":", oc, ",\"kernel\":[", kh, ",", kw, "],\"strides\":[",
                 stride_y, ",", stride_x, "],\"pads\":[", pads[0], ",", pads[1], ",", pads[2], ",",
                 pads[3], "],\"dilations\":[", dil_y, ",", dil_x,
                 "],\"bias\":", bias ? "true" : "false", ",\"work\":", work_json(claim));
}

}  // namespace

std::string claims_to_json(const std::string& graph_name, const GraphView& graph,
                           const ClaimSet& claims, const std::vector<GemmWork>& host_gemms,
                           const char* matcher) {
  std::string out = str_cat("{\"graph\":\"", json_escape(graph_name), "\",\"matcher\":\"", matcher,
                            "\",\"candidates\":", claims.candidates, ",\"claims\":[");
  for (size_t i = 0; i < claims.claims.size(); ++i) {
    const Claim& claim = claims.claims[i];
    if (claim.kind == ClaimKind::kVisionEncoder) {
      std::vector<std::string> names;
      for (NodeId id : claim.nodes)
        names.push_back(str_cat("\"", json_escape(graph.node(id).name), "\""));
      out += str_cat(i ? "," : "", encoder_json(claim, names));
      continue;
    }
    std::vector<std::string> node_names;
    if (claim.kind == ClaimKind::kConvTranspose) {
      const ConvTransposeSpec& c = claim.conv_transpose.spec;
      out += str_cat(i ? "," : "",
                     conv_json(claim, c.ic, c.oc, c.kh, c.kw, c.stride_y, c.stride_x,
                               {c.pad_top, c.pad_left, c.pad_bottom, c.pad_right}, c.dil_y, c.dil_x,
                               !claim.conv_transpose.bias.empty()),
                     ",\"output_padding\":[", c.opad_y, ",", c.opad_x, "]}");
      continue;
    }
    if (claim.kind == ClaimKind::kConv) {
      const ConvSpec& c = claim.conv.spec;
      out += str_cat(i ? "," : "",
                     conv_json(claim, c.ic, c.oc, c.kh, c.kw, c.stride_y, c.stride_x,
                               {c.pad_top, c.pad_left, c.pad_bottom, c.pad_right}, c.dil_y, c.dil_x,
                               !claim.conv.bias.empty()),
                     "}");
      continue;
    }
    if (claim.kind == ClaimKind::kIntegerMatMul || claim.kind == ClaimKind::kFloatMatMul) {
      for (NodeId id : claim.nodes) {
        node_names.push_back(str_cat("\"", json_escape(graph.node(id).name), "\""));
      }
      const IntegerMatMulClaim& group = claim.integer;
      const size_t scales = group.quantize_rows       ? static_cast<size_t>(group.spec.n)
                            : group.spec.float_output ? group.spec.w_scales.size()
                                                      : group.spec.w_zero_points.size();
      out += str_cat(
          i ? "," : "", "{\"kind\":\"", claim_kind_name(claim.kind), "\",\"node\":\"",
          json_escape(claim.anchor_name), "\",\"nodes\":[", join(node_names, ","),
          "],\"k\":", group.spec.k, ",\"n\":", group.spec.n, ",\"weight_scales\":", scales,
          ",\"activation\":\"",
          group.quantize_inside || group.quantize_rows ? "float32"
                                                       : element_type_name(group.activation_type),
          "\",\"weight\":\"", element_type_name(group.weight_type), "\",\"output\":\"",
          group.spec.float_output ? "float32" : "int32",
          "\",\"activation_dequantized\":false,\"dynamic\":",
          group.quantize_inside || !group.activation_zero_point_name.empty() ? "true" : "false",
          ",\"bias\":", group.spec.bias.empty() ? "false" : "true", ",\"note\":\"",
          group.quantize_rows     ? " (float MatMul as int8: weight per column, activation per row)"
          : group.quantize_inside ? " (DynamicQuantizeLinear inside)"
          : !group.activation_zero_point_name.empty() ? " (shared DynamicQuantizeLinear on CPU)"
                                                      : "",
          "\",\"work\":", work_json(claim), "}");
      continue;
    }
    const QdqGemmSpec& spec = claim.qdq.spec;
    for (NodeId id : claim.nodes) {
      node_names.push_back(str_cat("\"", json_escape(graph.node(id).name), "\""));
    }
    out += str_cat(
        i ? "," : "", "{\"kind\":\"", claim_kind_name(claim.kind), "\",\"node\":\"",
        json_escape(claim.anchor_name), "\",\"nodes\":[", join(node_names, ","), "],\"k\":", spec.k,
        ",\"n\":", spec.n, ",\"weight_scales\":", spec.w_scales.size(), ",\"activation\":\"",
        element_type_name(claim.qdq.activation_type), "\",\"weight\":\"",
        element_type_name(claim.qdq.weight_type), "\",\"output\":\"",
        spec.output ? element_type_name(spec.output->type) : "float32",
        "\",\"activation_dequantized\":", claim.qdq.activation_dequantized ? "true" : "false",
        ",\"work\":", work_json(claim), "}");
  }
  out += "],\"refusals\":[";
  for (size_t i = 0; i < claims.refusals.size(); ++i) {
    const Refusal& refusal = claims.refusals[i];
    out += str_cat(i ? "," : "", "{\"node\":\"", json_escape(refusal.node_name), "\",\"reason\":\"",
                   refusal.reason, "\",\"detail\":\"", json_escape(refusal.detail), "\"}");
  }
  return str_cat(out, "],\"host_gemms\":", gemms_to_json(host_gemms), "}");
}

}  // namespace npuflow

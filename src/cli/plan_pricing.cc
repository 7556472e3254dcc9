#include "cli/plan_pricing.h"

#include <algorithm>
#include <set>
#include <string_view>

#include "core/strings.h"
#include "route/matmul_route.h"

namespace npuflow::cli {
namespace {

using sim::CpuPool;
using sim::CpuWork;
using sim::CpuWorkClass;

double us_to_ms(double us) {
  return us / 1e3;
}

double numel(const std::vector<int64_t>& shape) {
  double n = 1;
  for (int64_t d : shape) n *= static_cast<double>(std::max<int64_t>(d, 0));
  return n;
}

double element_bytes(const std::string& type) {
  if (type == "double" || type == "int64" || type == "uint64") return 8;
  if (type == "float16" || type == "bfloat16" || type == "int16" || type == "uint16") return 2;
  if (type == "int8" || type == "uint8" || type == "bool") return 1;
  return 4;  // float, int32, uint32
}

double tensor_bytes(const std::vector<ProfiledTensor>& tensors) {
  double bytes = 0;
  for (const ProfiledTensor& t : tensors) bytes += numel(t.shape) * element_bytes(t.type);
  return bytes;
}

bool one_of(std::string_view op, std::initializer_list<std::string_view> ops) {
  return std::find(ops.begin(), ops.end(), op) != ops.end();
}

CpuWork gemm(double flops, bool int8 = false) {
  CpuWork w;
  w.work_class = CpuWorkClass::kGemm;
  w.flops = flops;
  w.int8 = int8;
  return w;
}

CpuWork streaming(double bytes) {
  CpuWork w;
  w.work_class = CpuWorkClass::kStreaming;
  w.bytes = bytes;
  return w;
}

CpuWork transcendental(double elements, double bytes) {
  CpuWork w;
  w.work_class = CpuWorkClass::kTranscendental;
  w.elements = elements;
  w.bytes = bytes;
  return w;
}

// A batched right operand (both operands activations, one product per head): attention's
// Q·K^T and P·V.
bool batched_product(const ProfiledNode& node) {
  if (node.inputs.size() < 2) return false;
  const std::vector<int64_t>& b = node.inputs[1].shape;
  if (b.size() < 3 || node.inputs[0].shape.size() < 3) return false;
  return numel(std::vector<int64_t>(b.begin(), b.end() - 2)) > 1;
}

// 2·M·K·N of a MatMul-like node from its concrete shapes.
double matmul_flops(const ProfiledNode& node) {
  if (node.inputs.empty() || node.outputs.empty() || node.inputs[0].shape.empty()) return 0;
  return 2 * numel(node.outputs[0].shape) * static_cast<double>(node.inputs[0].shape.back());
}

double gemm_flops(const ProfiledNode& node) {  // Gemm: A is M x K or K x M, Y is M x N
  if (node.inputs.empty() || node.outputs.empty() || node.outputs[0].shape.size() != 2) return 0;
  const double m = static_cast<double>(node.outputs[0].shape[0]);
  return m > 0 ? 2 * numel(node.outputs[0].shape) * numel(node.inputs[0].shape) / m : 0;
}

// Conv: every output element contracts Cin/group x kernel; ConvTranspose: every input element
// scatters into Cout/group x kernel (from `transposes` where the profile lists no 4-D weight).
double conv_flops(const ProfiledNode& node, bool transpose, const TransposeWeights* transposes) {
  if (transpose && transposes != nullptr && !node.inputs.empty() &&
      (node.inputs.size() < 2 || node.inputs[1].shape.size() != 4)) {
    if (auto it = transposes->find(node.name); it != transposes->end()) {
      return 2 * numel(node.inputs[0].shape) * it->second;
    }
  }
  if (node.inputs.size() < 2 || node.outputs.empty()) return 0;
  const std::vector<int64_t>& w = node.inputs[1].shape;
  if (w.empty() || w[0] <= 0) return 0;
  const double per = numel(w) / static_cast<double>(w[0]);
  return 2 * (transpose ? numel(node.inputs[0].shape) : numel(node.outputs[0].shape)) * per;
}

// ONNX Runtime's Attention / MultiHeadAttention contrib ops: the fused QKV projection (Attention
// only) and the score and value products over B x S x S x D.
double attention_op_flops(const ProfiledNode& node) {
  if (node.inputs.empty() || node.inputs[0].shape.size() != 3) return 0;
  const auto& x = node.inputs[0].shape;
  const double b = static_cast<double>(x[0]), s = static_cast<double>(x[1]);
  const double d = static_cast<double>(x[2]);
  double flops = 4 * b * s * s * d;
  if (node.op_type == "Attention" && node.inputs.size() > 1 && node.inputs[1].shape.size() == 2) {
    flops += 2 * b * s * d * static_cast<double>(node.inputs[1].shape[1]);
  }
  return flops;
}

// A report's GEMM: its shape, with symbolic rows taken from the inputs. The EP writes positive
// sizes only; anything else (a damaged or foreign report) is not a GEMM to price, and the cap
// keeps M*K*N inside int64.
struct GemmShape {
  int64_t m = 0, k = 0, n = 0;
  bool integer = false;
  bool attention = false;
  double flops() const { return 2.0 * static_cast<double>(m) * static_cast<double>(k) * n; }
};

// What a symbolic size of a claim's work stands for: the token count, the rows (batch x tokens)
// and the score rows (batch x heads x tokens) of the run that was profiled, else --rows.
struct Symbols {
  int64_t tokens = 0, rows = 0, score_rows = 0;
  int64_t heads_x_batch = 0;  // attention products per inference
  int64_t workers = 5, min_rows = 16;
  bool attention_on_npu = false;
};

Symbols symbols_for(const PlanInputs& inputs, int64_t batch, int64_t tokens, int64_t heads) {
  Symbols s;
  s.workers = inputs.workers;
  s.min_rows = inputs.min_rows;
  s.attention_on_npu = inputs.attention_on_npu;
  s.tokens = tokens;
  s.rows = batch * tokens;
  s.heads_x_batch = batch * heads;
  s.score_rows = s.heads_x_batch * tokens;
  return s;
}

int64_t bound(int64_t size, int64_t symbol) {
  return size > 0 ? size : symbol;
}

bool gemm_shape(const JsonValue& work, const Symbols& symbols, GemmShape& g) {
  g.attention = work["attention"].boolean();
  g.m = bound(work["rows"].integer(), g.attention ? symbols.score_rows : symbols.rows);
  g.k = bound(work["k"].integer(), symbols.tokens);
  g.n = bound(work["n"].integer(), symbols.tokens);
  if (g.m <= 0 || g.m > kMaxGemmDim || g.k <= 0 || g.n <= 0 || g.k > kMaxGemmDim ||
      g.n > kMaxGemmDim) {
    return false;
  }
  const std::string& element = work["type"].string();
  g.integer = element == "int8" || element == "uint8";
  return true;
}

void count_gemm(PricedClaim& claim, const GemmShape& g) {
  claim.m = claim.gemms == 0 ? g.m : 0;
  claim.k = claim.gemms == 0 ? g.k : 0;
  claim.n = claim.gemms == 0 ? g.n : 0;
  claim.type = g.integer ? sim::NpuType::kInt8 : sim::NpuType::kFp16;
  claim.gemms++;
  claim.macs += g.m * g.k * g.n;
  claim.cpu_ep.add(g.attention ? Phase::kAttention : Phase::kProjections,
                   us_to_ms(sim::board_cpu_us(gemm(g.flops(), g.integer), CpuPool::kCpuEp)));
}

// Board time of one claim's GEMM, and what it adds to the claim.
void price_gemm(PricedClaim& claim, const JsonValue& work, const Symbols& inputs) {
  GemmShape g;
  if (!gemm_shape(work, inputs, g)) return;
  count_gemm(claim, g);
  const int64_t m = g.m, k = g.k, n = g.n;
  const bool integer = g.integer;
  const double flops = g.flops();
  if (g.attention && inputs.attention_on_npu && inputs.heads_x_batch > 0) {
    // Per batch entry and head: Q·K^T (T x hd x T) or P·V (T x T x hd), both operands packed
    // on every call and the product read back.
    sim::CostQuery query;
    query.type = sim::NpuType::kFp16;
    query.m = std::max<int64_t>(m / inputs.heads_x_batch, 1);
    query.k = k;
    query.n = n;
    query.workers = inputs.workers;
    query.resident = false;
    query.kind = sim::GemmKind::kAttentionScore;
    const double heads = static_cast<double>(inputs.heads_x_batch);
    const double npu_ms = us_to_ms(sim::CostModel::npu(query).total_us()) * heads;
    claim.npu_ms += npu_ms;
    claim.board.add(Phase::kAttention, npu_ms);
    const double bytes = static_cast<double>(m) * static_cast<double>(k + n) * 6;
    claim.board.add(Phase::kConversions,
                    us_to_ms(sim::board_cpu_us(streaming(bytes), CpuPool::kNpuflowHost)));
    return;
  }
  if (g.attention) {  // npuflow's encoders run attention on the host
    claim.host_gemms++;
    claim.board.add(Phase::kAttention,
                    us_to_ms(sim::board_cpu_us(gemm(flops), CpuPool::kNpuflowHost)));
    return;
  }
  if (integer && !integer_gemm_on_device(m, inputs.min_rows)) {
    claim.host_gemms++;
    claim.board.add(Phase::kProjections,
                    us_to_ms(sim::board_cpu_us(gemm(flops, true), CpuPool::kNpuflowHost)));
    return;
  }
  sim::CostQuery query;
  query.type = claim.type;
  query.m = m;
  query.k = k;
  query.n = n;
  query.workers = inputs.workers;
  const double npu_ms = us_to_ms(sim::CostModel::npu(query).total_us());
  claim.npu_ms += npu_ms;
  claim.board.add(Phase::kProjections, npu_ms);
  claim.resident_bytes += k * n * (integer ? 1 : 2);
  if (!integer) {  // fp32 -> fp16 in, fp16 -> fp32 out, on the host
    const double bytes = static_cast<double>(m) * static_cast<double>(k + n) * 6;
    claim.board.add(Phase::kConversions,
                    us_to_ms(sim::board_cpu_us(streaming(bytes), CpuPool::kNpuflowHost)));
  }
}

// The host work around a claim's GEMMs, on npuflow's host (with npuflow) and on the CPU EP (the
// claim's share of the baseline when there is no profile).
void price_host_work(PricedClaim& claim, const JsonValue& work, const Symbols& symbols) {
  const std::string& kind = work["kind"].string();
  const int64_t rows =
      bound(work["rows"].integer(), kind == "softmax" ? symbols.score_rows : symbols.rows);
  const int64_t width = bound(work["width"].integer(), symbols.tokens);
  const double elements = static_cast<double>(std::clamp<int64_t>(rows, 0, kMaxGemmDim)) *
                          static_cast<double>(std::clamp<int64_t>(width, 0, kMaxGemmDim));
  // Elementwise: two reads and a write; a norm: a statistics pass and a normalize pass, alike.
  CpuWork cost = streaming(elements * 12);
  Phase phase = Phase::kNormsActivations;
  if (kind == "activation") {
    cost = transcendental(elements, elements * 8);
  } else if (kind == "softmax") {
    cost = transcendental(elements, elements * 8);
    phase = Phase::kAttention;
  } else if (kind == "convert") {
    cost = streaming(elements * 5);
    phase = Phase::kConversions;
  }
  claim.board.add(phase, us_to_ms(sim::board_cpu_us(cost, CpuPool::kNpuflowHost)));
  claim.cpu_ep.add(phase, us_to_ms(sim::board_cpu_us(cost, CpuPool::kCpuEp)));
}

}  // namespace

const char* phase_name(Phase phase) {
  switch (phase) {
    case Phase::kProjections:
      return "projections";
    case Phase::kAttention:
      return "attention";
    case Phase::kNormsActivations:
      return "norms_activations";
    case Phase::kConversions:
      return "conversions";
    case Phase::kCpuEpNodes:
      return "cpu_ep_nodes";
    case Phase::kOther:
      return "other";
  }
  return "?";
}

double PhaseSplit::total() const {
  double sum = 0;
  for (double v : ms) sum += v;
  return sum;
}

double BoardPlan::speedup() const {
  const double with = with_npuflow.total();
  return with > 0 ? baseline.total() / with : 1.0;
}

bool is_npuflow_kernel(const ProfiledNode& node) {
  return node.provider.find("Npuflow") != std::string::npos;
}

KernelCost cpu_kernel_cost(const ProfiledNode& node, const TransposeWeights* transposes) {
  const std::string& op = node.op_type;
  const double in_bytes = tensor_bytes(node.inputs), out_bytes = tensor_bytes(node.outputs);
  const double out_elements = node.outputs.empty() ? 0 : numel(node.outputs[0].shape);
  KernelCost c;
  if (one_of(op, {"MatMul", "FusedMatMul", "MatMulInteger", "QLinearMatMul", "MatMulIntegerToFloat",
                  "DynamicQuantizeMatMul"})) {
    const bool int8 = op != "MatMul" && op != "FusedMatMul";
    c.work = gemm(matmul_flops(node), int8);
    c.phase = batched_product(node) ? Phase::kAttention : Phase::kProjections;
  } else if (one_of(op, {"Gemm", "FusedGemm"})) {
    c.work = gemm(gemm_flops(node));
    c.phase = Phase::kProjections;
  } else if (one_of(op, {"Conv", "FusedConv", "QLinearConv", "ConvInteger", "ConvTranspose"})) {
    c.work = gemm(conv_flops(node, op == "ConvTranspose", transposes),
                  op == "QLinearConv" || op == "ConvInteger");
    c.phase = Phase::kProjections;
  } else if (one_of(op, {"Attention", "MultiHeadAttention", "GroupQueryAttention"})) {
    c.work = gemm(attention_op_flops(node));
    c.phase = Phase::kAttention;
  } else if (one_of(op, {"Softmax", "LogSoftmax", "BiasSoftmax"})) {
    c.work = transcendental(out_elements, in_bytes + out_bytes);
    c.phase = Phase::kAttention;
  } else if (one_of(op,
                    {"Erf", "Gelu", "FastGelu", "BiasGelu", "QuickGelu", "Tanh", "Sigmoid", "Exp",
                     "Log", "Sin", "Cos", "Softplus", "Elu", "Selu", "Mish", "HardSwish"})) {
    c.work = transcendental(out_elements, in_bytes + out_bytes);
    c.phase = Phase::kNormsActivations;
  } else if (one_of(op, {"Shape", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity",
                         "Constant", "ConstantOfShape", "Size", "Range", "Dropout"})) {
    c.work.work_class = CpuWorkClass::kShape;
    c.phase = Phase::kOther;
  } else if (one_of(op, {"Cast", "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear"})) {
    c.work = streaming(in_bytes + out_bytes);
    c.phase = Phase::kConversions;
  } else if (one_of(op, {"LayerNormalization",
                         "SkipLayerNormalization",
                         "SimplifiedLayerNormalization",
                         "SkipSimplifiedLayerNormalization",
                         "RMSNormalization",
                         "BatchNormalization",
                         "InstanceNormalization",
                         "GroupNorm",
                         "ReduceMean",
                         "ReduceSum",
                         "ReduceMax",
                         "Add",
                         "Sub",
                         "Mul",
                         "Div",
                         "Pow",
                         "Sqrt",
                         "Relu",
                         "Neg",
                         "Abs",
                         "Max",
                         "Min",
                         "Clip",
                         "Reciprocal",
                         "BiasAdd",
                         "Where",
                         "Equal",
                         "Less",
                         "Greater",
                         "Not",
                         "And",
                         "Or"})) {
    c.work = streaming(in_bytes + out_bytes);
    c.phase = Phase::kNormsActivations;
  } else {  // data movement: Transpose, Concat, Slice, Gather, Split, Expand, Pad, Resize, ...
    c.work = streaming(in_bytes + out_bytes);
    c.phase = Phase::kOther;
  }
  return c;
}

namespace {

// An encoder whose token count the graph leaves symbolic (an interpolated position embedding,
// a dynamic sequence) ran at the count its npuflow kernel's output shows: [batch, tokens, hidden].
// Kernels are taken in profile order, each once.
Symbols claim_symbols(const JsonValue& claim, const PlanInputs& inputs,
                      const std::vector<ProfiledNode>* kernels, std::vector<bool>& used) {
  int64_t batch = 1, tokens = inputs.rows;
  const int64_t hidden = claim["hidden"].integer();
  if (kernels != nullptr && hidden > 0) {
    for (size_t i = 0; i < kernels->size(); ++i) {
      const ProfiledNode& k = (*kernels)[i];
      if (used[i] || !is_npuflow_kernel(k) || k.outputs.empty()) continue;
      const std::vector<int64_t>& shape = k.outputs[0].shape;
      if (shape.size() != 3 || shape[2] != hidden || shape[0] <= 0 || shape[1] <= 0) continue;
      used[i] = true;
      batch = shape[0];
      tokens = shape[1];
      break;
    }
  }
  return symbols_for(inputs, batch, tokens, std::max<int64_t>(claim["heads"].integer(), 1));
}

// The claims' board time and their CPU EP share, summed into the plan.
void add_claims(BoardPlan& plan, bool baseline) {
  for (const PricedClaim& c : plan.claimed) {
    for (int p = 0; p < kPhaseCount; ++p) {
      plan.with_npuflow.ms[p] += c.board.ms[p];
      if (baseline) plan.baseline.ms[p] += c.cpu_ep.ms[p];
    }
  }
}

}  // namespace

BoardPlan price_report(const std::vector<JsonValue>& graphs, const PlanInputs& inputs,
                       const std::vector<ProfiledNode>* with_npuflow) {
  BoardPlan plan;
  std::set<std::string> graphs_seen;  // each matcher writes a record; host work is per graph
  std::vector<bool> used(with_npuflow ? with_npuflow->size() : 0, false);
  const Symbols plain = symbols_for(inputs, 1, inputs.rows, 1);
  for (const JsonValue& graph : graphs) {
    for (const JsonValue& claim : graph["claims"].array()) {
      PricedClaim priced;
      priced.subgraph = claim["node"].string();
      priced.kind = claim["kind"].string();
      const Symbols symbols = claim_symbols(claim, inputs, with_npuflow, used);
      for (const JsonValue& work : claim["work"].array()) price_gemm(priced, work, symbols);
      if (priced.gemms == 0) continue;
      for (const JsonValue& work : claim["host_work"].array()) {
        price_host_work(priced, work, symbols);
      }
      plan.claims++;
      plan.claimed.push_back(priced);
    }
    if (!graphs_seen.insert(graph["graph"].string()).second) continue;
    for (const JsonValue& work : graph["host_gemms"].array()) {
      PricedClaim g;
      g.subgraph = "(CPU)";
      GemmShape shape;
      if (!gemm_shape(work, plain, shape)) continue;
      count_gemm(g, shape);
      g.board.add(Phase::kCpuEpNodes, g.cpu_ep.total());
      plan.host_gemms.push_back(g);
    }
  }
  add_claims(plan, true);
  for (const PricedClaim& c : plan.claimed) {
    plan.npu_ms += c.npu_ms;
    plan.resident_bytes += c.resident_bytes;
    plan.device_macs += c.macs;
  }
  for (const PricedClaim& g : plan.host_gemms) {
    plan.with_npuflow.add(Phase::kCpuEpNodes, g.cpu_ep.total());
    for (int p = 0; p < kPhaseCount; ++p) plan.baseline.ms[p] += g.cpu_ep.ms[p];
    plan.host_macs += g.macs;
  }
  return plan;
}

TransposeWeights transpose_weights(const std::vector<JsonValue>& graphs) {
  TransposeWeights weights;
  for (const JsonValue& graph : graphs) {
    if (graph["matcher"].string() != "conv_transpose") continue;
    for (const JsonValue& claim : graph["claims"].array()) {
      const auto& kernel = claim["kernel"].array();
      if (kernel.size() != 2) continue;
      weights[claim["node"].string()] = static_cast<double>(claim["oc"].integer()) *
                                        static_cast<double>(kernel[0].integer()) *
                                        static_cast<double>(kernel[1].integer());
    }
  }
  return weights;
}

void price_profiles(BoardPlan& plan, const std::vector<ProfiledNode>& cpu_only,
                    const std::vector<ProfiledNode>& with_npuflow,
                    const TransposeWeights& transposes) {
  plan.whole_graph = true;
  plan.baseline = PhaseSplit{};
  plan.cpu_kernels_baseline = 0;
  for (const ProfiledNode& node : cpu_only) {
    const KernelCost c = cpu_kernel_cost(node, &transposes);
    plan.baseline.add(c.phase, us_to_ms(sim::board_cpu_us(c.work, CpuPool::kCpuEp)));
    plan.cpu_kernels_baseline++;
  }
  plan.with_npuflow = PhaseSplit{};
  add_claims(plan, false);
  plan.npuflow_kernels = plan.cpu_kernels_with_npuflow = 0;
  plan.host_macs = 0;
  for (const ProfiledNode& node : with_npuflow) {
    if (is_npuflow_kernel(node)) {
      plan.npuflow_kernels++;
      continue;
    }
    const KernelCost c = cpu_kernel_cost(node, &transposes);
    plan.with_npuflow.add(Phase::kCpuEpNodes, us_to_ms(sim::board_cpu_us(c.work, CpuPool::kCpuEp)));
    plan.cpu_kernels_with_npuflow++;
    if (c.work.work_class == CpuWorkClass::kGemm) {
      plan.host_macs += static_cast<int64_t>(c.work.flops / 2);
    }
  }
}

std::string baseline_definition() {
  return str_cat(
      "ONNX Runtime's CPU EP on the RK3588 (fp32 MLAS-class kernels, ORT_ENABLE_ALL, 8 intra-op "
      "threads over 4 A76 + 4 A55): every kernel of a profiled CPU-EP-only run of this model, "
      "GEMMs at ",
      sim::board_cpu_constant("cpu_ep_gemm_gflops"), " GFLOP/s (int8 x",
      sim::board_cpu_constant("cpu_ep_int8_speedup"), "), streaming work at ",
      sim::cost_constant("cpu_stream_gbps"), " GB/s, exp/erf at ",
      sim::board_cpu_constant("cpu_ep_transcendental_gelems"), " Gelem/s, ",
      sim::board_cpu_constant("cpu_ep_kernel_us"), " us per kernel (docs/simulator.md)");
}

}  // namespace npuflow::cli

#include "ggml/ggml_matmul.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <utility>
#include <vector>

#include "core/fp16.h"
#include "core/strings.h"
#include "ggml-backend.h"
#include "ggml/ggml_block_split.h"
#include "ggml/ggml_fault.h"
#include "ggml/ggml_fusion.h"
#include "ggml/ggml_guard.h"
#include "ops/float_linear.h"
#include "ops/groupwise_linear.h"
#include "quant/block_quantization.h"

namespace npuflow::ggml {

WeightFormat weight_format(ggml_type type) {
  switch (type) {
    case GGML_TYPE_F32:
      return WeightFormat::kF32;
    case GGML_TYPE_F16:
      return WeightFormat::kF16;
    case GGML_TYPE_BF16:
      return WeightFormat::kBF16;
    case GGML_TYPE_Q8_0:
      return WeightFormat::kQ8_0;
    case GGML_TYPE_Q4_0:
      return WeightFormat::kQ4_0;
    case GGML_TYPE_Q4_1:
      return WeightFormat::kQ4_1;
    case GGML_TYPE_Q4_K:
      return WeightFormat::kQ4_K;
    case GGML_TYPE_Q5_K:
      return WeightFormat::kQ5_K;
    case GGML_TYPE_Q6_K:
      return WeightFormat::kQ6_K;
    case GGML_TYPE_MXFP4:
      return WeightFormat::kMXFP4;
    default:
      return WeightFormat::kOther;
  }
}

MatmulCandidate describe_mul_mat(const ggml_tensor* node) {
  const ggml_tensor* w = node->src[0];
  const ggml_tensor* x = node->src[1];
  MatmulCandidate c;
  if (w == nullptr || x == nullptr) return c;
  c.weight = weight_format(w->type);
  if (c.weight != WeightFormat::kF32 && ggml_get_type_traits(w->type)->to_float == nullptr) {
    c.weight = WeightFormat::kOther;
  }
  // A leaf: not computed by the graph and not a view of something that is (attention's K and V
  // are views of the KV cache; they stay on the CPU).
  c.weight_is_leaf = w->op == GGML_OP_NONE && w->view_src == nullptr;
  c.weight_contiguous = ggml_is_contiguous(w);
  c.weight_is_2d = w->ne[2] == 1 && w->ne[3] == 1;
  c.activation_f32 = x->type == GGML_TYPE_F32;
  c.activation_contiguous = ggml_is_contiguous(x);
  c.output_f32 = node->type == GGML_TYPE_F32;
  c.output_contiguous = ggml_is_contiguous(node);
  c.special_hint = node->op_params[1] == GGML_HINT_SRC0_IS_HADAMARD;  // op_params int 1: hint
  c.k = w->ne[0];
  c.n = w->ne[1];
  c.m = x->ne[1] * x->ne[2] * x->ne[3];
  if (x->ne[0] != w->ne[0]) c.k = -1;  // malformed; refused as "empty"
  return c;
}

// as [k, n, experts] (one matrix per expert), b [k, b_rows, tokens] f32, ids [used, tokens] i32;
// out [n, used, tokens]: out[:, e, t] = as[ids[e, t]] b[:, e % b_rows, t] (ggml.h,
// ggml_mul_mat_id). Described as the per-expert product, M = used x tokens rows in all.
MatmulCandidate describe_mul_mat_id(const ggml_tensor* node) {
  const ggml_tensor* as = node->src[0];
  const ggml_tensor* b = node->src[1];
  const ggml_tensor* ids = node->src[2];
  MatmulCandidate c;
  if (as == nullptr || b == nullptr || ids == nullptr) return c;
  c.weight = weight_format(as->type);
  if (c.weight != WeightFormat::kF32 && ggml_get_type_traits(as->type)->to_float == nullptr) {
    c.weight = WeightFormat::kOther;
  }
  c.weight_is_leaf = as->op == GGML_OP_NONE && as->view_src == nullptr;
  c.weight_contiguous = ggml_is_contiguous(as);
  c.weight_is_2d = as->ne[3] == 1;  // each expert's matrix is 2-D
  // The rows of b are read one at a time: each must be dense; ids is read through its strides.
  c.activation_f32 = b->type == GGML_TYPE_F32 && ids->type == GGML_TYPE_I32;
  c.activation_contiguous = b->nb[0] == sizeof(float) && b->ne[3] == 1;
  c.output_f32 = node->type == GGML_TYPE_F32;
  c.output_contiguous = ggml_is_contiguous(node);
  c.k = as->ne[0];
  c.n = as->ne[1];
  c.m = ids->ne[0] * ids->ne[1];
  if (b->ne[0] != as->ne[0] || ids->ne[1] != b->ne[2] || b->ne[1] <= 0 ||
      ids->ne[0] % b->ne[1] != 0) {
    c.k = -1;  // malformed; refused as "empty"
  }
  return c;
}

QuantPath quant_path_from(const std::string& knob) {
  return knob == "dequant" ? QuantPath::kDequant : QuantPath::kNative;
}

bool runs_native(QuantPath path, ggml_type type) {
  return path == QuantPath::kNative && splits_into_groups(type);
}

bool stays_quantized(const PackedWeight& weight) {
  return dynamic_cast<const GroupwiseLinearWeight*>(&weight) != nullptr;
}

int m_bucket(int64_t m) {
  static constexpr int64_t kUpper[] = {2, 16, 64, 128, 512, 2048, 8192};
  int bucket = 0;
  while (bucket < 7 && m >= kUpper[bucket]) ++bucket;
  return bucket;
}

void Counters::count_mul_mat(int64_t m, bool fallback) {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.mul_mat++;
  if (fallback) stats_.mul_mat_host_fallback++;
  stats_.min_m_seen = stats_.min_m_seen == 0 ? m : std::min(stats_.min_m_seen, m);
  stats_.max_m_seen = std::max(stats_.max_m_seen, m);
  stats_.m_hist[m_bucket(m)]++;
}

void Counters::count_weight(bool packed, bool repacked) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (packed) {
    stats_.weights_packed++;
    if (repacked) stats_.weights_repacked++;
  } else {
    stats_.weight_hits++;
  }
}

void Counters::count_stacked_product(int64_t nodes) {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.mul_mat_stacked_products++;
  stats_.mul_mat_stacked_nodes += nodes;
}

void Counters::count_mul_mat_id(int64_t experts, bool fallback) {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.mul_mat_id++;
  stats_.mul_mat_id_experts += experts;
  if (fallback) stats_.mul_mat_id_host_fallback++;
}

void Counters::count_supports(bool yes, bool declined) {
  std::lock_guard<std::mutex> lock(mutex_);
  (yes ? stats_.supports_mul_mat_yes : stats_.supports_mul_mat_no)++;
  if (declined) stats_.supports_mul_mat_declined++;
}

void Counters::count_flash_attn(bool fallback) {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.flash_attn++;
  if (fallback) stats_.flash_attn_host_fallback++;
}

void Counters::count_supports_flash_attn(bool yes) {
  std::lock_guard<std::mutex> lock(mutex_);
  (yes ? stats_.supports_flash_attn_yes : stats_.supports_flash_attn_no)++;
}

void Counters::count_supports_mul_mat_id(bool yes) {
  std::lock_guard<std::mutex> lock(mutex_);
  (yes ? stats_.supports_mul_mat_id_yes : stats_.supports_mul_mat_id_no)++;
}

ggml_npuflow_stats Counters::snapshot() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void Counters::reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_ = {};
}

Counters& counters() {
  static Counters instance;
  return instance;
}

namespace {

// Row `row` of a weight matrix of `k` columns stored as ggml rows of `row_bytes` from `base`,
// widened to fp32 (ggml's to_float for every non-F32 type).
void widen_weight_row(const uint8_t* base, size_t row_bytes, ggml_type type, int64_t k, int64_t row,
                      float* out) {
  const void* src = base + static_cast<size_t>(row) * row_bytes;
  if (type == GGML_TYPE_F32) {
    std::copy_n(static_cast<const float*>(src), k, out);
  } else {
    ggml_get_type_traits(type)->to_float(src, out, k);
  }
}

// Weights the runtime marks as such are immutable for the buffer's life: a sampled fingerprint
// suffices. Anything else (test graphs, a leaf the caller may rewrite) is hashed in full, so a
// changed tensor at a recycled address is never served stale.
bool immutable_weight(const ggml_tensor* w) {
  return w->buffer != nullptr &&
         ggml_backend_buffer_get_usage(w->buffer) == GGML_BACKEND_BUFFER_USAGE_WEIGHTS;
}

}  // namespace

Status MatmulEngine::product(const ResidentProduct& p, const ExecContext& context, bool& fallback) {
  auto weight_row = [&p](int64_t row, float* out) {
    for (const WeightRows& part : p.parts) {
      if (row < part.rows) return widen_weight_row(part.data, p.row_bytes, p.type, p.k, row, out);
      row -= part.rows;
    }
  };
  const bool native = runs_native(quant_path_, p.type);
  constexpr int64_t kRowsPerTask = 64;
  const auto row_tasks = static_cast<size_t>((p.n + kRowsPerTask - 1) / kRowsPerTask);
  // Weight rows [first, last) of each task, prepared in parallel.
  auto for_row_tasks = [&](const std::function<void(int64_t first, int64_t last)>& body) {
    context.run(row_tasks, [&](size_t task) {
      throw_if_injected(FaultPoint::kDeviceCompute);
      const int64_t first = static_cast<int64_t>(task) * kRowsPerTask;
      body(first, std::min(p.n, first + kRowsPerTask));
    });
  };
  auto pack = [&]() -> Result<std::unique_ptr<PackedWeight>> {
    if (native) {
      throw_if_injected(FaultPoint::kDeviceCompute);
      std::vector<int8_t> values(static_cast<size_t>(p.n * p.k));
      // Stacked parts are copied behind one another for the split (ggml rows are self-contained
      // blocks), only while packing.
      std::vector<uint8_t> stacked;
      const uint8_t* rows = p.parts.front().data;
      if (p.parts.size() > 1) {
        stacked.reserve(p.row_bytes * static_cast<size_t>(p.n));
        for (const WeightRows& part : p.parts) {
          stacked.insert(stacked.end(), part.data,
                         part.data + p.row_bytes * static_cast<size_t>(part.rows));
        }
        rows = stacked.data();
      }
      GroupwiseFactors factors =
          split_weight_rows(p.type, rows, p.row_bytes, p.k, p.n, values.data(), context);
      const int64_t group = factors.group;
      auto packed = pack_groupwise_linear(device_, values.data(), std::move(factors), p.k, p.n);
      // A device whose group-wise GEMM does not take the type's blocks (the RK3588's groups of
      // 32 against Q6_K's 16) gets the weight dequantized, as every unmapped type is.
      if (packed.is_ok() || packed.status().code() != StatusCode::kUnsupported) return packed;
      if (logger_.enabled(LogLevel::kVerbose)) {
        logger_.verbose(str_cat(ggml_type_name(p.type), " weight '", p.what,
                                "' dequantized: ", device_.name(), " takes no ", group,
                                "-value groups (", packed.status().message(), ")"));
      }
    }
    std::vector<float> rows(static_cast<size_t>(p.n * p.k));
    for_row_tasks([&](int64_t first, int64_t last) {
      for (int64_t r = first; r < last; ++r) weight_row(r, rows.data() + r * p.k);
    });
    return pack_linear_weight(device_, rows.data(), p.k, p.n);
  };
  // The device step: resident weight (packed on first use) and the GEMM. A failure, returned or
  // thrown, is answered by the host reference: a claim never fails a run.
  auto on_device = [&] {
    return status_of([&]() -> Status {
      CacheOutcome outcome = CacheOutcome::kHit;
      auto weight = cache_.get_or_pack(p.identity, p.fingerprint, pack, &outcome);
      if (!weight.is_ok()) return weight.status();
      const bool packed = outcome != CacheOutcome::kHit;
      if (packed) record_footprint(p, *weight.value());
      if (counted_) counters().count_weight(packed, outcome == CacheOutcome::kRepacked);
      if (p.expert_of != nullptr) {
        routing_.record_expert(p.expert_of, outcome, packed ? weight.value()->resident_bytes() : 0);
      }
      return stays_quantized(*weight.value())
                 ? run_groupwise_linear(device_, p.x, p.m, *weight.value(), p.y, context)
                 : run_linear(device_, p.x, p.m, *weight.value(), p.y, context);
    });
  };
  return fallback_.run(
      on_device,
      [&] {
        fallback = true;
        reference_linear(p.x, p.m, p.k, p.n, weight_row, p.y, context);
        return Status::ok();
      },
      fallbacks_, logger_,
      [&](const Status& status) {
        return str_cat("device ", device_.name(), " could not run ", p.what, ": ",
                       status.to_string(), "; running it on the host reference (said once)");
      });
}

Status MatmulEngine::compute(const ggml_tensor* node, const ExecContext& context) {
  const MatmulCandidate c = describe_mul_mat(node);
  // Structure must hold whatever called us; the row threshold is the scheduler's business.
  const RouteVerdict verdict = route_matmul(c, MatmulRouting{1, 1});
  if (!verdict.accept) {
    return unsupported(
        str_cat("MUL_MAT '", node->name, "' (", describe(c), ") refused: ", verdict.reason));
  }
  const ggml_tensor* w = node->src[0];
  const ggml_tensor* x = node->src[1];
  const ResidentProduct p{
      {{static_cast<const uint8_t*>(w->data), c.n}},
      w->data,
      w->nb[1],
      w->type,
      c.k,
      c.n,
      WeightFingerprint{w->name, static_cast<int>(w->type), c.k, c.n,
                        content_hash(w->data, ggml_nbytes(w), !immutable_weight(w))},
      static_cast<const float*>(x->data),
      c.m,
      static_cast<float*>(node->data),
      str_cat("MUL_MAT '", node->name, "' (", describe(c), ")")};
  bool fallback = false;
  NPUFLOW_RETURN_IF_ERROR(product(p, context, fallback));
  if (logger_.enabled(LogLevel::kTrace)) {
    logger_.trace(str_cat("MUL_MAT '", node->name, "' ", describe(c),
                          fallback ? " on host reference" : " on device"));
  }
  mul_mats_++;
  m_histogram_[c.m]++;
  if (counted_) counters().count_mul_mat(c.m, fallback);
  return Status::ok();
}

Status MatmulEngine::compute_stacked(const std::vector<const ggml_tensor*>& nodes,
                                     const ExecContext& context) {
  if (nodes.size() == 1) return compute(nodes.front(), context);
  const ggml_tensor* head = nodes.front();
  const ggml_tensor* x = head->src[1];
  const MatmulCandidate first = describe_mul_mat(head);
  ResidentProduct p{{},
                    nullptr,
                    head->src[0]->nb[1],
                    head->src[0]->type,
                    first.k,
                    0,
                    {},
                    static_cast<const float*>(x->data),
                    first.m,
                    nullptr,
                    ""};
  std::vector<uint64_t> contents;
  std::string names;
  for (const ggml_tensor* node : nodes) {
    const MatmulCandidate c = describe_mul_mat(node);
    const RouteVerdict verdict = route_matmul(c, MatmulRouting{1, 1});
    const ggml_tensor* w = node->src[0];
    if (!verdict.accept || !stacks_with(head, node)) {
      return unsupported(str_cat(
          "MUL_MAT '", node->name, "' (", describe(c), ") cannot be stacked with '", head->name,
          "': ", verdict.accept ? "another activation or weight layout" : verdict.reason));
    }
    p.parts.push_back({static_cast<const uint8_t*>(w->data), c.n});
    p.n += c.n;
    contents.push_back(content_hash(w->data, ggml_nbytes(w), !immutable_weight(w)));
    names += str_cat(names.empty() ? "" : "+", w->name);
  }
  // One byte past the first weight's data: ggml aligns every tensor, so no tensor starts there,
  // and the stacked weight never takes the cache entry of its first part run alone.
  p.identity = static_cast<const uint8_t*>(head->src[0]->data) + 1;
  p.fingerprint =
      WeightFingerprint{names, static_cast<int>(p.type), p.k, p.n,
                        content_hash(contents.data(), contents.size() * sizeof(uint64_t), true)};
  stacked_output_.resize(static_cast<size_t>(p.m * p.n));
  p.y = stacked_output_.data();
  p.what = str_cat("MUL_MATs ", names, " stacked (K=", p.k, " N=", p.n, " M=", p.m, ")");
  bool fallback = false;
  NPUFLOW_RETURN_IF_ERROR(product(p, context, fallback));
  // Each node's columns into its own rows.
  constexpr int64_t kRowsPerTask = 64;
  context.run(static_cast<size_t>((p.m + kRowsPerTask - 1) / kRowsPerTask), [&](size_t task) {
    const int64_t begin = static_cast<int64_t>(task) * kRowsPerTask;
    const int64_t end = std::min(p.m, begin + kRowsPerTask);
    int64_t column = 0;
    for (size_t j = 0; j < nodes.size(); ++j) {
      const int64_t n = p.parts[j].rows;
      auto* out = static_cast<float*>(nodes[j]->data);
      for (int64_t r = begin; r < end; ++r) {
        std::copy_n(p.y + r * p.n + column, n, out + r * n);
      }
      column += n;
    }
  });
  if (logger_.enabled(LogLevel::kTrace)) {
    logger_.trace(str_cat(p.what, fallback ? " on host reference" : " on device"));
  }
  for (size_t j = 0; j < nodes.size(); ++j) {
    mul_mats_++;
    m_histogram_[p.m]++;
    if (counted_) counters().count_mul_mat(p.m, fallback);
  }
  stacked_products_++;
  stacked_mul_mats_ += static_cast<int64_t>(nodes.size());
  if (counted_) counters().count_stacked_product(static_cast<int64_t>(nodes.size()));
  return Status::ok();
}

Status MatmulEngine::compute_id(const ggml_tensor* node, const ExecContext& context) {
  const MatmulCandidate c = describe_mul_mat_id(node);
  const RouteVerdict verdict = route_matmul(c, MatmulRouting{1, 1});
  if (!verdict.accept) {
    return unsupported(
        str_cat("MUL_MAT_ID '", node->name, "' (", describe(c), ") refused: ", verdict.reason));
  }
  const ggml_tensor* as = node->src[0];
  const ggml_tensor* b = node->src[1];
  const ggml_tensor* ids = node->src[2];
  const int64_t used = ids->ne[0], tokens = ids->ne[1], experts = as->ne[2];
  // Which (slot, token) rows each expert serves, in token order.
  std::vector<std::vector<std::pair<int64_t, int64_t>>> routed(static_cast<size_t>(experts));
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t e = 0; e < used; ++e) {
      int32_t expert;
      std::memcpy(&expert, static_cast<const char*>(ids->data) + e * ids->nb[0] + t * ids->nb[1],
                  sizeof(expert));
      if (expert < 0 || expert >= experts) {
        return invalid_argument(
            str_cat("MUL_MAT_ID '", node->name, "' routes to expert ", expert, " of ", experts));
      }
      routed[static_cast<size_t>(expert)].emplace_back(e, t);
    }
  }
  std::vector<int64_t> rows_per_expert(static_cast<size_t>(experts));
  for (int64_t e = 0; e < experts; ++e) {
    rows_per_expert[static_cast<size_t>(e)] = static_cast<int64_t>(routed[e].size());
  }
  routing_.record_call(as->name, rows_per_expert);
  const bool immutable = immutable_weight(as);
  std::vector<float> x, y;
  bool any_fallback = false;
  int64_t experts_run = 0;
  for (int64_t expert = 0; expert < experts; ++expert) {
    const auto& rows = routed[static_cast<size_t>(expert)];
    if (rows.empty()) continue;
    const auto m = static_cast<int64_t>(rows.size());
    x.resize(static_cast<size_t>(m * c.k));
    y.resize(static_cast<size_t>(m * c.n));
    for (int64_t r = 0; r < m; ++r) {
      const auto [e, t] = rows[static_cast<size_t>(r)];
      const auto* src = reinterpret_cast<const float*>(static_cast<const char*>(b->data) +
                                                       (e % b->ne[1]) * b->nb[1] + t * b->nb[2]);
      std::copy_n(src, c.k, x.data() + r * c.k);
    }
    const auto* weight = static_cast<const uint8_t*>(as->data) + expert * as->nb[2];
    const ResidentProduct p{
        {{weight, c.n}},
        weight,
        as->nb[1],
        as->type,
        c.k,
        c.n,
        WeightFingerprint{str_cat(as->name, "#", expert), static_cast<int>(as->type), c.k, c.n,
                          content_hash(weight, as->nb[2], !immutable)},
        x.data(),
        m,
        y.data(),
        str_cat("MUL_MAT_ID '", node->name, "' expert ", expert, " (", describe(c), ")"),
        as->name};
    bool fallback = false;
    NPUFLOW_RETURN_IF_ERROR(product(p, context, fallback));
    any_fallback = any_fallback || fallback;
    for (int64_t r = 0; r < m; ++r) {
      const auto [e, t] = rows[static_cast<size_t>(r)];
      auto* dst = reinterpret_cast<float*>(static_cast<char*>(node->data) + e * node->nb[1] +
                                           t * node->nb[2]);
      std::copy_n(y.data() + r * c.n, c.n, dst);
    }
    experts_run++;
  }
  if (logger_.enabled(LogLevel::kTrace)) {
    logger_.trace(str_cat("MUL_MAT_ID '", node->name, "' ", describe(c), ": ", experts_run,
                          " experts", any_fallback ? ", some on host reference" : " on device"));
  }
  mul_mat_ids_++;
  if (counted_) counters().count_mul_mat_id(experts_run, any_fallback);
  return Status::ok();
}

void MatmulEngine::record_footprint(const ResidentProduct& p, const PackedWeight& weight) {
  std::lock_guard<std::mutex> lock(footprint_mutex_);
  footprint_[p.identity] = Footprint{p.type, p.row_bytes * static_cast<size_t>(p.n),
                                     weight.resident_bytes(), stays_quantized(weight)};
}

std::string MatmulEngine::footprint() const {
  std::lock_guard<std::mutex> lock(footprint_mutex_);
  struct TypeTotals {
    size_t file = 0, resident = 0;
    bool native = true;  // every weight of the type stayed quantized
  };
  std::map<ggml_type, TypeTotals> by_type;
  for (const auto& [weight, f] : footprint_) {
    TypeTotals& totals = by_type[f.type];
    totals.file += f.file_bytes;
    totals.resident += f.resident_bytes;
    totals.native = totals.native && f.native;
  }
  std::string line;
  for (const auto& [type, totals] : by_type) {
    char ratio[32];
    std::snprintf(ratio, sizeof(ratio), "%.3f",
                  static_cast<double>(totals.resident) / static_cast<double>(totals.file));
    line += str_cat(line.empty() ? "weights " : "; ", ggml_type_name(type), " ",
                    totals.native ? "native" : "dequant", ": file_bytes=", totals.file,
                    " resident_bytes=", totals.resident, " ratio=", ratio);
  }
  return line;
}

std::string MatmulEngine::summary() const {
  const ResidentWeightStats s = cache_.stats();
  std::string hist;
  for (const auto& [m, count] : m_histogram_) {
    hist += str_cat(hist.empty() ? "" : ",", m, ":", count);
  }
  return str_cat("mul_mat=", mul_mats_, " host_fallback=", fallbacks_, " m_hist={", hist,
                 "} weights_packed=", s.packs + s.repacks, " repacked=", s.repacks,
                 " hits=", s.hits, " evicted=", s.evictions,
                 " stacked_products=", stacked_products_, " stacked_mul_mats=", stacked_mul_mats_,
                 " mul_mat_id=", mul_mat_ids_, " resident_mib=", s.resident_bytes / (1024 * 1024));
}

}  // namespace npuflow::ggml

#include "route/claim_policy.h"

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>

#include "core/json.h"
#include "core/strings.h"

namespace npuflow {
namespace {

struct Work {
  double flops = 0;
  int64_t tokens = -1, hidden = 0;
  int64_t rows = -1, k = 0, n = 0;
  bool known = true;  // every GEMM's rows are known
};

Work work_of(const Claim& claim) {
  Work w;
  for (const GemmWork& g : claim.work) {
    if (g.rows < 0) {
      w.known = false;
      continue;
    }
    w.flops +=
        2.0 * static_cast<double>(g.rows) * static_cast<double>(g.k) * static_cast<double>(g.n);
  }
  if (claim.kind == ClaimKind::kVisionEncoder) {
    w.hidden = claim.encoder.hidden;
    for (const GemmWork& g : claim.work) {
      if (g.attention) {
        w.tokens = g.n;  // the scores GEMM: N is the token count
        break;
      }
    }
  } else if (!claim.work.empty()) {
    w.rows = claim.work.front().rows;
    w.k = claim.work.front().k;
    w.n = claim.work.front().n;
  }
  return w;
}

// The kind of measured row that vouches for a claim. A quantized encoder (int8 linears native,
// weights dequantized) costs what neither a float encoder nor a QDQ layer measured costs.
std::string cost_kind(const Claim& claim) {
  if (claim.kind == ClaimKind::kVisionEncoder && claim.encoder.dequantized)
    return "quantized_encoder";
  return claim_kind_name(claim.kind);
}

double log_distance(double a, double b) {
  if (a <= 0 || b <= 0) return 0;
  return std::abs(std::log(a / b));
}

std::string fixed(double value, int digits) {
  std::ostringstream out;
  out.setf(std::ios::fixed);
  out.precision(digits);
  out << value;
  return out.str();
}

std::string ms(double value) {
  return fixed(value, value < 10 ? 2 : 1);
}

}  // namespace

ClaimPolicy resolve_claim_policy(std::string_view claim_knob, std::string_view device_knob,
                                 std::string_view device_name) {
  if (claim_knob == "all") return ClaimPolicy::kAll;
  if (claim_knob == "faster") return ClaimPolicy::kFaster;
  return device_knob == "auto" && device_name == "host" ? ClaimPolicy::kFaster : ClaimPolicy::kAll;
}

ClaimPolicy resolve_ggml_claim_policy(std::string_view claim_knob, std::string_view device_name) {
  if (claim_knob == "all") return ClaimPolicy::kAll;
  if (claim_knob == "faster") return ClaimPolicy::kFaster;
  return device_name == "host" ? ClaimPolicy::kFaster : ClaimPolicy::kAll;
}

const char* claim_policy_name(ClaimPolicy policy) {
  return policy == ClaimPolicy::kFaster ? "faster" : "all";
}

std::string machine_signature() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) {
    return __builtin_cpu_supports("avx512vnni") ? "x86_64-avx512-vnni" : "x86_64-avx512";
  }
  return __builtin_cpu_supports("avx2") ? "x86_64-avx2" : "x86_64";
#elif defined(__aarch64__)
  return "aarch64";
#else
  return "other";
#endif
}

std::string cost_cache_dir() {
  const char* cache = std::getenv("NPUFLOW_CACHE_DIR");
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  if (cache != nullptr && *cache != 0) return cache;
  if (xdg != nullptr && *xdg != 0) return str_cat(xdg, "/npuflow");
  if (home != nullptr && *home != 0) return str_cat(home, "/.cache/npuflow");
  return ".";
}

std::string default_cost_table_path() {
  return str_cat(cost_cache_dir(), "/claim-costs-", machine_signature(), ".json");
}

Result<CostTable> load_cost_table(const std::string& path) {
  std::ifstream file(path);
  if (!file.good()) return unsupported(str_cat("no cost table at ", path));
  std::stringstream text;
  text << file.rdbuf();
  auto parsed = JsonValue::parse(text.str());
  if (!parsed.is_ok()) return parsed.status();
  const JsonValue& root = parsed.value();
  CostTable table;
  table.path = path;
  table.machine = root["machine"].string();
  for (const JsonValue& row : root["rows"].array()) {
    MeasuredCost cost;
    cost.kind = row["kind"].string();
    cost.model = row["model"].string();
    cost.family = row["family"].string();
    cost.form = row["form"].string();
    cost.tokens = static_cast<int64_t>(row["tokens"].number());
    cost.hidden = static_cast<int64_t>(row["hidden"].number());
    cost.rows = static_cast<int64_t>(row["rows"].number());
    cost.k = static_cast<int64_t>(row["k"].number());
    cost.n = static_cast<int64_t>(row["n"].number());
    cost.flops = row["flops"].number();
    cost.npuflow_ms = row["npuflow_ms"].number();
    cost.cpu_ep_ms = row["cpu_ep_ms"].number();
    if (cost.npuflow_ms > 0 && cost.cpu_ep_ms > 0 && cost.flops > 0) table.rows.push_back(cost);
  }
  return table;
}

ClaimVerdict judge_claim(const Claim& claim, const CostTable* table,
                         const std::string& table_path) {
  ClaimVerdict verdict;
  const std::string kind = cost_kind(claim);
  const Work work = work_of(claim);
  const MeasuredCost* nearest = nullptr;
  double best = std::numeric_limits<double>::infinity();
  if (table != nullptr) {
    for (const MeasuredCost& row : table->rows) {
      if (row.kind != kind) continue;
      if (claim.kind == ClaimKind::kVisionEncoder && row.form != claim.encoder.quant_form) continue;
      // Shape first; between rows of the same shape (ViT and CLIP are both 197 x 768), the
      // claim's own family.
      const double distance =
          claim.kind == ClaimKind::kVisionEncoder
              ? log_distance(static_cast<double>(work.tokens), static_cast<double>(row.tokens)) +
                    log_distance(static_cast<double>(work.hidden),
                                 static_cast<double>(row.hidden)) +
                    (row.family == claim.encoder.family ? 0.0 : 0.01)
              : log_distance(static_cast<double>(work.rows), static_cast<double>(row.rows)) +
                    log_distance(static_cast<double>(work.k), static_cast<double>(row.k)) +
                    log_distance(static_cast<double>(work.n), static_cast<double>(row.n));
      // Among rows equally near (one shape measured in several forms, e.g. a QDQ encoder with
      // int8 and with uint8 activations, which the CPU EP runs at different speeds), the least
      // favourable to npuflow: do no harm.
      const bool tie = nearest != nullptr && std::abs(distance - best) <= 1e-12;
      if (distance < best - 1e-12 ||
          (tie && row.npuflow_ms * nearest->cpu_ep_ms > nearest->npuflow_ms * row.cpu_ep_ms)) {
        best = std::min(best, distance);
        nearest = &row;
      }
    }
  }
  if (nearest == nullptr) {
    verdict.reason = "no_measured_cost";
    const std::string form =
        claim.encoder.quant_form.empty() ? "" : str_cat(" (", claim.encoder.quant_form, ")");
    verdict.detail = str_cat("claim=faster and no ", kind, form, " cost measured on this machine (",
                             table ? table->path : table_path,
                             "); `make bench` measures them, NPUFLOW_CLAIM=all claims regardless");
    return verdict;
  }
  // Both EPs' times at the measured shape, scaled by this claim's GEMM work (their ratio is the
  // measured one; the scaling only makes the figures read as this claim's).
  const double scale = work.known && work.flops > 0 ? work.flops / nearest->flops : 1.0;
  verdict.npuflow_ms = nearest->npuflow_ms * scale;
  verdict.cpu_ep_ms = nearest->cpu_ep_ms * scale;
  verdict.keep = verdict.npuflow_ms <= verdict.cpu_ep_ms;
  const std::string costs =
      str_cat("npuflow host ", ms(verdict.npuflow_ms), " ms vs CPU EP ", ms(verdict.cpu_ep_ms),
              " ms (", fixed(verdict.cpu_ep_ms / verdict.npuflow_ms, 2), "x), from ",
              nearest->model, " measured in ", table->path);
  if (!verdict.keep) verdict.reason = "slower_than_cpu_ep";
  verdict.detail = costs;
  return verdict;
}

void apply_claim_policy(ClaimSet& claims, ClaimPolicy policy, const CostTable* table,
                        const std::string& table_path) {
  if (policy == ClaimPolicy::kAll) return;
  std::vector<Claim> kept;
  for (Claim& claim : claims.claims) {
    const ClaimVerdict verdict = judge_claim(claim, table, table_path);
    if (verdict.keep) {
      kept.push_back(std::move(claim));
    } else {
      claims.refusals.push_back({kNoNode, claim.anchor_name, verdict.reason, verdict.detail});
    }
  }
  claims.claims = std::move(kept);
}

}  // namespace npuflow

#include "route/matmul_costs.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/json.h"
#include "core/strings.h"
#include "graph/claim_report.h"
#include "pack/resident_weights.h"
#include "route/claim_policy.h"

namespace npuflow {
namespace {

std::string fixed(double value, int digits) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.*f", digits, value);
  return text;
}

std::string row_json(const MatmulCostKey& key, const MatmulCost& cost) {
  char ms[96];
  std::snprintf(ms, sizeof(ms), "\"npuflow_ms\":%.6g,\"cpu_ms\":%.6g", cost.npuflow_ms,
                cost.cpu_ms);
  return str_cat("{\"weight\":\"", json_escape(key.weight), "\",\"k\":", key.k, ",\"n\":", key.n,
                 ",\"rows\":", key.rows, ",\"threads\":", key.threads, ",", ms,
                 ",\"rounds\":", cost.rounds, ",\"measured_n\":", cost.measured_n, "}");
}

}  // namespace

int64_t cost_rows_bucket(int64_t rows) {
  if (rows <= 1) return 1;
  const double exponent = std::round(std::log2(static_cast<double>(rows)));
  return int64_t{1} << static_cast<int>(std::min(exponent, 40.0));
}

std::string describe(const MatmulCostKey& key) {
  return str_cat(key.weight, " K=", key.k, " N=", key.n, " M~", key.rows, " (", key.threads,
                 key.threads == 1 ? " thread)" : " threads)");
}

std::string describe_costs(const MatmulCost& cost) {
  auto ms = [](double v) { return fixed(v, v < 10 ? 3 : 1); };
  return str_cat("NPUFLOW ", ms(cost.npuflow_ms), " ms, CPU backend ", ms(cost.cpu_ms), " ms (",
                 fixed(cost.npuflow_ms > 0 ? cost.cpu_ms / cost.npuflow_ms : 0, 2), "x)");
}

std::map<MatmulCostKey, MatmulCost> MatmulCostTable::read_rows(std::string* why_not) const {
  std::map<MatmulCostKey, MatmulCost> rows;
  std::ifstream file(path_);
  if (!file.good()) {
    *why_not = str_cat("no cost table at ", path_);
    return rows;
  }
  std::stringstream text;
  text << file.rdbuf();
  auto parsed = JsonValue::parse(text.str());
  if (!parsed.is_ok()) {
    *why_not =
        str_cat("the cost table ", path_, " does not parse (", parsed.status().message(), ")");
    return rows;
  }
  const JsonValue& root = parsed.value();
  if (root["identity"].string() != identity_) {
    *why_not =
        str_cat("the cost table ", path_, " was measured on another machine or build (identity '",
                root["identity"].string(), "', this one '", identity_, "')");
    return rows;
  }
  for (const JsonValue& row : root["rows"].array()) {
    MatmulCostKey key;
    key.weight = row["weight"].string();
    key.k = row["k"].integer();
    key.n = row["n"].integer();
    key.rows = row["rows"].integer();
    key.threads = static_cast<int>(row["threads"].integer());
    MatmulCost cost;
    cost.npuflow_ms = row["npuflow_ms"].number();
    cost.cpu_ms = row["cpu_ms"].number();
    cost.rounds = static_cast<int>(row["rounds"].integer());
    cost.measured_n = row["measured_n"].integer();
    // A row must be a measurement: both times positive and finite, a real shape.
    const bool valid = !key.weight.empty() && key.k > 0 && key.n > 0 && key.rows > 0 &&
                       key.threads > 0 && std::isfinite(cost.npuflow_ms) &&
                       std::isfinite(cost.cpu_ms) && cost.npuflow_ms > 0 && cost.cpu_ms > 0;
    if (valid) rows[key] = cost;
  }
  why_not->clear();
  return rows;
}

std::optional<std::string> MatmulCostTable::load() {
  std::string why_not;
  rows_ = read_rows(&why_not);
  if (!why_not.empty()) return why_not;
  return std::nullopt;
}

Status MatmulCostTable::record(const MatmulCostKey& key, const MatmulCost& cost) {
  std::string ignored;
  std::map<MatmulCostKey, MatmulCost> merged = read_rows(&ignored);
  for (const auto& [k, c] : rows_) merged[k] = c;
  merged[key] = cost;
  rows_ = merged;

  std::string out = str_cat("{\"identity\":\"", json_escape(identity_), "\",\"rows\":[\n");
  size_t i = 0;
  for (const auto& [k, c] : rows_) out += str_cat(i++ ? ",\n" : "", row_json(k, c));
  out += "\n]}\n";

  namespace fs = std::filesystem;
  std::error_code error;
  const fs::path path(path_);
  if (path.has_parent_path()) fs::create_directories(path.parent_path(), error);
  const std::string temporary = str_cat(path_, ".tmp.", getpid());
  {
    std::ofstream file(temporary, std::ios::trunc);
    file << out;
    if (!file.good()) return unsupported(str_cat("cannot write the cost table ", temporary));
  }
  fs::rename(temporary, path, error);
  if (error) {
    fs::remove(temporary, error);
    return unsupported(str_cat("cannot write the cost table ", path_));
  }
  return Status::ok();
}

const MatmulCost* MatmulCostTable::find(const MatmulCostKey& key) const {
  auto it = rows_.find(key);
  return it == rows_.end() ? nullptr : &it->second;
}

std::string default_matmul_cost_path(const std::string& identity) {
  char hash[24];
  std::snprintf(hash, sizeof(hash), "%016llx",
                static_cast<unsigned long long>(
                    content_hash(identity.data(), identity.size(), /*full=*/true)));
  return str_cat(cost_cache_dir(), "/ggml-costs-", machine_signature(), "-", hash, ".json");
}

}  // namespace npuflow

#include "ggml/ggml_offload_policy.h"

#include <cctype>

#include "core/strings.h"

namespace npuflow::ggml {
namespace {

constexpr size_t kNamesShown = 8;

std::string weights_list(const std::set<std::string>& names) {
  std::vector<std::string> shown;
  for (const std::string& name : names) {
    if (shown.size() == kNamesShown) break;
    shown.push_back(name);
  }
  std::string out = join(shown, ", ");
  if (names.size() > kNamesShown) out += str_cat(" and ", names.size() - kNamesShown, " more");
  return out;
}

}  // namespace

const char* offload_mode_name(OffloadMode mode) {
  switch (mode) {
    case OffloadMode::kIdle:
      return "idle";
    case OffloadMode::kAll:
      return "all";
    case OffloadMode::kFaster:
      return "faster";
  }
  return "?";
}

std::string fold_block_numbers(const std::string& name) {
  std::string out;
  size_t i = 0;
  while (i < name.size()) {
    size_t j = i;
    while (j < name.size() && std::isdigit(static_cast<unsigned char>(name[j]))) ++j;
    const bool field =
        j > i && (i == 0 || name[i - 1] == '.') && (j == name.size() || name[j] == '.');
    if (field) {
      out += '*';
      i = j;
    } else {
      out += name[i++];
    }
  }
  return out;
}

std::string OffloadPolicy::identity() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!identity_) identity_ = identity_of_();
  return *identity_;
}

void OffloadPolicy::use_table(const std::string& path) {
  std::lock_guard<std::mutex> lock(mutex_);
  table_path_ = path;
  table_.reset();
  decisions_.clear();
}

MatmulCostTable& OffloadPolicy::table() {
  if (!table_) {
    if (!identity_) identity_ = identity_of_();
    const std::string path =
        table_path_.empty() ? default_matmul_cost_path(*identity_) : table_path_;
    table_.emplace(path, *identity_);
    if (auto why_not = table_->load()) {
      logger_.info(str_cat("claim=faster: ", *why_not,
                           "; each MUL_MAT shape is measured against the CPU backend the first "
                           "time it is offered, and recorded there"));
    } else {
      logger_.info(str_cat("claim=faster: ", table_->size(), " measured MUL_MAT shapes in ",
                           table_->path()));
    }
  }
  return *table_;
}

OffloadPolicy::Decision OffloadPolicy::decide(ggml_type type, const MatmulCostKey& key) {
  Decision decision;
  MatmulCostTable& costs = table();
  if (const MatmulCost* known = costs.find(key)) {
    decision.cost = *known;
  } else {
    logger_.info(str_cat("claim=faster: measuring ", describe(key),
                         " on NPUFLOW and on the CPU backend (once; recorded in ", costs.path(),
                         ")"));
    auto measured = measure_(type, key);
    if (!measured.is_ok()) {
      decision.unmeasured = measured.status().message();
      logger_.warning(str_cat("claim=faster: could not measure ", describe(key), ": ",
                              decision.unmeasured,
                              "; declining it (NPUFLOW_CLAIM=all takes it regardless)"));
      return decision;
    }
    decision.cost = measured.value();
    decision.measured_now = true;
    const Status written = costs.record(key, decision.cost);
    if (!written.is_ok()) {
      logger_.warning(str_cat("claim=faster: ", written.message(),
                              "; the measurement is used in this process only"));
    }
  }
  decision.take = decision.cost.npuflow_not_slower();
  logger_.info(str_cat("claim=faster: ", decision.take ? "took " : "declined as slower ",
                       describe(key), ": ", describe_costs(decision.cost),
                       decision.measured_now ? " (measured now)" : " (from the cost table)"));
  return decision;
}

bool OffloadPolicy::take(const ggml_tensor* op, const MatmulCandidate& c, int threads) {
  if (mode_ == OffloadMode::kIdle) return false;
  if (mode_ == OffloadMode::kAll) return true;
  const ggml_tensor* w = op->src[0];
  const MatmulCostKey key{ggml_type_name(w->type), c.k, c.n, cost_rows_bucket(c.m), threads};
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = decisions_.find(key);
  if (it == decisions_.end()) it = decisions_.emplace(key, decide(w->type, key)).first;
  it->second.weights.insert(fold_block_numbers(w->name));
  return it->second.take;
}

std::vector<std::string> OffloadPolicy::summary() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::string> lines;
  if (mode_ == OffloadMode::kIdle) {
    lines.push_back(
        "NPUFLOW idle: no NPU found; every op stayed on the CPU backend (set "
        "NPUFLOW_DEVICE=host or sim to run it anyway)");
    return lines;
  }
  if (mode_ == OffloadMode::kAll) {
    lines.push_back(
        "NPUFLOW claim=all: every MUL_MAT the routing rules accept is taken; no cost consulted");
    return lines;
  }
  size_t taken = 0, slower = 0, unmeasured = 0;
  for (const auto& [key, d] : decisions_) {
    (d.take ? taken : !d.unmeasured.empty() ? unmeasured : slower)++;
  }
  lines.push_back(str_cat("NPUFLOW claim=faster (cost table ",
                          table_ ? table_->path() : std::string("not read yet"), "): took ", taken,
                          " MUL_MAT shapes, declined ", slower, " as slower",
                          unmeasured ? str_cat(" and ", unmeasured, " unmeasured") : ""));
  for (const auto& [key, d] : decisions_) {
    const char* what = d.take                 ? "took "
                       : d.unmeasured.empty() ? "declined as slower "
                                              : "declined unmeasured ";
    const std::string costs =
        d.unmeasured.empty() ? describe_costs(d.cost) : str_cat("(", d.unmeasured, ")");
    lines.push_back(str_cat("  ", what, describe(key), ": ", costs, ": ", weights_list(d.weights)));
  }
  return lines;
}

}  // namespace npuflow::ggml

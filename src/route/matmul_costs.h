// Do-no-harm for the ggml front end (issue #18): the measured cost of one weight x activation
// product on npuflow's device and on the runtime's own CPU path, one row per (weight type, K, N,
// row bucket, CPU threads), kept in a file per machine and build. A product is taken only where
// its row says the device is not slower; a shape with no row is measured before it is decided,
// never guessed. Runtime-neutral: the front end measures (it alone can run its runtime's CPU
// path) and this file keeps, reads and judges the rows.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "core/status.h"

namespace npuflow {

// Activation rows are measured at the nearest power of two (in log space: 181 -> 128, 182 ->
// 256), so a prompt of any length reuses the row of its bucket.
int64_t cost_rows_bucket(int64_t rows);

struct MatmulCostKey {
  std::string weight;  // weight type as the runtime names it, e.g. "q4_K"
  int64_t k = 0, n = 0;
  int64_t rows = 0;  // the bucket (cost_rows_bucket)
  int threads = 0;   // threads of the runtime's CPU path
  auto tie() const { return std::tie(weight, k, n, rows, threads); }
  bool operator<(const MatmulCostKey& other) const { return tie() < other.tie(); }
  bool operator==(const MatmulCostKey& other) const { return tie() == other.tie(); }
};

struct MatmulCost {
  double npuflow_ms = 0;   // per call, weight already resident (least of the rounds)
  double cpu_ms = 0;       // per call of the runtime's CPU path (least of the rounds)
  int rounds = 0;          // alternating rounds behind each figure
  int64_t measured_n = 0;  // output columns actually run (a slice of a wide weight), 0 = all
  // Taken when npuflow is not slower.
  bool npuflow_not_slower() const { return npuflow_ms <= cpu_ms; }
};

// "q4_K K=576 N=1536 M~512 (2 threads)"
std::string describe(const MatmulCostKey& key);
// "NPUFLOW 1.23 ms, CPU backend 3.10 ms (2.52x)"
std::string describe_costs(const MatmulCost& cost);

// The rows measured under one identity (machine and builds). A file holding another identity,
// or one that does not parse, is not read: its shapes are measured again and the file replaced.
class MatmulCostTable {
 public:
  MatmulCostTable(std::string path, std::string identity)
      : path_(std::move(path)), identity_(std::move(identity)) {}

  // Reads the file. Returns why nothing was read (missing, unreadable, other identity), or
  // nullopt when the rows were loaded.
  std::optional<std::string> load();
  // Adds a row and writes the file (merged with rows another process of the same identity wrote
  // meanwhile; written to a temporary file and renamed, so readers never see half a table).
  Status record(const MatmulCostKey& key, const MatmulCost& cost);

  const MatmulCost* find(const MatmulCostKey& key) const;
  const std::string& path() const { return path_; }
  const std::string& identity() const { return identity_; }
  size_t size() const { return rows_.size(); }

 private:
  std::map<MatmulCostKey, MatmulCost> read_rows(std::string* why_not) const;

  std::string path_;
  std::string identity_;
  std::map<MatmulCostKey, MatmulCost> rows_;
};

// <cache>/ggml-costs-<machine signature>-<hash of identity>.json, where <cache> is the one
// claim_policy.h names ($NPUFLOW_CACHE_DIR, $XDG_CACHE_HOME/npuflow or ~/.cache/npuflow).
std::string default_matmul_cost_path(const std::string& identity);

}  // namespace npuflow

// Which of the MUL_MATs the routing rules accept NPUFLOW actually takes (issue #18, do no harm):
//
//   idle    device=auto found no NPU: nothing. llama.cpp's CPU backend already is the host, and
//           npuflow's host GEMMs beside it help nobody (and would hold fp32 copies of weights).
//   all     every accepted MUL_MAT (claim=all; claim=auto on sim or a board).
//   faster  only where this machine's measured costs say NPUFLOW is not slower than the CPU
//           backend for that weight type, shape, row bucket and thread count (claim=faster;
//           claim=auto on host). A shape not in the cost table is measured the first time it is
//           offered (ggml_cost_probe.h) and recorded, so each is measured once per machine and
//           build; one that cannot be measured is declined, never guessed.
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/log.h"
#include "ggml.h"
#include "route/matmul_costs.h"
#include "route/matmul_route.h"

namespace npuflow::ggml {

enum class OffloadMode { kIdle, kAll, kFaster };
const char* offload_mode_name(OffloadMode mode);

// Measures one shape (the backend binds it to its device; tests of the policy bind a stand-in).
using CostMeasure = std::function<Result<MatmulCost>(ggml_type type, const MatmulCostKey& key)>;

class OffloadPolicy {
 public:
  // table_path: the cost table to use; empty means the default path for this identity.
  // identity: computed when first needed (the CPU backend may register after NPUFLOW).
  OffloadPolicy(OffloadMode mode, std::string table_path, std::function<std::string()> identity,
                CostMeasure measure, const Logger& logger)
      : mode_(mode),
        table_path_(std::move(table_path)),
        identity_of_(std::move(identity)),
        measure_(std::move(measure)),
        logger_(logger) {}

  OffloadMode mode() const { return mode_; }

  // Whether NPUFLOW takes `op`, a MUL_MAT whose structure the routing rules accepted (`c`), when
  // the CPU backend would run it with `threads` threads. Thread-safe.
  bool take(const ggml_tensor* op, const MatmulCandidate& c, int threads);

  // What was decided so far: one headline, then one line per decided shape (taken or declined,
  // both costs, the weights it covered). Printed with the backend's stats.
  std::vector<std::string> summary() const;

  // Tests: the identity a cost table must carry, and switching to another table (forgetting every
  // decision, so the next one reads it).
  std::string identity();
  void use_table(const std::string& path);

 private:
  struct Decision {
    bool take = false;
    bool measured_now = false;  // false: read from the table
    std::string unmeasured;     // why no cost could be had (declined)
    MatmulCost cost;
    std::set<std::string> weights;  // the weights it covered, block numbers folded: blk.*.ffn_up
  };
  MatmulCostTable& table();  // loads it on first use; mutex_ held
  Decision decide(ggml_type type, const MatmulCostKey& key);

  const OffloadMode mode_;
  std::string table_path_;
  std::function<std::string()> identity_of_;
  CostMeasure measure_;
  const Logger& logger_;
  mutable std::mutex mutex_;
  std::optional<std::string> identity_;
  std::optional<MatmulCostTable> table_;
  std::map<MatmulCostKey, Decision> decisions_;
};

// "blk.12.ffn_up.weight" -> "blk.*.ffn_up.weight": one name for a projection in every block.
std::string fold_block_numbers(const std::string& name);

}  // namespace npuflow::ggml

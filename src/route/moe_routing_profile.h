// Where a MoE model's tokens went, per expert tensor (one per layer and projection): the routing
// histogram, its skew, what a static hot-expert cache of a given size would have served, and how
// the resident weight cache actually served the experts. Printed with the backend's stats
// (NPUFLOW_PROF=1); it sizes NPUFLOW_CACHE_MB for a model.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "pack/resident_weights.h"

namespace npuflow {

// The Gini coefficient of `counts`: 0 when every expert gets the same rows, towards 1 when a
// few get them all.
double gini(std::vector<int64_t> counts);
// The share of all rows that the most used ceil(fraction * experts) experts received: the hit
// rate of a static hot cache holding that many experts per tensor.
double top_share(std::vector<int64_t> counts, double fraction);

class RoutingProfile {
 public:
  // One MUL_MAT_ID call: rows_per_expert[e] rows were routed to expert e of `tensor`.
  void record_call(const std::string& tensor, const std::vector<int64_t>& rows_per_expert);
  // How the cache served one expert of `tensor`; packed_bytes when it was packed.
  void record_expert(const std::string& tensor, CacheOutcome outcome, size_t packed_bytes);
  bool empty() const;
  // One line per tensor, in name order, then a total line.
  std::vector<std::string> lines() const;

 private:
  struct Tensor {
    int64_t calls = 0;
    std::vector<int64_t> rows;  // per expert, summed over calls
    int64_t hits = 0, packs = 0, not_kept = 0;
    size_t packed_bytes = 0;
  };
  mutable std::mutex mutex_;
  std::map<std::string, Tensor> tensors_;
};

}  // namespace npuflow

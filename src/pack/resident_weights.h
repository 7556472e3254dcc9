// Weights packed once onto a device and kept resident, keyed by the runtime's tensor identity
// and checked against a fingerprint on every use, so a tensor that changes (or a new tensor at a
// recycled address) is repacked instead of silently reusing stale data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "device/device.h"

namespace npuflow {

// What must be unchanged for a packed weight to be reused.
struct WeightFingerprint {
  std::string name;
  int format = 0;  // the front end's type id
  int64_t k = 0;
  int64_t n = 0;
  uint64_t content = 0;  // content_hash() of the raw bytes

  bool operator==(const WeightFingerprint&) const = default;
};

// A 64-bit hash of `size` bytes. full=false hashes 64 evenly spaced 64-byte windows plus the
// size (constant cost, for weights the runtime marks immutable); full=true hashes every byte.
uint64_t content_hash(const void* data, size_t size, bool full);

struct ResidentWeightStats {
  int64_t hits = 0;
  int64_t packs = 0;     // first packing of an identity (kept or not)
  int64_t repacks = 0;   // identity seen before with another fingerprint
  int64_t not_kept = 0;  // packs used once and dropped: the budget held weights asked for more
  int64_t evictions = 0;
  int64_t entries = 0;
  size_t resident_bytes = 0;
};

// What to drop when the budget is full.
//  - kLeastRecentlyUsed: the weight used longest ago. Every weight of a model is used once per
//    token in a fixed order (layers, experts within a layer), and under that cyclic order LRU
//    drops each weight just before its next use: zero hits at any budget below the working set.
//  - kFrequency: the weight asked for least often (least recently among equals), counting the
//    requests of weights not resident too, halved every 10 requests per identity seen; and a
//    weight packed while the budget is full is kept only if asked for more often than what it
//    would displace. A cyclic order then keeps a fixed subset resident, and skewed MoE routing
//    keeps the hot experts.
enum class EvictionPolicy { kLeastRecentlyUsed, kFrequency };

// How get_or_pack served a request.
enum class CacheOutcome { kHit, kPacked, kRepacked, kPackedNotKept };

class ResidentWeightCache {
 public:
  using Packer = std::function<Result<std::unique_ptr<PackedWeight>>()>;

  // budget_bytes: weights are dropped beyond it, by `policy`; 0 means no limit.
  explicit ResidentWeightCache(size_t budget_bytes = 0,
                               EvictionPolicy policy = EvictionPolicy::kFrequency)
      : budget_(budget_bytes), policy_(policy) {}

  // The resident weight for `identity`, packed by `pack` when absent or stale; `outcome`, when
  // given, says which.
  Result<std::shared_ptr<const PackedWeight>> get_or_pack(const void* identity,
                                                          const WeightFingerprint& fingerprint,
                                                          const Packer& pack,
                                                          CacheOutcome* outcome = nullptr);
  ResidentWeightStats stats() const;
  EvictionPolicy policy() const { return policy_; }
  void clear();

 private:
  struct Entry {
    WeightFingerprint fingerprint;
    std::shared_ptr<const PackedWeight> weight;
    std::list<const void*>::iterator lru;
  };
  void count_request(const void* identity);
  uint32_t frequency(const void* identity) const;
  // The resident weight to drop next, skipping `spared`; nullptr when none is left.
  const void* next_victim(const std::vector<const void*>& spared) const;
  void evict(const void* identity);
  void evict_over_budget(const void* keep);

  size_t budget_;
  EvictionPolicy policy_;
  mutable std::mutex mutex_;
  std::map<const void*, Entry> entries_;
  std::list<const void*> lru_;  // front = most recently used
  // kFrequency with a budget: requests per identity, resident or not.
  std::unordered_map<const void*, uint32_t> frequency_;
  size_t requests_since_aging_ = 0;
  ResidentWeightStats stats_;
};

}  // namespace npuflow

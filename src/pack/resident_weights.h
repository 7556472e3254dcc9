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
  int64_t packs = 0;    // first packing of an identity
  int64_t repacks = 0;  // identity seen before with another fingerprint
  int64_t evictions = 0;
  int64_t entries = 0;
  size_t resident_bytes = 0;
};

class ResidentWeightCache {
 public:
  using Packer = std::function<Result<std::unique_ptr<PackedWeight>>()>;

  // budget_bytes: least recently used weights are dropped beyond it; 0 means no limit.
  explicit ResidentWeightCache(size_t budget_bytes = 0) : budget_(budget_bytes) {}

  // The resident weight for `identity`, packed by `pack` when absent or stale.
  Result<std::shared_ptr<const PackedWeight>> get_or_pack(const void* identity,
                                                          const WeightFingerprint& fingerprint,
                                                          const Packer& pack);
  ResidentWeightStats stats() const;
  void clear();

 private:
  struct Entry {
    WeightFingerprint fingerprint;
    std::shared_ptr<const PackedWeight> weight;
    std::list<const void*>::iterator lru;
  };
  void evict_over_budget(const void* keep);

  size_t budget_;
  mutable std::mutex mutex_;
  std::map<const void*, Entry> entries_;
  std::list<const void*> lru_;  // front = most recently used
  ResidentWeightStats stats_;
};

}  // namespace npuflow

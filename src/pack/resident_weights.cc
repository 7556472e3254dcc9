#include "pack/resident_weights.h"

#include <algorithm>
#include <cstring>

namespace npuflow {
namespace {

inline uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  h *= 0xff51afd7ed558ccdULL;
  return h ^ (h >> 33);
}

uint64_t hash_range(uint64_t h, const uint8_t* p, size_t size) {
  size_t i = 0;
  for (; i + 8 <= size; i += 8) {
    uint64_t word;
    std::memcpy(&word, p + i, 8);
    h = mix(h, word);
  }
  uint64_t tail = 0;
  std::memcpy(&tail, p + i, size - i);
  return mix(h, tail ^ (size - i));
}

}  // namespace

uint64_t content_hash(const void* data, size_t size, bool full) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  uint64_t h = mix(0x84222325cbf29ce4ULL, size);
  constexpr size_t kWindows = 64;
  constexpr size_t kWindow = 64;
  if (full || size <= kWindows * kWindow) return hash_range(h, bytes, size);
  const size_t stride = (size - kWindow) / (kWindows - 1);
  for (size_t w = 0; w < kWindows; ++w) h = hash_range(h, bytes + w * stride, kWindow);
  return h;
}

void ResidentWeightCache::count_request(const void* identity) {
  if (budget_ == 0 || policy_ != EvictionPolicy::kFrequency) return;
  ++frequency_[identity];
  // Aging: halving every count keeps their order but lets a weight that went cold make room.
  constexpr size_t kAgingRequestsPerIdentity = 10;
  if (++requests_since_aging_ < kAgingRequestsPerIdentity * frequency_.size()) return;
  requests_since_aging_ = 0;
  for (auto it = frequency_.begin(); it != frequency_.end();) {
    it->second /= 2;
    if (it->second == 0 && entries_.count(it->first) == 0) {
      it = frequency_.erase(it);
    } else {
      ++it;
    }
  }
}

uint32_t ResidentWeightCache::frequency(const void* identity) const {
  const auto it = frequency_.find(identity);
  return it == frequency_.end() ? 0 : it->second;
}

const void* ResidentWeightCache::next_victim(const std::vector<const void*>& spared) const {
  const void* victim = nullptr;
  uint32_t lowest = 0;
  // From the least recently used end: the first unspared one for LRU; for kFrequency the first
  // of the lowest count, so ties go to the least recently used.
  for (auto it = lru_.rbegin(); it != lru_.rend(); ++it) {
    if (std::find(spared.begin(), spared.end(), *it) != spared.end()) continue;
    if (policy_ == EvictionPolicy::kLeastRecentlyUsed) return *it;
    const uint32_t count = frequency(*it);
    if (victim == nullptr || count < lowest) {
      victim = *it;
      lowest = count;
    }
  }
  return victim;
}

void ResidentWeightCache::evict(const void* identity) {
  auto it = entries_.find(identity);
  stats_.resident_bytes -= it->second.weight->resident_bytes();
  lru_.erase(it->second.lru);
  entries_.erase(it);
  stats_.evictions++;
}

Result<std::shared_ptr<const PackedWeight>> ResidentWeightCache::get_or_pack(
    const void* identity, const WeightFingerprint& fingerprint, const Packer& pack,
    CacheOutcome* outcome) {
  std::lock_guard<std::mutex> lock(mutex_);
  count_request(identity);
  auto it = entries_.find(identity);
  if (it != entries_.end() && it->second.fingerprint == fingerprint) {
    stats_.hits++;
    lru_.splice(lru_.begin(), lru_, it->second.lru);
    if (outcome != nullptr) *outcome = CacheOutcome::kHit;
    return it->second.weight;
  }
  auto packed = pack();
  if (!packed.is_ok()) return packed.status();
  std::shared_ptr<const PackedWeight> weight(std::move(packed).value());
  if (it != entries_.end()) {
    stats_.repacks++;
    stats_.resident_bytes -= it->second.weight->resident_bytes();
    it->second.fingerprint = fingerprint;
    it->second.weight = weight;
    lru_.splice(lru_.begin(), lru_, it->second.lru);
    if (outcome != nullptr) *outcome = CacheOutcome::kRepacked;
  } else {
    stats_.packs++;
    if (outcome != nullptr) *outcome = CacheOutcome::kPacked;
    if (budget_ != 0 && policy_ == EvictionPolicy::kFrequency) {
      // Admission: make room only from weights asked for less often than this one.
      std::vector<const void*> victims;
      size_t freed = 0;
      while (stats_.resident_bytes - freed + weight->resident_bytes() > budget_) {
        const void* victim = next_victim(victims);
        if (victim == nullptr) break;
        if (frequency(victim) >= frequency(identity)) {
          stats_.not_kept++;
          if (outcome != nullptr) *outcome = CacheOutcome::kPackedNotKept;
          return weight;
        }
        victims.push_back(victim);
        freed += entries_.at(victim).weight->resident_bytes();
      }
      for (const void* victim : victims) evict(victim);
    }
    lru_.push_front(identity);
    entries_.emplace(identity, Entry{fingerprint, weight, lru_.begin()});
  }
  stats_.resident_bytes += weight->resident_bytes();
  evict_over_budget(identity);
  stats_.entries = static_cast<int64_t>(entries_.size());
  return weight;
}

void ResidentWeightCache::evict_over_budget(const void* keep) {
  if (budget_ == 0) return;
  while (stats_.resident_bytes > budget_) {
    const void* victim = next_victim({keep});
    if (victim == nullptr) return;
    evict(victim);
  }
}

ResidentWeightStats ResidentWeightCache::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void ResidentWeightCache::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  entries_.clear();
  lru_.clear();
  frequency_.clear();
  requests_since_aging_ = 0;
  stats_.entries = 0;
  stats_.resident_bytes = 0;
}

}  // namespace npuflow

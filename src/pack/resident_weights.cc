#include "pack/resident_weights.h"

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

Result<std::shared_ptr<const PackedWeight>> ResidentWeightCache::get_or_pack(
    const void* identity, const WeightFingerprint& fingerprint, const Packer& pack) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = entries_.find(identity);
  if (it != entries_.end() && it->second.fingerprint == fingerprint) {
    stats_.hits++;
    lru_.splice(lru_.begin(), lru_, it->second.lru);
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
  } else {
    stats_.packs++;
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
  while (stats_.resident_bytes > budget_ && !lru_.empty() && lru_.back() != keep) {
    auto it = entries_.find(lru_.back());
    stats_.resident_bytes -= it->second.weight->resident_bytes();
    lru_.pop_back();
    entries_.erase(it);
    stats_.evictions++;
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
  stats_.entries = 0;
  stats_.resident_bytes = 0;
}

}  // namespace npuflow

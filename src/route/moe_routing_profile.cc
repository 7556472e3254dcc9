#include "route/moe_routing_profile.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>

#include "core/strings.h"

namespace npuflow {

double gini(std::vector<int64_t> counts) {
  const auto n = static_cast<double>(counts.size());
  const double total = std::accumulate(counts.begin(), counts.end(), 0.0);
  if (counts.size() < 2 || total <= 0) return 0.0;
  std::sort(counts.begin(), counts.end());
  // G = sum_i (2i - n - 1) x_i / (n sum x), i from 1, x ascending.
  double weighted = 0.0;
  for (size_t i = 0; i < counts.size(); ++i) {
    weighted += (2.0 * static_cast<double>(i + 1) - n - 1.0) * static_cast<double>(counts[i]);
  }
  return weighted / (n * total);
}

double top_share(std::vector<int64_t> counts, double fraction) {
  const double total = std::accumulate(counts.begin(), counts.end(), 0.0);
  if (counts.empty() || total <= 0) return 0.0;
  const auto keep = std::min(
      counts.size(), static_cast<size_t>(std::ceil(fraction * static_cast<double>(counts.size()))));
  std::partial_sort(counts.begin(), counts.begin() + static_cast<std::ptrdiff_t>(keep),
                    counts.end(), std::greater<>());
  return std::accumulate(counts.begin(), counts.begin() + static_cast<std::ptrdiff_t>(keep), 0.0) /
         total;
}

void RoutingProfile::record_call(const std::string& tensor,
                                 const std::vector<int64_t>& rows_per_expert) {
  std::lock_guard<std::mutex> lock(mutex_);
  Tensor& t = tensors_[tensor];
  t.calls++;
  if (t.rows.size() < rows_per_expert.size()) t.rows.resize(rows_per_expert.size(), 0);
  for (size_t e = 0; e < rows_per_expert.size(); ++e) t.rows[e] += rows_per_expert[e];
}

void RoutingProfile::record_expert(const std::string& tensor, CacheOutcome outcome,
                                   size_t packed_bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  Tensor& t = tensors_[tensor];
  if (outcome == CacheOutcome::kHit) {
    t.hits++;
    return;
  }
  t.packs++;
  if (outcome == CacheOutcome::kPackedNotKept) t.not_kept++;
  t.packed_bytes += packed_bytes;
}

bool RoutingProfile::empty() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return tensors_.empty();
}

namespace {

std::string percent(double share) {
  return str_cat(static_cast<int>(std::lround(share * 100.0)), "%");
}

std::string cache_part(int64_t hits, int64_t packs, int64_t not_kept, size_t packed_bytes) {
  const int64_t served = hits + packs;
  const double hit_rate = served > 0 ? static_cast<double>(hits) / static_cast<double>(served) : 0;
  return str_cat(" cache_hits=", hits, "/", served, " (", percent(hit_rate), ") packed=", packs,
                 " not_kept=", not_kept,
                 " packed_mib=", std::lround(static_cast<double>(packed_bytes) / 10485.76) / 100.0);
}

std::string routing_part(const std::vector<int64_t>& rows) {
  std::string hist;
  for (size_t e = 0; e < rows.size(); ++e) hist += str_cat(e == 0 ? "" : ",", rows[e]);
  return str_cat(" experts=", rows.size(), " gini=", std::lround(gini(rows) * 100) / 100.0,
                 " hot10=", percent(top_share(rows, 0.1)), " hot20=", percent(top_share(rows, 0.2)),
                 " hot50=", percent(top_share(rows, 0.5)), " hist={", hist, "}");
}

}  // namespace

std::vector<std::string> RoutingProfile::lines() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::string> out;
  int64_t calls = 0, rows = 0, hits = 0, packs = 0, not_kept = 0;
  size_t bytes = 0;
  for (const auto& [name, t] : tensors_) {
    const int64_t routed = std::accumulate(t.rows.begin(), t.rows.end(), int64_t{0});
    // The cache part leads: the histogram ends the line, however many experts it has.
    out.push_back(str_cat("moe ", name, ": calls=", t.calls, " rows=", routed,
                          cache_part(t.hits, t.packs, t.not_kept, t.packed_bytes),
                          routing_part(t.rows)));
    calls += t.calls;
    rows += routed;
    hits += t.hits;
    packs += t.packs;
    not_kept += t.not_kept;
    bytes += t.packed_bytes;
  }
  if (!tensors_.empty()) {
    out.push_back(str_cat("moe total: calls=", calls, " rows=", rows,
                          cache_part(hits, packs, not_kept, bytes)));
  }
  return out;
}

}  // namespace npuflow

#include "diffusion/block_residency.h"

#include <fstream>
#include <sstream>

#include "core/strings.h"

namespace npuflow::diffusion {

ResidencyPlan plan_block_residency(size_t budget_bytes, size_t shared_bytes, size_t block_bytes,
                                   int64_t blocks) {
  ResidencyPlan plan;
  const auto bytes_with = [&](int64_t packed_blocks) {
    return shared_bytes + static_cast<size_t>(packed_blocks) * block_bytes;
  };
  if (budget_bytes == 0 || bytes_with(blocks) <= budget_bytes) {
    plan.pinned_blocks = blocks;
  } else {
    // Leave room for the one streamed block, so that the peak stays within the budget too.
    while (plan.pinned_blocks + 1 < blocks && bytes_with(plan.pinned_blocks + 2) <= budget_bytes)
      ++plan.pinned_blocks;
  }
  plan.shared_bytes = shared_bytes;
  plan.block_bytes = block_bytes;
  plan.resident_bytes = bytes_with(plan.pinned_blocks);
  plan.peak_bytes = bytes_with(plan.pinned_blocks + (plan.pinned_blocks < blocks ? 1 : 0));
  return plan;
}

std::optional<uint64_t> available_memory_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  while (std::getline(meminfo, line)) {
    if (line.rfind("MemAvailable:", 0) != 0) continue;
    std::istringstream fields(line.substr(13));
    uint64_t kib = 0;
    if (fields >> kib) return kib * 1024;
  }
  return std::nullopt;
}

std::string memory_floor_violation(uint64_t floor_bytes, std::optional<uint64_t> available) {
  if (floor_bytes == 0 || !available || *available >= floor_bytes) return {};
  return str_cat("stopping: available memory is ", *available >> 20, " MiB, below the floor of ",
                 floor_bytes >> 20, " MiB (NPUFLOW_MEM_FLOOR_MB)");
}

}  // namespace npuflow::diffusion

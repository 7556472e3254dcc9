// SimDevice's state, shared by its GEMMs (sim_device.cc) and its composed calls, attention and
// convolution (sim_composed.cc). Private to src/sim/.
#pragma once

#include <cstdint>
#include <cstring>
#include <mutex>
#include <vector>

#include "core/strings.h"
#include "sim/cost_model.h"
#include "sim/sim_device.h"

namespace npuflow::sim {

struct SimDevice::State {
  SimOptions options;
  mutable std::mutex mutex;
  std::vector<uint64_t> iova;  // per fd, resident weights
  SimProfile profile;
  int64_t submissions = 0;  // accepted calls, for fail_every

  void release(const std::vector<uint64_t>& fd_bytes) {
    std::lock_guard<std::mutex> lock(mutex);
    for (size_t fd = 0; fd < fd_bytes.size(); ++fd) {
      profile.resident_bytes -= static_cast<int64_t>(fd_bytes[fd]);
      iova[fd] -= fd_bytes[fd];
    }
    profile.weights--;
  }
  void refused() {
    std::lock_guard<std::mutex> lock(mutex);
    profile.refused++;
  }
  // Admits one accepted call, under the caller's hold of `mutex`: counts it, fails it when
  // fail_every picks it (its output, `out_bytes` at `out`, left as garbage), says whether
  // corrupt_every picked it, and charges its modelled cost and `cpu_us` (the same work on the
  // board's CPU) to the profile.
  Result<bool> admit_locked(const CostEstimate& cost, double cpu_us, void* out, size_t out_bytes) {
    profile.calls++;
    const int64_t index = ++submissions;
    if (options.fail_every > 0 && index % options.fail_every == 0) {
      profile.failed++;
      std::memset(out, 0x5a, out_bytes);  // a failed job leaves whatever the NPU wrote
      return Status(StatusCode::kDeviceFailure,
                    str_cat("ROCKET_E_DEVICE: injected submit failure on call ", index,
                            " (sim_fail_every=", options.fail_every, ")"));
    }
    const bool corrupt = options.corrupt_every > 0 && index % options.corrupt_every == 0;
    if (corrupt) profile.corrupted++;
    profile.submits += cost.jobs;
    profile.tiles += cost.tiles;
    profile.bytes_packed += cost.bytes_packed;
    profile.bytes_read_back += cost.bytes_read_back;
    profile.device_ms += cost.device_us / 1e3;
    profile.host_ms += cost.host_us / 1e3;
    profile.cpu_ms += cpu_us / 1e3;
    return corrupt;
  }
};

// A wrong answer far from the right one, whatever its sign: the opposite sign, 2^28 away (int32
// accumulators) or 1024 + 5|v| away (floats), so no epilogue or gate can absorb it.
inline int32_t corrupted(int32_t value) {
  return value >= 0 ? value - (int32_t{1} << 28) : value + (int32_t{1} << 28);
}
inline float corrupted(float value) {
  return value >= 0 ? -4.0f * value - 1024.0f : -4.0f * value + 1024.0f;
}

}  // namespace npuflow::sim

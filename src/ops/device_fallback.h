// The one fallback path of a device primitive (DESIGN.md principle 5): run it on the device; when
// the device refuses (kUnsupported) or fails (kDeviceFailure, kResourceExhausted, or any other
// error), rerun the same work on the host reference, count it, and say so once. Every caller that
// reaches a device primitive goes through here: the QDQ and integer MatMul kernels, the encoder's
// projections and attention, the ggml backend's MUL_MAT.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "core/log.h"
#include "core/status.h"

namespace npuflow {

class DeviceFallback {
 public:
  // Runs on_device(); when it returns an error, runs on_host() instead (which must rewrite the
  // whole output: a failed device call may have written part of it), adds one to `fallbacks`
  // and, the first time, logs describe(error) at warning. Returns on_host()'s status then.
  template <typename OnDevice, typename OnHost, typename Describe>
  Status run(OnDevice&& on_device, OnHost&& on_host, std::atomic<int64_t>& fallbacks,
             const Logger& logger, Describe&& describe) const {
    const Status status = on_device();
    if (status.is_ok()) return status;
    fallbacks.fetch_add(1, std::memory_order_relaxed);
    if (!logged_.exchange(true)) logger.warning(describe(status));
    return on_host();
  }

  // Marks the fallback as said already (a weight the device would not take, logged at pack).
  void mark_logged() const { logged_ = true; }

 private:
  mutable std::atomic<bool> logged_{false};
};

}  // namespace npuflow

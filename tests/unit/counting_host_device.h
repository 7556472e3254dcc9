// A host device that counts the float GEMMs it runs: a test hands it to a kernel as the session's
// host reference and sees whether the kernel's fallback ran on it, not on a host of its own.
#pragma once

#include <atomic>
#include <memory>

#include "host/host_device.h"

namespace npuflow::device_test {

class CountingHostDevice final : public Device {
 public:
  std::string_view name() const override { return "host"; }
  std::string description() const override { return "counting " + host_.description(); }
  Result<std::unique_ptr<PackedWeight>> pack_int8_weight(const int8_t* w, int64_t k,
                                                         int64_t n) override {
    return host_.pack_int8_weight(w, k, n);
  }
  Status gemm_int8(const void* a, ElementType a_type, int64_t m, const PackedWeight& w, int32_t* c,
                   const ExecContext& context) override {
    return host_.gemm_int8(a, a_type, m, w, c, context);
  }
  Result<std::unique_ptr<PackedWeight>> pack_float_weight(const float* w, int64_t k,
                                                          int64_t n) override {
    return host_.pack_float_weight(w, k, n);
  }
  Status gemm_float(const float* a, int64_t m, const PackedWeight& w, float* c,
                    const ExecContext& context) override {
    float_gemms.fetch_add(1);
    return host_.gemm_float(a, m, w, c, context);
  }

  std::atomic<int64_t> float_gemms{0};

 private:
  HostDevice host_{DeviceOptions{}};
};

}  // namespace npuflow::device_test

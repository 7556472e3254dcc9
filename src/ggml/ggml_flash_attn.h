// Translates ggml FLASH_ATTN_EXT nodes into one Device::attention_fp16 call per sequence: the
// routing question (supports_op, through route/flash_attention_route.h) and the computation.
// Queries are rounded to fp16 as the CPU backend rounds them for its fp16 keys; keys, values and
// the mask are read through their strides (views of the KV cache, permuted test tensors); the
// fp16 result is widened into ggml's permuted [dv, heads, tokens, sequences] output.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "core/log.h"
#include "device/device.h"
#include "ggml.h"
#include "ops/device_fallback.h"
#include "route/flash_attention_route.h"

namespace npuflow::ggml {

FlashAttentionCandidate describe_flash_attn(const ggml_tensor* node);

// One backend's FLASH_ATTN_EXT engine.
class FlashAttnEngine {
 public:
  FlashAttnEngine(Device& device, const Logger& logger) : device_(device), logger_(logger) {}

  // Computes `node` (a FLASH_ATTN_EXT whose structure route_flash_attention accepts, any size)
  // into node->data. A call the device refuses or fails reruns on the host reference
  // (host/fp16_attention.h), counted and said once.
  Status compute(const ggml_tensor* node, const ExecContext& context);

  // " flash_attn=N flash_attn_fallback=F": appended to the backend's stats line.
  std::string summary() const;

 private:
  Device& device_;
  const Logger& logger_;
  int64_t calls_ = 0;
  std::atomic<int64_t> fallbacks_{0};
  DeviceFallback fallback_;
};

}  // namespace npuflow::ggml

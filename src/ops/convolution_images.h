// The per-image loop the claimed convolutions share (ops/conv2d.h, ops/conv_transpose.h): a batch
// runs as one call per image; on the host device the fp32 path by choice, elsewhere the device with
// the fp32 path as its fallback (a trace line per image it takes, one warning the first time).
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/log.h"
#include "core/status.h"
#include "core/strings.h"
#include "ops/device_fallback.h"

namespace npuflow {

struct ConvolutionCounters {
  std::atomic<int64_t> device_calls{0};  // images run by the device
  std::atomic<int64_t> host_calls{0};    // images run on the fp32 host path by choice
  std::atomic<int64_t> fallback_calls{0};
};

// [batch, oc, oh, ow] for an input [batch, ic, ih, iw], where extents(ih, iw) gives {oh, ow}; an
// error for any other shape or an empty output.
template <typename Extents>
Result<std::vector<int64_t>> convolution_output_shape(const std::string& name,
                                                      const std::vector<int64_t>& input_shape,
                                                      int64_t ic, int64_t oc, Extents&& extents) {
  if (input_shape.size() != 4 || input_shape[1] != ic || input_shape[0] < 0 ||
      input_shape[2] <= 0 || input_shape[3] <= 0) {
    return invalid_argument(
        str_cat(name, ": input shape ", shape_string(input_shape), " is not [N, ", ic, ", H, W]"));
  }
  const auto [oh, ow] = extents(input_shape[2], input_shape[3]);
  if (oh <= 0 || ow <= 0) {
    return invalid_argument(str_cat(name, ": input ", shape_string(input_shape),
                                    " gives an empty output (", oh, "x", ow, ")"));
  }
  return std::vector<int64_t>{input_shape[0], oc, oh, ow};
}

// Held while a kernel builds its fp32 host fallback (a HostDevice and its packed weight): several
// nodes can fall back at once on ONNX Runtime's threads, and oneDNN's primitive setup is not
// something two threads should race through (ThreadSanitizer sees its cache published unlocked).
inline std::mutex& host_fallback_mutex() {
  static std::mutex mutex;
  return mutex;
}

// on_device(b) and on_host(b) run image b; `what` names the operation in the fallback's warning
// ("convolution", "transposed convolution").
template <typename OnDevice, typename OnHost>
Status run_images(int64_t batch, bool host_only, int64_t ih, int64_t iw, const std::string& name,
                  std::string_view device_name, const char* what, const DeviceFallback& fallback,
                  ConvolutionCounters& counters, const Logger& logger, OnDevice&& on_device,
                  OnHost&& on_host) {
  for (int64_t b = 0; b < batch; ++b) {
    if (host_only) {
      NPUFLOW_RETURN_IF_ERROR(on_host(b));
      counters.host_calls.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    Status device_status;
    NPUFLOW_RETURN_IF_ERROR(fallback.run(
        [&] { return device_status = on_device(b); },
        [&] {
          logger.trace(str_cat(name, ": image ", b, " (", ih, "x", iw,
                               ") on the host: ", device_status.message()));
          return on_host(b);
        },
        counters.fallback_calls, logger,
        [&](const Status& error) {
          return str_cat(name, ": ", device_name, " did not run a ", ih, "x", iw, " ", what, " (",
                         error.message(), "); it and any like it run on the host in fp32");
        }));
  }
  return Status::ok();
}

}  // namespace npuflow

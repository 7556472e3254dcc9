#include "ggml/ggml_fault.h"

#include <atomic>
#include <stdexcept>
#include <string>
#include <string_view>

namespace npuflow::ggml {
namespace {

std::atomic<FaultPoint> g_armed{FaultPoint::kNone};

}  // namespace

int inject_fault(const char* point) {
  const std::string_view name = point == nullptr ? "" : point;
  FaultPoint armed = FaultPoint::kNone;
  if (name == "supports_op") {
    armed = FaultPoint::kSupportsOp;
  } else if (name == "device_compute") {
    armed = FaultPoint::kDeviceCompute;
  } else if (name == "graph_compute") {
    armed = FaultPoint::kGraphCompute;
  } else if (!name.empty()) {
    return -1;
  }
  g_armed = armed;
  return 0;
}

void throw_if_injected(FaultPoint point) {
  if (point != FaultPoint::kNone && g_armed.load() == point) {
    throw std::runtime_error("fault injected by ggml_backend_npuflow_inject_fault");
  }
}

}  // namespace npuflow::ggml

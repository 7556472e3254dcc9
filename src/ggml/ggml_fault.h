// A test hook: makes one of the module's ggml callbacks throw, so tests can check that the
// callback guard (ggml_guard.h) turns the exception into a clean answer. Reached from a host
// program only through ggml_backend_reg_get_proc_address(reg, "ggml_backend_npuflow_inject_fault").
#pragma once

namespace npuflow::ggml {

enum class FaultPoint {
  kNone,
  kSupportsOp,     // "supports_op": the device's supports_op
  kDeviceCompute,  // "device_compute": a MUL_MAT's device step, inside its parallel weight
                   // preparation (so the exception starts on a worker thread)
  kGraphCompute,   // "graph_compute": the backend's graph_compute, before any node
};

// Arms `point` ("" or null disarms) until the next call; 0 on success, -1 for an unknown name.
int inject_fault(const char* point);

// Throws std::runtime_error when `point` is armed.
void throw_if_injected(FaultPoint point);

}  // namespace npuflow::ggml

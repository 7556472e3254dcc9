// The ONNX Runtime API tables npuflow uses, negotiated once when the library is loaded: the
// highest version the running ONNX Runtime offers, from the headers' ORT_API_VERSION down to
// kOrtApiFloor. Every struct npuflow hands to ONNX Runtime is stamped with that version.
#pragma once

#include <onnxruntime_c_api.h>

#include <exception>
#include <string>

#include "core/element_type.h"
#include "core/log.h"
#include "core/status.h"

namespace npuflow::ort {

// 1.23 is the first ONNX Runtime with the graph API and fused-node compilation (OrtEp::Compile).
constexpr uint32_t kOrtApiFloor = 23;

struct Api {
  const OrtApi* ort = nullptr;
  const OrtEpApi* ep = nullptr;
  uint32_t version = 0;
};

// The highest API version in [kOrtApiFloor, ORT_API_VERSION] that `base` offers, or 0.
uint32_t highest_supported_version(const OrtApiBase* base);

// Negotiates on first call; later calls return the same tables.
Status negotiate_api(const OrtApiBase* base);
const Api& api();

// Converts between npuflow Status and OrtStatus (which the caller releases / ORT owns).
OrtStatus* to_ort_status(const Status& status);
Status from_ort_status(OrtStatus* status);  // releases `status`

// Runs `body` (returning Status) so that no C++ exception crosses into ONNX Runtime.
template <typename Body>
OrtStatus* guarded(Body&& body) noexcept {
  try {
    return to_ort_status(body());
  } catch (const std::exception& e) {
    return to_ort_status(internal_error(e.what()));
  } catch (...) {
    return to_ort_status(internal_error("unknown exception"));
  }
}

// ONNX Runtime's element types as npuflow's (kUnknown for the others), and back.
ElementType element_type_of(ONNXTensorElementDataType type);
ONNXTensorElementDataType onnx_type_of(ElementType type);

// A Logger whose sink is an ONNX Runtime logger.
Logger make_ort_logger(LogLevel threshold, const OrtLogger* ort_logger);

}  // namespace npuflow::ort

// Evaluates an OrtApi call; on failure returns it as an npuflow Status.
#define NPUFLOW_ORT_CHECK(call)                                    \
  do {                                                             \
    if (OrtStatus* npuflow_ort_status_ = (call)) {                 \
      return ::npuflow::ort::from_ort_status(npuflow_ort_status_); \
    }                                                              \
  } while (0)

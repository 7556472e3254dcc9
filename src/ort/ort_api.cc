#include "ort/ort_api.h"

#include <mutex>

#include "core/strings.h"

namespace npuflow::ort {
namespace {
Api g_api;
std::once_flag g_once;
Status g_status;
}  // namespace

uint32_t highest_supported_version(const OrtApiBase* base) {
  // GetApi(v) returns null for versions newer than the runtime: step down to one it knows.
  for (uint32_t version = ORT_API_VERSION; version >= kOrtApiFloor; --version) {
    if (base->GetApi(version) != nullptr) return version;
  }
  return 0;
}

Status negotiate_api(const OrtApiBase* base) {
  std::call_once(g_once, [base] {
    if (base == nullptr) {
      g_status = invalid_argument("ONNX Runtime passed no OrtApiBase");
      return;
    }
    if (const uint32_t version = highest_supported_version(base)) {
      g_api.ort = base->GetApi(version);
      g_api.ep = g_api.ort->GetEpApi();
      g_api.version = version;
      return;
    }
    g_status = unsupported(str_cat(
        "this ONNX Runtime (", base->GetVersionString(), ") offers no API version in [",
        kOrtApiFloor, ", ", ORT_API_VERSION, "]; npuflow needs ONNX Runtime >= 1.", kOrtApiFloor));
  });
  return g_status;
}

const Api& api() {
  return g_api;
}

OrtStatus* to_ort_status(const Status& status) {
  if (status.is_ok()) return nullptr;
  OrtErrorCode code = ORT_FAIL;
  switch (status.code()) {
    case StatusCode::kInvalidArgument:
      code = ORT_INVALID_ARGUMENT;
      break;
    case StatusCode::kUnsupported:
      code = ORT_NOT_IMPLEMENTED;
      break;
    case StatusCode::kResourceExhausted:
    case StatusCode::kDeviceFailure:
      code = ORT_RUNTIME_EXCEPTION;
      break;
    default:
      code = ORT_FAIL;
      break;
  }
  return g_api.ort->CreateStatus(code, str_cat("npuflow: ", status.message()).c_str());
}

Status from_ort_status(OrtStatus* status) {
  if (status == nullptr) return Status::ok();
  std::string message = g_api.ort->GetErrorMessage(status);
  const OrtErrorCode code = g_api.ort->GetErrorCode(status);
  g_api.ort->ReleaseStatus(status);
  return Status(code == ORT_INVALID_ARGUMENT ? StatusCode::kInvalidArgument : StatusCode::kInternal,
                str_cat("ONNX Runtime: ", message));
}

Logger make_ort_logger(LogLevel threshold, const OrtLogger* ort_logger) {
  return Logger(threshold, [ort_logger](LogLevel level, const std::string& message) {
    OrtLoggingLevel severity = ORT_LOGGING_LEVEL_VERBOSE;
    switch (level) {
      case LogLevel::kError:
        severity = ORT_LOGGING_LEVEL_ERROR;
        break;
      case LogLevel::kWarning:
        severity = ORT_LOGGING_LEVEL_WARNING;
        break;
      case LogLevel::kInfo:
        severity = ORT_LOGGING_LEVEL_INFO;
        break;
      default:
        severity = ORT_LOGGING_LEVEL_VERBOSE;
        break;
    }
    // NPUFLOW_LOG is the user's explicit request: if ONNX Runtime's own threshold would drop the
    // line, raise it to that threshold rather than lose it. The text keeps npuflow's level.
    OrtLoggingLevel ort_threshold = ORT_LOGGING_LEVEL_WARNING;
    if (OrtStatus* status = g_api.ort->Logger_GetLoggingSeverityLevel(ort_logger, &ort_threshold)) {
      g_api.ort->ReleaseStatus(status);
    }
    if (severity < ort_threshold) severity = ort_threshold;
    const std::string text = str_cat("npuflow [", log_level_name(level), "] ", message);
    if (OrtStatus* status = g_api.ort->Logger_LogMessage(ort_logger, severity, text.c_str(),
                                                         ORT_FILE, __LINE__, "npuflow")) {
      g_api.ort->ReleaseStatus(status);
    }
  });
}

ElementType element_type_of(ONNXTensorElementDataType type) {
  switch (type) {
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT:
      return ElementType::kFloat32;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16:
      return ElementType::kFloat16;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64:
      return ElementType::kInt64;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32:
      return ElementType::kInt32;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8:
      return ElementType::kInt8;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8:
      return ElementType::kUInt8;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL:
      return ElementType::kBool;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT16:
      return ElementType::kInt16;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT16:
      return ElementType::kUInt16;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT4:
      return ElementType::kPackedInt4;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT4:
      return ElementType::kPackedUInt4;
    default:
      return ElementType::kUnknown;
  }
}

ONNXTensorElementDataType onnx_type_of(ElementType type) {
  switch (type) {
    case ElementType::kFloat32:
      return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
    case ElementType::kFloat16:
      return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16;
    case ElementType::kInt64:
      return ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64;
    case ElementType::kInt32:
      return ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32;
    case ElementType::kInt8:
      return ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8;
    case ElementType::kUInt8:
      return ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8;
    case ElementType::kBool:
      return ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL;
    case ElementType::kInt16:
      return ONNX_TENSOR_ELEMENT_DATA_TYPE_INT16;
    case ElementType::kUInt16:
      return ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT16;
    case ElementType::kPackedInt4:
      return ONNX_TENSOR_ELEMENT_DATA_TYPE_INT4;
    case ElementType::kPackedUInt4:
      return ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT4;
    default:
      return ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
  }
}

}  // namespace npuflow::ort

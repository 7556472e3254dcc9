// The OrtEpFactory: pairs npuflow with ONNX Runtime's CPU hardware device on any machine (so
// get_ep_devices() lists it everywhere) and creates one NpuflowEp per session.
#pragma once

#include <string>

#include "npuflow/version.h"
#include "ort/ort_api.h"

namespace npuflow::ort {

constexpr const char* kEpVendor = "npuflow";
constexpr const char* kEpVersion = NPUFLOW_VERSION;  // ep_metadata "version" of every OrtEpDevice

class NpuflowEpFactory : public OrtEpFactory {
 public:
  NpuflowEpFactory(std::string registered_name, const OrtLogger* default_logger);

 private:
  static const char* ORT_API_CALL GetNameImpl(const OrtEpFactory* self) noexcept;
  static const char* ORT_API_CALL GetVendorImpl(const OrtEpFactory* self) noexcept;
  static uint32_t ORT_API_CALL GetVendorIdImpl(const OrtEpFactory* self) noexcept;
  static const char* ORT_API_CALL GetVersionImpl(const OrtEpFactory* self) noexcept;
  static OrtStatus* ORT_API_CALL GetSupportedDevicesImpl(
      OrtEpFactory* self, const OrtHardwareDevice* const* devices, size_t num_devices,
      OrtEpDevice** ep_devices, size_t max_ep_devices, size_t* num_ep_devices) noexcept;
  static OrtStatus* ORT_API_CALL CreateEpImpl(OrtEpFactory* self,
                                              const OrtHardwareDevice* const* devices,
                                              const OrtKeyValuePairs* const* ep_metadata,
                                              size_t num_devices,
                                              const OrtSessionOptions* session_options,
                                              const OrtLogger* logger, OrtEp** ep) noexcept;
  static void ORT_API_CALL ReleaseEpImpl(OrtEpFactory* self, OrtEp* ep) noexcept;
  static OrtStatus* ORT_API_CALL ValidateCompatibilityImpl(
      OrtEpFactory* self, const OrtHardwareDevice* const* devices, size_t num_devices,
      const char* compatibility_info, OrtCompiledModelCompatibility* compatibility) noexcept;
  static OrtStatus* ORT_API_CALL CreateAllocatorImpl(OrtEpFactory* self,
                                                     const OrtMemoryInfo* memory_info,
                                                     const OrtKeyValuePairs* options,
                                                     OrtAllocator** allocator) noexcept;
  static void ORT_API_CALL ReleaseAllocatorImpl(OrtEpFactory* self,
                                                OrtAllocator* allocator) noexcept;
  static OrtStatus* ORT_API_CALL
  CreateDataTransferImpl(OrtEpFactory* self, OrtDataTransferImpl** data_transfer) noexcept;
  static bool ORT_API_CALL IsStreamAwareImpl(const OrtEpFactory* self) noexcept;
  static OrtStatus* ORT_API_CALL CreateSyncStreamImpl(OrtEpFactory* self,
                                                      const OrtMemoryDevice* memory_device,
                                                      const OrtKeyValuePairs* stream_options,
                                                      OrtSyncStreamImpl** stream) noexcept;

  std::string registered_name_;
  [[maybe_unused]] const OrtLogger* default_logger_;
};

}  // namespace npuflow::ort

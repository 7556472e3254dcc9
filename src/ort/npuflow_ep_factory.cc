#include "ort/npuflow_ep_factory.h"

#include "core/strings.h"
#include "ort/npuflow_ep.h"

namespace npuflow::ort {

NpuflowEpFactory::NpuflowEpFactory(std::string registered_name, const OrtLogger* default_logger)
    : OrtEpFactory{},
      registered_name_(std::move(registered_name)),
      default_logger_(default_logger) {
  ort_version_supported = api().version;
  GetName = GetNameImpl;
  GetVendor = GetVendorImpl;
  GetSupportedDevices = GetSupportedDevicesImpl;
  CreateEp = CreateEpImpl;
  ReleaseEp = ReleaseEpImpl;
  GetVendorId = GetVendorIdImpl;
  GetVersion = GetVersionImpl;
  ValidateCompiledModelCompatibilityInfo = ValidateCompatibilityImpl;
  CreateAllocator = CreateAllocatorImpl;
  ReleaseAllocator = ReleaseAllocatorImpl;
  // ONNX Runtime calls CreateDataTransfer without a null check: the slot must be filled.
  CreateDataTransfer = CreateDataTransferImpl;
  IsStreamAware = IsStreamAwareImpl;
  CreateSyncStreamForDevice = CreateSyncStreamImpl;
}

const char* NpuflowEpFactory::GetNameImpl(const OrtEpFactory*) noexcept {
  return kEpName;
}
const char* NpuflowEpFactory::GetVendorImpl(const OrtEpFactory*) noexcept {
  return kEpVendor;
}
uint32_t NpuflowEpFactory::GetVendorIdImpl(const OrtEpFactory*) noexcept {
  return 0;
}
const char* NpuflowEpFactory::GetVersionImpl(const OrtEpFactory*) noexcept {
  return kEpVersion;
}

OrtStatus* NpuflowEpFactory::GetSupportedDevicesImpl(OrtEpFactory* self,
                                                     const OrtHardwareDevice* const* devices,
                                                     size_t num_devices, OrtEpDevice** ep_devices,
                                                     size_t max_ep_devices,
                                                     size_t* num_ep_devices) noexcept {
  const OrtApi& ort = *api().ort;
  *num_ep_devices = 0;
  // The host and sim devices run on the CPU, so npuflow pairs with the CPU hardware device.
  for (size_t i = 0; i < num_devices && *num_ep_devices < max_ep_devices; ++i) {
    if (ort.HardwareDevice_Type(devices[i]) != OrtHardwareDeviceType_CPU) continue;
    OrtKeyValuePairs* metadata = nullptr;
    ort.CreateKeyValuePairs(&metadata);
    ort.AddKeyValuePair(metadata, "npuflow.devices", "host");
    OrtEpDevice* ep_device = nullptr;
    OrtStatus* status = api().ep->CreateEpDevice(self, devices[i], metadata, nullptr, &ep_device);
    ort.ReleaseKeyValuePairs(metadata);
    if (status != nullptr) return status;
    ep_devices[(*num_ep_devices)++] = ep_device;
  }
  return nullptr;
}

OrtStatus* NpuflowEpFactory::CreateEpImpl(OrtEpFactory*, const OrtHardwareDevice* const*,
                                          const OrtKeyValuePairs* const*, size_t,
                                          const OrtSessionOptions* session_options,
                                          const OrtLogger* logger, OrtEp** ep) noexcept {
  *ep = nullptr;
  return guarded([&] {
    auto created = NpuflowEp::create(session_options, logger);
    if (!created.is_ok()) return created.status();
    *ep = std::move(created).value().release();
    return Status::ok();
  });
}

void NpuflowEpFactory::ReleaseEpImpl(OrtEpFactory*, OrtEp* ep) noexcept {
  delete static_cast<NpuflowEp*>(ep);
}

OrtStatus* NpuflowEpFactory::ValidateCompatibilityImpl(
    OrtEpFactory*, const OrtHardwareDevice* const*, size_t, const char*,
    OrtCompiledModelCompatibility* result) noexcept {
  *result = OrtCompiledModelCompatibility_EP_NOT_APPLICABLE;  // npuflow writes no EPContext
  return nullptr;
}

OrtStatus* NpuflowEpFactory::CreateAllocatorImpl(OrtEpFactory*, const OrtMemoryInfo*,
                                                 const OrtKeyValuePairs*,
                                                 OrtAllocator** allocator) noexcept {
  *allocator = nullptr;  // host memory: ONNX Runtime's CPU allocator serves
  return nullptr;
}

void NpuflowEpFactory::ReleaseAllocatorImpl(OrtEpFactory*, OrtAllocator*) noexcept {}

OrtStatus* NpuflowEpFactory::CreateDataTransferImpl(OrtEpFactory*,
                                                    OrtDataTransferImpl** out) noexcept {
  *out = nullptr;  // activations stay in host memory: nothing to copy
  return nullptr;
}

bool NpuflowEpFactory::IsStreamAwareImpl(const OrtEpFactory*) noexcept {
  return false;
}

OrtStatus* NpuflowEpFactory::CreateSyncStreamImpl(OrtEpFactory*, const OrtMemoryDevice*,
                                                  const OrtKeyValuePairs*,
                                                  OrtSyncStreamImpl** stream) noexcept {
  *stream = nullptr;
  return nullptr;
}

}  // namespace npuflow::ort

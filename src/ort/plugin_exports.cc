// The two symbols ONNX Runtime resolves when it loads npuflow as a plugin EP library.
#include "ort/npuflow_ep_factory.h"

extern "C" {

__attribute__((visibility("default"))) OrtStatus* CreateEpFactories(
    const char* registered_name, const OrtApiBase* ort_api_base, const OrtLogger* default_logger,
    OrtEpFactory** factories, size_t max_factories, size_t* num_factories) {
  using namespace npuflow::ort;
  *num_factories = 0;
  npuflow::Status status = negotiate_api(ort_api_base);
  if (!status.is_ok()) {
    // Without an API table there is no OrtStatus to return; the best ONNX Runtime can get is
    // any table the base offers, to report the error through.
    const OrtApi* fallback = ort_api_base ? ort_api_base->GetApi(1) : nullptr;
    return fallback ? fallback->CreateStatus(ORT_NOT_IMPLEMENTED, status.message().c_str())
                    : nullptr;
  }
  if (max_factories < 1) {
    return api().ort->CreateStatus(ORT_INVALID_ARGUMENT, "npuflow: no room for its factory");
  }
  factories[0] =
      new NpuflowEpFactory(registered_name ? registered_name : "npuflow", default_logger);
  *num_factories = 1;
  return nullptr;
}

__attribute__((visibility("default"))) OrtStatus* ReleaseEpFactory(OrtEpFactory* factory) {
  delete static_cast<npuflow::ort::NpuflowEpFactory*>(factory);
  return nullptr;
}

}  // extern "C"

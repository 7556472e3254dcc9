// SPDX-License-Identifier: GPL-3.0-or-later
// libnpuflow-device-rocket.so's entry point (device/device_module.h).
#include "device/device_module.h"
#include "rocket/rocket_device.h"

namespace npuflow::rocket {
namespace {

Result<std::unique_ptr<Device>> create_rocket_device(const DeviceModuleConfig& config) {
  auto library = RocketLibrary::open(config.library);
  if (!library.is_ok()) return library.status();
  RocketDeviceOptions options;
  options.name = config.name;
  options.workers = config.workers;  // 0: the library's own default (ROCKET_N_THREADS, ...)
  options.sim_options = config.library_options;
  return std::unique_ptr<Device>(
      std::make_unique<RocketDevice>(std::move(library).value(), std::move(options)));
}

}  // namespace
}  // namespace npuflow::rocket

extern "C" __attribute__((visibility("default"))) const npuflow::DeviceModule*
npuflow_device_module_v1() {
  static const npuflow::DeviceModule module{
      npuflow::kDeviceModuleAbi, npuflow::device_module_build_id(), "rocket", "GPL-3.0-or-later",
      &npuflow::rocket::create_rocket_device};
  return &module;
}

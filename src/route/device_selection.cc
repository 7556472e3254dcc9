#include "route/device_selection.h"

#include "core/strings.h"
#include "host/host_device.h"

namespace npuflow {

Result<std::unique_ptr<Device>> create_device(std::string_view name, const DeviceOptions& options) {
  if (name == "host") return std::unique_ptr<Device>(new HostDevice(options));
  return invalid_argument(str_cat("unknown device '", name, "'"));
}

}  // namespace npuflow

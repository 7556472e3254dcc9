// Turns the `device` knob into a Device. Lives above the devices so that it may know all of them.
#pragma once

#include <memory>
#include <string_view>

#include "device/device.h"

namespace npuflow {

Result<std::unique_ptr<Device>> create_device(std::string_view name, const DeviceOptions& options);

}  // namespace npuflow

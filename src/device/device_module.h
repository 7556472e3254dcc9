// Device modules: a device built as its own shared library (libnpuflow-device-<name>.so) and
// loaded at run time, so that a device under another licence stays out of the MIT core (rocket is
// GPL-3.0: it includes librocketnpu's headers). A module exports one C symbol,
// npuflow_device_module_v1, which returns its DeviceModule table.
//
// The Device a module creates is a C++ object, so a module loads only into the npuflow build it
// was built with: the loader compares build ids (version and compiler) before calling anything
// else, and never unloads a module (its code backs every Device it made).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "device/device.h"

namespace npuflow {

inline constexpr uint32_t kDeviceModuleAbi = 1;

struct DeviceModuleConfig {
  std::string name;  // what the device calls itself (rocket; sim on librocketnpu-sim)
  // rocket: the librocketnpu to load, a path or a soname (the `rocketnpu` knob).
  std::string library;
  // Options for a simulator standing in for the library ("key=value;..."); unused otherwise.
  std::string library_options;
  int workers = 0;  // worker fds per context; 0: the library's default
  DeviceOptions options;
};

struct DeviceModule {
  uint32_t abi = kDeviceModuleAbi;
  const char* build_id = nullptr;  // device_module_build_id() of the build that made it
  const char* name = nullptr;      // "rocket"
  const char* license = nullptr;   // SPDX identifier
  Result<std::unique_ptr<Device>> (*create)(const DeviceModuleConfig& config) = nullptr;
};

// This build's id: npuflow's version and the compiler's.
const char* device_module_build_id();

// Where `file` of this build is: beside the binary that holds this code (the EP or ggml
// library, or the CLI), or in ../lib from it; the bare name (the loader's search) if neither.
std::string beside_this_binary(std::string_view file);
// The module `name`: beside_this_binary("libnpuflow-device-<name>.so").
std::string device_module_path(std::string_view name);

// Loads the module at `path` and checks that it belongs to this build.
Result<const DeviceModule*> load_device_module(const std::string& path);

}  // namespace npuflow

extern "C" {
using NpuflowDeviceModuleEntry = const npuflow::DeviceModule* (*)();
}

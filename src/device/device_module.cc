#include "device/device_module.h"

#include <dlfcn.h>

#include <filesystem>
#include <system_error>

#include "core/strings.h"
#include "npuflow/version.h"

namespace npuflow {

const char* device_module_build_id() {
  return "npuflow " NPUFLOW_VERSION " / " __VERSION__;
}

std::string beside_this_binary(std::string_view file) {
  namespace fs = std::filesystem;
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&beside_this_binary), &info) == 0 ||
      info.dli_fname == nullptr) {
    return std::string(file);
  }
  const fs::path here = fs::path(info.dli_fname).parent_path();
  std::error_code error;
  for (const fs::path& candidate : {here / file, here / ".." / "lib" / file}) {
    if (fs::exists(candidate, error)) return candidate.lexically_normal().string();
  }
  return std::string(file);
}

std::string device_module_path(std::string_view name) {
  return beside_this_binary(str_cat("libnpuflow-device-", name, ".so"));
}

Result<const DeviceModule*> load_device_module(const std::string& path) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return unsupported(str_cat("cannot load device module ", path, ": ", why ? why : "?"));
  }
  auto entry =
      reinterpret_cast<NpuflowDeviceModuleEntry>(dlsym(handle, "npuflow_device_module_v1"));
  if (entry == nullptr) {
    dlclose(handle);
    return unsupported(
        str_cat(path, " is not an npuflow device module (no npuflow_device_module_v1)"));
  }
  const DeviceModule* module = entry();
  if (module == nullptr || module->abi != kDeviceModuleAbi || module->build_id == nullptr ||
      std::string_view(module->build_id) != device_module_build_id() || module->create == nullptr) {
    const std::string theirs = module && module->build_id ? module->build_id : "no build id";
    dlclose(handle);
    return unsupported(str_cat("device module ", path, " was built for another npuflow (", theirs,
                               "; this is ", device_module_build_id(), ")"));
  }
  // Never closed: the devices it creates run its code until the process ends.
  return module;
}

}  // namespace npuflow

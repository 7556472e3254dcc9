#include "route/device_selection.h"

#include <dlfcn.h>

#include <filesystem>
#include <system_error>

#include "core/strings.h"
#include "device/device_module.h"
#include "host/host_device.h"

namespace npuflow {

DeviceConfig device_config_from(const Knobs& knobs) {
  DeviceConfig config;
  config.name = knobs.text("device");
  config.options.threads = static_cast<int>(knobs.integer("threads"));
  config.sim.workers = static_cast<int>(knobs.integer("sim_workers"));
  config.sim.fail_every = knobs.integer("sim_fail_every");
  config.sim.corrupt_every = knobs.integer("sim_corrupt_every");
  config.sim.kacc = *sim::parse_kacc_mode(knobs.text("sim_kacc"));
  config.rocketnpu = knobs.text("rocketnpu");
  config.sim_via = knobs.text("sim_via");
  return config;
}

namespace {

Result<std::unique_ptr<Device>> load_rocket(const DeviceConfig& config,
                                            DeviceModuleConfig module_config) {
  const std::string path =
      config.rocket_module.empty() ? device_module_path("rocket") : config.rocket_module;
  auto module = load_device_module(path);
  if (!module.is_ok()) return module.status();
  module_config.options = config.options;
  return module.value()->create(module_config);
}

// The sim knobs as librocketnpu-sim's context options.
std::string sim_library_options(const sim::SimOptions& sim) {
  return str_cat("kacc=", sim::kacc_mode_name(sim.kacc), ";fail_every=", sim.fail_every,
                 ";corrupt_every=", sim.corrupt_every,
                 ";iova_bytes_per_fd=", sim.iova_bytes_per_fd);
}

}  // namespace

std::string BoardProbe::summary() const {
  if (!accel_node) return "no /dev/accel/accel0";
  if (driver != "rocket") {
    return str_cat("/dev/accel/accel0 is bound to '", driver.empty() ? "?" : driver,
                   "', not the rocket driver");
  }
  if (!library) return "/dev/accel/accel0 is a rocket NPU but librocketnpu cannot be opened";
  return "/dev/accel/accel0 is a rocket NPU and librocketnpu opens";
}

BoardProbe probe_board() {
  namespace fs = std::filesystem;
  BoardProbe probe;
  std::error_code error;
  probe.accel_node = fs::exists("/dev/accel/accel0", error);
  if (!probe.accel_node) return probe;
  const fs::path driver = fs::read_symlink("/sys/class/accel/accel0/device/driver", error);
  if (!error) probe.driver = driver.filename().string();
  for (const char* name : {"librocketnpu.so.0", "librocketnpu.so"}) {
    if (void* handle = dlopen(name, RTLD_LAZY | RTLD_LOCAL)) {
      dlclose(handle);
      probe.library = true;
      break;
    }
  }
  return probe;
}

namespace {

Result<DeviceChoice> choose_device(const DeviceConfig& config, const BoardProbe* probe) {
  DeviceChoice choice;
  if (config.name == "host") {
    choice.device = std::make_unique<HostDevice>(config.options);
    choice.reason = "device=host";
    return choice;
  }
  if (config.name == "sim") {
    if (config.sim_via == "direct") {
      choice.reason = "device=sim (sim_via=direct): the simulator called directly";
    } else {
      DeviceModuleConfig module_config;
      module_config.name = "sim";
      module_config.library = config.rocket_sim_library.empty()
                                  ? beside_this_binary("librocketnpu-sim.so")
                                  : config.rocket_sim_library;
      module_config.library_options = sim_library_options(config.sim);
      module_config.workers = config.sim.workers;
      auto device = load_rocket(config, module_config);
      if (device.is_ok()) {
        choice.device = std::move(device).value();
        choice.reason = str_cat("device=sim: the rocket device module on ", module_config.library);
        return choice;
      }
      choice.reason =
          str_cat("device=sim: the simulator called directly (", device.status().message(), ")");
    }
    choice.device = std::make_unique<sim::SimDevice>(config.sim);
    return choice;
  }
  if (config.name != "rocket" && config.name != "auto") {
    return invalid_argument(str_cat("unknown device '", config.name, "'"));
  }
  const BoardProbe found = probe ? *probe : probe_board();
  auto rocket = [&]() -> Result<std::unique_ptr<Device>> {
    DeviceModuleConfig module_config;
    module_config.name = "rocket";
    module_config.library = config.rocketnpu;
    return load_rocket(config, module_config);
  };
  if (config.name == "rocket") {
    auto device = rocket();
    if (!device.is_ok()) {
      return unsupported(str_cat("device=rocket: ", device.status().message(),
                                 "; on this machine: ", found.summary(),
                                 ". Use device=sim to run on the RK3588 simulator, or host"));
    }
    choice.device = std::move(device).value();
    choice.reason = str_cat("device=rocket: ", choice.device->description());
    return choice;
  }
  if (found.usable()) {
    auto device = rocket();
    if (device.is_ok()) {
      choice.device = std::move(device).value();
      choice.reason = str_cat("device=auto chose rocket: ", found.summary());
      return choice;
    }
    choice.reason =
        str_cat("device=auto chose host: ", found.summary(), ", but ", device.status().message());
  } else {
    choice.reason = str_cat("device=auto chose host: ", found.summary());
  }
  choice.device = std::make_unique<HostDevice>(config.options);
  return choice;
}

}  // namespace

Result<DeviceChoice> create_device(const DeviceConfig& config, const BoardProbe* probe) {
  auto choice = choose_device(config, probe);
  if (choice.is_ok() && choice.value().device->name() != "host") {
    choice.value().host = std::make_shared<HostDevice>(config.options);
  }
  return choice;
}

}  // namespace npuflow

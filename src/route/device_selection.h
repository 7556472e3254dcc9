// Turns the `device` knob into a Device. Lives above the devices so that it may know all of them.
//
//   host    the exact CPU reference device.
//   sim     the RK3588 NPU simulator (src/sim/), configured by the sim_* knobs: the rocket device
//           module bound to librocketnpu-sim.so, so that the adapter code a board runs is what
//           sim runs; the simulator called directly where the module is not built, or with
//           sim_via=direct.
//   rocket  the RK3588 NPU through librocketnpu (the `rocketnpu` knob: the board's library, or
//           librocketnpu-sim.so in tests), driven by the rocket device module
//           (libnpuflow-device-rocket.so, GPL-3.0, loaded at run time). Without the module or
//           the library, session creation fails with a message that says what was missing.
//   auto    rocket when a board is usable (/dev/accel/accel0 bound to the `rocket` driver and
//           librocketnpu loadable) and the rocket module loads; otherwise host. auto never
//           picks sim: the simulator is a deliberate choice, not a stand-in for hardware.
#pragma once

#include <memory>
#include <string>

#include "core/knobs.h"
#include "device/device.h"
#include "sim/sim_device.h"

namespace npuflow {

struct DeviceConfig {
  std::string name = "auto";  // auto | host | sim | rocket
  DeviceOptions options;
  sim::SimOptions sim;
  std::string rocketnpu = "librocketnpu.so.0";  // the librocketnpu device=rocket drives
  std::string rocket_module;                    // empty: device_module_path("rocket")
  std::string sim_via = "rocket";               // rocket | direct
  std::string rocket_sim_library;               // empty: librocketnpu-sim.so beside this binary
};

// The device-related knobs of a session.
DeviceConfig device_config_from(const Knobs& knobs);

// What this machine offers an RK3588 device.
struct BoardProbe {
  bool accel_node = false;  // /dev/accel/accel0 exists
  std::string driver;       // its driver's name (sysfs), empty if unknown
  bool library = false;     // librocketnpu.so(.0) can be opened
  bool usable() const { return accel_node && driver == "rocket" && library; }
  std::string summary() const;  // e.g. "no /dev/accel/accel0"
};
BoardProbe probe_board();

struct DeviceChoice {
  std::unique_ptr<Device> device;
  // The exact host device beside a device that is not the host (null when `device` is the host):
  // one per session, built from the same device options, on which every kernel reruns the calls
  // the device refuses or fails and against which `verify` checks it.
  std::shared_ptr<Device> host;
  std::string reason;  // why this device, for the session log
};

// probe: the board probe to use (tests inject one); null probes this machine. The choice comes
// with its host reference.
Result<DeviceChoice> create_device(const DeviceConfig& config, const BoardProbe* probe = nullptr);

}  // namespace npuflow

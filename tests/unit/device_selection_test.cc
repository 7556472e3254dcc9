// The `device` knob: what each choice creates, what `auto` does with and without a board, and
// that `rocket` fails clearly without its module or library.
#include "route/device_selection.h"

#include <gtest/gtest.h>

#include <map>

#include "device/device_module.h"
#include "host/host_device.h"

namespace npuflow {
namespace {

Knobs knobs_with(std::map<std::string, std::string> env) {
  auto lookup = [env](const KnobSpec& spec) -> std::optional<std::string> {
    auto it = env.find(spec.env);
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
  auto knobs = Knobs::resolve(nullptr, lookup);
  EXPECT_TRUE(knobs.is_ok()) << knobs.status().to_string();
  return knobs.value();
}

TEST(DeviceSelection, HostAndSimAreCreatedByName) {
  auto host = create_device(device_config_from(knobs_with({{"NPUFLOW_DEVICE", "host"}})));
  ASSERT_TRUE(host.is_ok());
  EXPECT_EQ(host.value().device->name(), "host");
  EXPECT_EQ(host.value().host, nullptr);  // the host is its own reference
  const std::map<std::string, std::string> sim_knobs = {{"NPUFLOW_DEVICE", "sim"},
                                                        {"NPUFLOW_SIM_WORKERS", "3"},
                                                        {"NPUFLOW_SIM_KACC", "host"},
                                                        {"NPUFLOW_SIM_FAIL_EVERY", "7"},
                                                        {"NPUFLOW_SIM_CORRUPT_EVERY", "5"}};
  auto direct_knobs = sim_knobs;
  direct_knobs["NPUFLOW_SIM_VIA"] = "direct";
  auto sim = create_device(device_config_from(knobs_with(direct_knobs)));
  ASSERT_TRUE(sim.is_ok());
  EXPECT_EQ(sim.value().device->name(), "sim");
  ASSERT_NE(sim.value().host, nullptr);
  EXPECT_EQ(sim.value().host->name(), "host");
  const auto& options = dynamic_cast<const sim::SimDevice&>(*sim.value().device).options();
  EXPECT_EQ(options.workers, 3);
  EXPECT_EQ(options.kacc, sim::KAccMode::kHost);
  EXPECT_EQ(options.fail_every, 7);
  EXPECT_EQ(options.corrupt_every, 5);
  EXPECT_EQ(sim.value().device->row_multiple(ElementType::kInt8), 4);
  // By default sim is the rocket module on librocketnpu-sim, the sim knobs passed to it; in a
  // build without the module, the simulator called directly, saying why.
  auto via = create_device(device_config_from(knobs_with(sim_knobs)));
  ASSERT_TRUE(via.is_ok());
  Device& device = *via.value().device;
  EXPECT_EQ(device.name(), "sim");
  ASSERT_NE(via.value().host, nullptr);
  EXPECT_EQ(device.row_multiple(ElementType::kInt8), 4);
  const std::string& reason = via.value().reason;
  if (reason.find("the rocket device module on") != std::string::npos) {
    const std::vector<int8_t> weight(32 * 32, 1);
    ASSERT_TRUE(device.pack_int8_weight(weight.data(), 32, 32).is_ok());
    EXPECT_NE(device.profile_report().find("over 3 fds"), std::string::npos)
        << device.profile_report();
  } else {
    EXPECT_NE(reason.find("called directly (cannot load device module"), std::string::npos)
        << reason;
  }
}

// The host reference beside a device is built from the session's device options: with float_int8
// its int8 GEMMs take the float32 path, as the host device itself would.
TEST(DeviceSelection, TheHostReferenceTakesTheSessionsDeviceOptions) {
  DeviceConfig config;
  config.name = "sim";
  config.sim_via = "direct";
  for (const bool float_int8 : {false, true}) {
    config.options.float_int8 = float_int8;
    auto chosen = create_device(config);
    ASSERT_TRUE(chosen.is_ok());
    const auto* host = dynamic_cast<const HostDevice*>(chosen.value().host.get());
    ASSERT_NE(host, nullptr);
    const std::vector<int8_t> weight(64 * 32, 1);
    auto packed = chosen.value().host->pack_int8_weight(weight.data(), 64, 32);
    ASSERT_TRUE(packed.is_ok());
    EXPECT_EQ(host->int8_kernel(ElementType::kInt8, *packed.value()) == "float32 chunks",
              float_int8);
  }
}

TEST(DeviceSelection, AutoIsHostWithoutABoardAndNeverSim) {
  DeviceConfig config;  // auto
  BoardProbe none;
  auto chosen = create_device(config, &none);
  ASSERT_TRUE(chosen.is_ok());
  EXPECT_EQ(chosen.value().device->name(), "host");
  EXPECT_NE(chosen.value().reason.find("no /dev/accel/accel0"), std::string::npos);
  // A usable board, but no rocket module to drive it: still host, and it says why.
  BoardProbe board;
  board.accel_node = true;
  board.driver = "rocket";
  board.library = true;
  ASSERT_TRUE(board.usable());
  config.rocket_module = "/nonexistent/libnpuflow-device-rocket.so";
  auto on_board = create_device(config, &board);
  ASSERT_TRUE(on_board.is_ok());
  EXPECT_EQ(on_board.value().device->name(), "host");
  EXPECT_NE(on_board.value().reason.find("cannot load device module"), std::string::npos)
      << on_board.value().reason;
  BoardProbe other = board;
  other.driver = "amdxdna";
  EXPECT_FALSE(other.usable());
  EXPECT_NE(other.summary().find("'amdxdna', not the rocket driver"), std::string::npos);
}

TEST(DeviceSelection, RocketFailsClearlyWithoutTheModule) {
  DeviceConfig config;
  config.name = "rocket";
  config.rocket_module = "/nonexistent/libnpuflow-device-rocket.so";
  BoardProbe none;
  auto chosen = create_device(config, &none);
  ASSERT_FALSE(chosen.is_ok());
  EXPECT_EQ(chosen.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(chosen.status().message().find("cannot load device module"), std::string::npos);
  EXPECT_NE(chosen.status().message().find("no /dev/accel/accel0"), std::string::npos);
  config.name = "gpu";
  EXPECT_EQ(create_device(config, &none).status().code(), StatusCode::kInvalidArgument);
}

TEST(DeviceSelection, ADeviceModuleOfAnotherKindIsRefused) {
  // A shared library that is not a device module (libc): refused by name, nothing called.
  auto module = load_device_module("libc.so.6");
  ASSERT_FALSE(module.is_ok());
  EXPECT_NE(module.status().message().find("not an npuflow device module"), std::string::npos);
}

}  // namespace
}  // namespace npuflow

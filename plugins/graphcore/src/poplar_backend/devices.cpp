// devices.cpp -- clients and their devices: attached IPU groups and the IPU
// Model from PopART's DeviceManager (so that PopART sessions can run on
// them), or an offline target for compile_only. Compiled only with the
// Poplar SDK.
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <popart/devicemanager.hpp>
#include <popart/popx/devicexmanager.hpp>
#include <poplar/Graph.hpp>
#include <poplar/Target.hpp>
#include <poplar/exceptions.hpp>

#include "backend.hpp"

namespace {

using nxhal_gc::DeviceSlot;

// Architecture the offline and model targets are made for. The IPU Model and
// offline compilation both need one; "ipu2" is the Mk2 (IPU-M2000, Bow) IPU.
constexpr const char* kDefaultArch = "ipu2";

std::string plural_ipus(int64_t num_ipus) {
  return std::to_string(num_ipus) + " IPU" + (num_ipus > 1 ? "s" : "");
}

// The target's architecture. getTargetArchString returns a poplar::StringRef,
// hence the explicit std::string; PopART guards the call because some
// device types do not implement it.
std::string arch_of(const poplar::Target& target) {
  try {
    return std::string(target.getTargetArchString());
  } catch (const poplar::poplar_error&) {
    return "unknown";
  }
}

// What a serialized executable must match: PopEF is locked to the Poplar
// release that made it (the package hash), the architecture and the number
// of IPUs it was compiled for.
std::string make_compat_key(const poplar::Target& target, const std::string& arch) {
  std::ostringstream key;
  key << "graphcore:" << nxhal_gc::sdk_version() << ":" << nxhal_gc::package_hash() << ":" << arch
      << ":" << target.getNumIPUs() << "ipu:" << target.getTilesPerIPU() << "tiles";
  return key.str();
}

void finish_slot(DeviceSlot& slot) {
  slot.arch = arch_of(slot.target);
  slot.compat_key = make_compat_key(slot.target, slot.arch);
}

std::unique_ptr<DeviceSlot> make_model_slot(int64_t num_ipus) {
  auto slot = std::make_unique<DeviceSlot>();
  // PopART's IPU Model (option keys checked by DevicexManager::createHostDevice);
  // tilesPerIPU is left at PopART's small default so model compiles stay quick.
  slot->device = popart::DeviceManager::createDeviceManager().createIpuModelDevice(
      {{"numIPUs", std::to_string(num_ipus)}, {"ipuVersion", kDefaultArch}});
  if (slot->device == nullptr) throw std::runtime_error("PopART made no IPU Model device");
  slot->target = slot->device->getTarget();
  slot->is_model = true;
  slot->name = "IPU Model (" + plural_ipus(num_ipus) + ")";
  finish_slot(*slot);
  return slot;
}

std::unique_ptr<DeviceSlot> make_offline_slot(int64_t num_ipus) {
  auto slot = std::make_unique<DeviceSlot>();
  slot->target = poplar::Target::createIPUTarget(static_cast<unsigned>(num_ipus), kDefaultArch);
  slot->is_offline = true;
  slot->name = "offline " + std::string(kDefaultArch) + " target (" + plural_ipus(num_ipus) +
               ", compile only)";
  finish_slot(*slot);
  return slot;
}

// Attaches the first free group of `num_ipus` IPUs. Fills `reason` when none.
std::unique_ptr<DeviceSlot> attach_hardware(int64_t num_ipus, std::string& reason) {
  auto& manager = popart::DeviceManager::createDeviceManager();
  std::vector<std::shared_ptr<popart::DeviceInfo>> devices =
      manager.enumerateDevices(popart::SyncPattern::Full, static_cast<int>(num_ipus));
  if (devices.empty()) {
    reason = "popart::DeviceManager::enumerateDevices(numIpus=" + std::to_string(num_ipus) +
             ") returned no device";
    return nullptr;
  }
  for (std::shared_ptr<popart::DeviceInfo>& device : devices) {
    // attach() returns false when another process holds the IPUs.
    if (!device->attach()) continue;
    auto slot = std::make_unique<DeviceSlot>();
    slot->device_id = static_cast<int64_t>(device->getId());
    slot->target = device->getTarget();
    slot->name =
        "IPU device " + std::to_string(slot->device_id) + " (" + plural_ipus(num_ipus) + ")";
    slot->device = std::move(device);
    finish_slot(*slot);
    return slot;
  }
  reason = std::to_string(devices.size()) + " device(s) with " + std::to_string(num_ipus) +
           " IPU(s) exist but all are attached by other processes (see gc-monitor)";
  return nullptr;
}

}  // namespace

const poplar::Device& nxhal_gc::poplar_device(const DeviceSlot& slot) {
  // PopART's model and hardware DeviceInfos are popx::DevicexInfo, which
  // holds the poplar::Device; the offline one is not.
  const auto* info = dynamic_cast<const popart::popx::DevicexInfo*>(slot.device.get());
  if (info == nullptr) throw std::runtime_error("device " + slot.name + " has no poplar::Device");
  return info->getDevice();
}

nxhal_status_t* nxhal_gc_client_open(const nxhal_graphcore_config_t* config,
                                     nxhal_graphcore_bclient_t** out_client,
                                     const char** out_reason) {
  *out_client = nullptr;
  *out_reason = "";
  return nxhal_gc::guarded("client_create", [&]() -> nxhal_status_t* {
    if (config->struct_size < NXHAL_GRAPHCORE_CONFIG_STRUCT_SIZE) {
      return nxhal_gc::make_status(NXHAL_INTERNAL, "graphcore: client config struct too small");
    }
    auto client = std::make_unique<nxhal_graphcore_bclient_t>();
    client->config = *config;
    std::unique_ptr<DeviceSlot> slot;
    if (config->ipu_model) {
      slot = make_model_slot(config->num_ipus);
    } else if (config->compile_only) {
      slot = make_offline_slot(config->num_ipus);
    } else {
      slot = attach_hardware(config->num_ipus, client->reason);
    }
    if (slot != nullptr) client->devices.push_back(std::move(slot));
    *out_reason = client->reason.c_str();
    *out_client = client.release();
    return nullptr;
  });
}

// devices.cpp -- clients and their devices: attached IPU groups from
// poplar::DeviceManager, Poplar's IPU Model, or an offline target for
// compile_only. Compiled only with the Poplar SDK.
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <poplar/DeviceManager.hpp>
#include <poplar/IPUModel.hpp>
#include <poplar/Target.hpp>
#include <poplar/TargetType.hpp>

#include "backend.hpp"

namespace {

using nxhal_gc::DeviceSlot;

// Architecture the offline and model targets are made for. The IPU Model and
// offline compilation both need one; "ipu2" is the Mk2 (IPU-M2000, Bow) IPU.
constexpr const char* kDefaultArch = "ipu2";

// What a serialized executable must match: PopEF is locked to the Poplar
// release that made it (the package hash), the architecture and the number
// of IPUs it was compiled for.
std::string make_compat_key(const poplar::Target& target) {
  std::ostringstream key;
  key << "graphcore:" << nxhal_gc::sdk_version() << ":" << nxhal_gc::package_hash() << ":"
      << target.getTargetArchString() << ":" << target.getNumIPUs()
      << "ipu:" << target.getTilesPerIPU() << "tiles";
  return key.str();
}

void finish_slot(DeviceSlot& slot) {
  slot.arch = slot.target.getTargetArchString();
  slot.compat_key = make_compat_key(slot.target);
}

std::unique_ptr<DeviceSlot> make_model_slot(int64_t num_ipus) {
  auto slot = std::make_unique<DeviceSlot>();
  poplar::IPUModel model(kDefaultArch);
  model.numIPUs = static_cast<unsigned>(num_ipus);
  slot->device.emplace(model.createDevice());
  slot->target = slot->device->getTarget();
  slot->is_model = true;
  slot->name = "IPU Model (" + std::to_string(num_ipus) + " IPU" + (num_ipus > 1 ? "s" : "") + ")";
  finish_slot(*slot);
  return slot;
}

std::unique_ptr<DeviceSlot> make_offline_slot(int64_t num_ipus) {
  auto slot = std::make_unique<DeviceSlot>();
  slot->target = poplar::Target::createIPUTarget(static_cast<unsigned>(num_ipus), kDefaultArch);
  slot->is_offline = true;
  slot->name = "offline " + std::string(kDefaultArch) + " target (" + std::to_string(num_ipus) +
               " IPU" + (num_ipus > 1 ? "s" : "") + ", compile only)";
  finish_slot(*slot);
  return slot;
}

// Attaches the first free group of `num_ipus` IPUs. Fills `reason` when none.
std::unique_ptr<DeviceSlot> attach_hardware(int64_t num_ipus, std::string& reason) {
  auto manager = poplar::DeviceManager::createDeviceManager();
  std::vector<poplar::Device> devices =
      manager.getDevices(poplar::TargetType::IPU, static_cast<unsigned>(num_ipus));
  if (devices.empty()) {
    reason = "poplar::DeviceManager::getDevices(IPU, " + std::to_string(num_ipus) +
             ") returned no device (of " + std::to_string(manager.getNumDevices()) +
             " device(s) in total)";
    return nullptr;
  }
  for (poplar::Device& device : devices) {
    // attach() returns false when another process holds the IPUs.
    if (!device.attach()) continue;
    auto slot = std::make_unique<DeviceSlot>();
    slot->device_id = static_cast<int64_t>(device.getId());
    slot->target = device.getTarget();
    slot->name = "IPU device " + std::to_string(slot->device_id) + " (" + std::to_string(num_ipus) +
                 " IPU" + (num_ipus > 1 ? "s" : "") + ")";
    slot->device.emplace(std::move(device));
    finish_slot(*slot);
    return slot;
  }
  reason = std::to_string(devices.size()) + " device(s) with " + std::to_string(num_ipus) +
           " IPU(s) exist but all are attached by other processes (see gc-monitor)";
  return nullptr;
}

}  // namespace

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

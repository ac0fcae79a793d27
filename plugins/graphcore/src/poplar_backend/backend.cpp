// backend.cpp -- the exported entry point and the small entries of the
// internal table (backend.h). Compiled only with the Poplar SDK.
#include <cstdint>
#include <cstdlib>
#include <string>

// poplar::versionString and poplar::packageHash: PopART's ir.cpp and
// irlowering.cpp call them with only <poplar/Graph.hpp> among Poplar's
// headers; no public source includes a <poplar/Version.hpp>.
#include <poplar/Graph.hpp>
#include <poplar/Target.hpp>

#include "backend.hpp"

namespace nxhal_gc {

const nxhal_graphcore_host_t* g_host = nullptr;

nxhal_status_t* make_status(nxhal_status_code_t code, const std::string& message) {
  return g_host->status_make(code, message.c_str());
}

const std::string& sdk_version() {
  // Function-local statics: initialised once, thread-safe since C++11.
  static const std::string version(poplar::versionString());
  return version;
}

const std::string& package_hash() {
  static const std::string hash(poplar::packageHash());
  return hash;
}

std::string cache_dir() {
  const char* explicit_dir = std::getenv("NX_HAL_GRAPHCORE_CACHE_DIR");
  std::string base;
  if (explicit_dir != nullptr && explicit_dir[0] != '\0') {
    base = explicit_dir;
  } else if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && xdg[0] != '\0') {
    base = std::string(xdg) + "/nx_hal/graphcore";
  } else if (const char* home = std::getenv("HOME"); home != nullptr && home[0] != '\0') {
    base = std::string(home) + "/.cache/nx_hal/graphcore";
  } else {
    base = "/tmp/nx_hal-graphcore-cache";
  }
  return base + "/" + package_hash();
}

}  // namespace nxhal_gc

nxhal_graphcore_bclient::~nxhal_graphcore_bclient() {
  for (auto& slot : devices) {
    // Only hardware was attached; the model and offline slots never were.
    if (slot->device != nullptr && !slot->is_model && !slot->is_offline) {
      try {
        slot->device->detach();
      } catch (...) {
        // Destruction must not throw into C; the driver releases the IPU
        // when the process exits anyway.
      }
    }
  }
}

namespace {

using nxhal_gc::guarded;
using nxhal_gc::make_status;

const char* gc_sdk_version() {
  return nxhal_gc::sdk_version().c_str();
}

void gc_client_close(nxhal_graphcore_bclient_t* client) {
  try {
    delete client;
  } catch (...) {
  }
}

nxhal_status_t* gc_device_count(nxhal_graphcore_bclient_t* client, size_t* out_count) {
  *out_count = client->devices.size();
  return nullptr;
}

nxhal_status_t* gc_device_describe(nxhal_graphcore_bclient_t* client, size_t index,
                                   nxhal_graphcore_device_desc_t* out) {
  return guarded("device_describe", [&]() -> nxhal_status_t* {
    if (index >= client->devices.size()) {
      return make_status(NXHAL_INVALID_ARGUMENT, "graphcore: device index out of range");
    }
    if (out->struct_size < NXHAL_GRAPHCORE_DEVICE_DESC_STRUCT_SIZE) {
      return make_status(NXHAL_INTERNAL, "graphcore: device description struct too small");
    }
    const nxhal_gc::DeviceSlot& slot = *client->devices[index];
    out->name = slot.name.c_str();
    out->arch = slot.arch.c_str();
    out->compat_key = slot.compat_key.c_str();
    out->device_id = slot.device_id;
    out->num_ipus = static_cast<int64_t>(slot.target.getNumIPUs());
    out->tiles_per_ipu = static_cast<int64_t>(slot.target.getTilesPerIPU());
    out->bytes_per_tile = static_cast<int64_t>(slot.target.getBytesPerTile());
    out->is_ipu_model = slot.is_model ? 1 : 0;
    out->is_offline = slot.is_offline ? 1 : 0;
    return nullptr;
  });
}

void gc_executable_free(nxhal_graphcore_bexe_t* exe) {
  if (exe == nullptr) return;
  try {
    if (exe->slot != nullptr) {
      // Forget our engine if it is the one on the device.
      std::lock_guard<std::mutex> lock(exe->slot->run_mutex);
      if (exe->slot->loaded == exe) exe->slot->loaded = nullptr;
    }
    delete exe;
  } catch (...) {
  }
}

nxhal_status_t* gc_executable_io(nxhal_graphcore_bexe_t* exe, nxhal_io_kind_t kind,
                                 const nxhal_io_info_t** out_infos, size_t* out_count) {
  const auto& infos = kind == NXHAL_IO_INPUT ? exe->input_infos : exe->output_infos;
  *out_infos = infos.empty() ? nullptr : infos.data();
  *out_count = infos.size();
  return nullptr;
}

// ONNX executables: the envelope of backend.hpp (magic, ONNX size, ONNX,
// PopEF); plain Poplar executables: their PopEF as given.
nxhal_status_t* gc_serialize(nxhal_graphcore_bexe_t* exe, nxhal_graphcore_sink_fn sink,
                             void* user) {
  if (!exe->serializable) {
    return make_status(NXHAL_UNIMPLEMENTED,
                       "graphcore: serialize: executables compiled on the IPU Model cannot be "
                       "serialized (PopART saves executables only for devices that compile "
                       "offline; Poplar does not serialize IPU Model executables)");
  }
  bool ok = true;
  if (!exe->onnx.empty()) {
    unsigned char size[8];
    const uint64_t onnx_size = exe->onnx.size();
    for (int i = 0; i < 8; ++i) size[i] = static_cast<unsigned char>(onnx_size >> (8 * i));
    ok = sink(user, nxhal_gc::kPopartEnvelopeMagic, 8) == 0 && sink(user, size, 8) == 0 &&
         sink(user, exe->onnx.data(), exe->onnx.size()) == 0;
  }
  if (!ok || sink(user, exe->popef.data(), exe->popef.size()) != 0) {
    return make_status(NXHAL_RESOURCE_EXHAUSTED,
                       "graphcore: out of memory while serializing the executable");
  }
  return nullptr;
}

const nxhal_graphcore_backend_t g_table = {
    sizeof(nxhal_graphcore_backend_t),
    1,
    gc_sdk_version,
    nxhal_gc_client_open,
    gc_client_close,
    gc_device_count,
    gc_device_describe,
    nxhal_gc_compile,
    gc_executable_free,
    gc_executable_io,
    nxhal_gc_execute,
    gc_serialize,
};

}  // namespace

// The only symbol this library exports (CXX_VISIBILITY_PRESET hidden).
extern "C" __attribute__((visibility("default"))) const nxhal_graphcore_backend_t*
nxhal_graphcore_backend_v1(const nxhal_graphcore_host_t* host) {
  if (host == nullptr || host->struct_size < NXHAL_GRAPHCORE_HOST_STRUCT_SIZE ||
      host->status_make == nullptr) {
    return nullptr;
  }
  nxhal_gc::g_host = host;
  return &g_table;
}

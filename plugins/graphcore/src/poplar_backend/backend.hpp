// backend.hpp -- shared declarations of the Poplar backend (C++17). Built
// only where CMake finds the Poplar SDK; never compiled in this repository's
// CI (see README.md, "What has not been verified").
#ifndef NX_HAL_GRAPHCORE_POPLAR_BACKEND_HPP_
#define NX_HAL_GRAPHCORE_POPLAR_BACKEND_HPP_

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <poplar/Device.hpp>
#include <poplar/Engine.hpp>
#include <poplar/Target.hpp>
#include <popef/Reader.hpp>
#include <popef/Types.hpp>

#include "backend.h"

namespace nxhal_gc {

// The frontend's status factory, set once by nxhal_graphcore_backend_v1.
extern const nxhal_graphcore_host_t* g_host;

// A status owned by the caller, made by the frontend (so its status_free frees it).
nxhal_status_t* make_status(nxhal_status_code_t code, const std::string& message);

// Runs `body`, turning every exception into a status: no C++ exception may
// cross into the C frontend. `what` prefixes the message.
template <class Body>
nxhal_status_t* guarded(const char* what, Body&& body) noexcept;

// One device of a client: an attached IPU group, an IPU Model, or (compile
// only) an offline target. Owned by the client; lives as long as it.
struct DeviceSlot {
  std::optional<poplar::Device> device;  // empty when offline
  poplar::Target target;
  bool is_model = false;
  bool is_offline = false;
  int64_t device_id = -1;
  std::string name;
  std::string arch;
  std::string compat_key;
  // Only one engine is loaded on a device at a time: executions on one
  // device take this lock, and `loaded` says whose engine is on it.
  std::mutex run_mutex;
  const void* loaded = nullptr;
};

// Where PopART keeps compiled executables, keyed by Poplar's package hash so
// a different SDK never reuses them.
std::string cache_dir();

// Poplar's version string and package hash; computed once. Thread-safe.
const std::string& sdk_version();
const std::string& package_hash();

}  // namespace nxhal_gc

// The opaque types of backend.h.
struct nxhal_graphcore_bclient {
  nxhal_graphcore_config_t config{};
  std::string reason;  // why there are no devices, when there are none
  std::vector<std::unique_ptr<nxhal_gc::DeviceSlot>> devices;
  ~nxhal_graphcore_bclient();
};

struct nxhal_graphcore_bexe {
  nxhal_gc::DeviceSlot* slot = nullptr;
  std::string popef;  // the PopEF bytes: what serialize writes and what is loaded
  std::unique_ptr<popef::Reader> reader;
  std::unique_ptr<poplar::Engine> engine;  // null on offline targets
  std::vector<popef::Anchor> inputs;       // user-fed anchors, in metadata order
  std::vector<popef::Anchor> outputs;
  // Anchors whose data PopEF carries (weights, constants): host copies the
  // engine streams from when its load programs run.
  std::vector<std::pair<std::string, std::vector<char>>> constants;
  std::vector<uint64_t> load_programs;
  std::vector<uint64_t> main_programs;
  // The io descriptions handed to the frontend, and the storage they point to.
  std::vector<nxhal_io_info_t> input_infos;
  std::vector<nxhal_io_info_t> output_infos;
  std::vector<std::unique_ptr<std::vector<int64_t>>> dims_storage;
  std::vector<std::unique_ptr<std::string>> name_storage;
};

// Implemented in devices.cpp and executable.cpp.
nxhal_status_t* nxhal_gc_client_open(const nxhal_graphcore_config_t* config,
                                     nxhal_graphcore_bclient_t** out_client,
                                     const char** out_reason);
nxhal_status_t* nxhal_gc_compile(nxhal_graphcore_bclient_t* client, size_t index,
                                 const nxhal_program_t* program,
                                 const nxhal_graphcore_compile_config_t* config,
                                 nxhal_graphcore_bexe_t** out_exe);
nxhal_status_t* nxhal_gc_execute(nxhal_graphcore_bexe_t* exe, const void* const* inputs,
                                 const size_t* input_sizes, size_t num_inputs, void* const* outputs,
                                 const size_t* output_sizes, size_t num_outputs);

#include "guarded.inl"

#endif  // NX_HAL_GRAPHCORE_POPLAR_BACKEND_HPP_

// backend.hpp -- shared declarations of the Poplar backend (C++17). Built
// only where CMake finds the Poplar SDK; never compiled in this repository's
// CI (see README.md, "What has not been verified").
#ifndef NX_HAL_GRAPHCORE_POPLAR_BACKEND_HPP_
#define NX_HAL_GRAPHCORE_POPLAR_BACKEND_HPP_

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <popart/devicemanager.hpp>
#include <popart/session.hpp>
#include <popart/tensorinfo.hpp>
#include <popef/Reader.hpp>
#include <popef/Types.hpp>
#include <poplar/Device.hpp>
#include <poplar/Engine.hpp>
#include <poplar/Target.hpp>

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
// PopART's DeviceInfo, not a bare poplar::Device, so that PopART sessions
// (which own the engine of an ONNX program) can run on it too.
struct DeviceSlot {
  std::shared_ptr<popart::DeviceInfo> device;  // null when offline
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

// The poplar::Device inside a model or hardware slot's PopART DeviceInfo,
// for plain Poplar executables run through a bare poplar::Engine. Borrowed
// from the slot. Throws when the slot has none (offline). Thread-safe.
const poplar::Device& poplar_device(const DeviceSlot& slot);

// Serialized ONNX executables are this envelope, not bare PopEF: PopART can
// load its own PopEF only into a session made from the same ONNX model, so
// the model travels with it. Layout: magic[8], u64 little-endian ONNX size,
// ONNX bytes, PopEF bytes.
constexpr char kPopartEnvelopeMagic[9] = "NXGCPART";

// Appends one io description (name and dims copied into exe's storage).
// Not thread-safe: only while exe is being built.
void push_io_info(nxhal_graphcore_bexe& exe, const std::string& name, nxhal_dtype_t dtype,
                  const std::vector<int64_t>& dims, std::vector<nxhal_io_info_t>& infos);

// The PopART path (session.cpp). ONNX programs, and envelopes of them, are
// compiled, loaded and run through a popart::InferenceSession; the caller
// owns exe, whose slot is set. Not thread-safe on one exe except
// popart_execute, which takes the slot's run lock.
nxhal_status_t* popart_compile(nxhal_graphcore_bexe& exe, const nxhal_program_t& program,
                               const nxhal_graphcore_compile_config_t& config);
nxhal_status_t* popart_load(nxhal_graphcore_bexe& exe, const nxhal_program_t& program);
nxhal_status_t* popart_execute(nxhal_graphcore_bexe& exe, const void* const* inputs,
                               void* const* outputs);

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
  // ONNX programs: the model (after float16 conversion) and the PopART
  // session that compiled it and runs it. `serializable` is false on the IPU
  // Model, where PopART saves no executable.
  std::string onnx;
  std::unique_ptr<popart::InferenceSession> session;
  std::vector<std::string> input_ids;  // session tensor ids, in io order
  std::vector<std::string> output_ids;
  std::vector<popart::TensorInfo> input_tensors;
  std::vector<popart::TensorInfo> output_tensors;
  bool serializable = true;
  // Plain Poplar PopEF programs: the reader and a bare engine.
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

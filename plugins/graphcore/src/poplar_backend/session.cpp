// session.cpp -- ONNX programs through PopART: compiled by a
// popart::InferenceSession for the slot's own device, exported as PopEF
// where PopART can save one, loaded back into a session made from the same
// model, and run with host buffers through a StepIO. PopART wires its own
// streams, weights and programs, which a bare poplar::Engine would have to
// redo by hand. Compiled only with the Poplar SDK.
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <popart/builder.hpp>
#include <popart/dataflow.hpp>
#include <popart/devicemanager.hpp>
#include <popart/graphtransformer.hpp>
#include <popart/iarray.hpp>
#include <popart/inputshapeinfo.hpp>
#include <popart/popx/devicex.hpp>
#include <popart/session.hpp>
#include <popart/sessionoptions.hpp>
#include <popart/stepio.hpp>
#include <popart/tensorinfo.hpp>

#include "backend.hpp"

namespace {

using nxhal_gc::DeviceSlot;
using nxhal_gc::make_status;

// PopART element types to ours; INVALID for those nx_hal has no name for.
nxhal_dtype_t to_nxhal_dtype(popart::DataType type) {
  switch (type) {
    case popart::DataType::FLOAT16: return NXHAL_DTYPE_F16;
    case popart::DataType::BFLOAT16: return NXHAL_DTYPE_BF16;
    case popart::DataType::FLOAT: return NXHAL_DTYPE_F32;
    case popart::DataType::DOUBLE: return NXHAL_DTYPE_F64;
    case popart::DataType::INT8: return NXHAL_DTYPE_I8;
    case popart::DataType::INT16: return NXHAL_DTYPE_I16;
    case popart::DataType::INT32: return NXHAL_DTYPE_I32;
    case popart::DataType::INT64: return NXHAL_DTYPE_I64;
    case popart::DataType::UINT8: return NXHAL_DTYPE_U8;
    case popart::DataType::UINT16: return NXHAL_DTYPE_U16;
    case popart::DataType::UINT32: return NXHAL_DTYPE_U32;
    case popart::DataType::UINT64: return NXHAL_DTYPE_U64;
    case popart::DataType::BOOL: return NXHAL_DTYPE_BOOL;
    default: return NXHAL_DTYPE_INVALID;
  }
}

// A host buffer as PopART's IArray: the frontend has checked its size
// against the tensor's info, which the executable owns and outlives it.
class HostArray final : public popart::IArray {
 public:
  HostArray(void* data, const popart::TensorInfo& info) : data_(data), info_(&info) {}
  void* data() override { return data_; }
  popart::DataType dataType() const override { return info_->dataType(); }
  std::size_t rank() const override { return static_cast<std::size_t>(info_->rank()); }
  int64_t dim(size_t index) const override { return info_->dim(static_cast<int>(index)); }
  std::size_t nelms() const override { return static_cast<std::size_t>(info_->nelms()); }
  const popart::Shape shape() const override { return info_->shape(); }

 private:
  void* data_;
  const popart::TensorInfo* info_;
};

popart::SessionOptions session_options(const nxhal_graphcore_compile_config_t& config) {
  popart::SessionOptions options;
  options.enableEngineCaching = true;
  options.cachePath = nxhal_gc::cache_dir();
  if (config.available_memory_proportion > 0.0) {
    const std::string amp = std::to_string(config.available_memory_proportion);
    options.matmulOptions["availableMemoryProportion"] = amp;
    options.convolutionOptions["availableMemoryProportion"] = amp;
  }
  if (config.half_partials) {
    options.partialsTypeMatMuls = "half";
    options.convolutionOptions["partialsType"] = "half";
  }
  return options;
}

// The device a session compiles for: the slot's own (model or attached
// hardware, whose target carries the real system's options), or for
// compile_only an offline IPU described exactly as the slot's target.
std::shared_ptr<popart::DeviceInfo> session_device(const DeviceSlot& slot) {
  if (!slot.is_offline) return slot.device;
  auto device = popart::DeviceManager::createDeviceManager().createOfflineIPUDevice(
      {{"numIPUs", std::to_string(slot.target.getNumIPUs())},
       {"tilesPerIPU", std::to_string(slot.target.getTilesPerIPU())},
       {"ipuVersion", slot.arch}});
  if (device == nullptr) throw std::runtime_error("PopART could not describe " + slot.name);
  return device;
}

// Makes exe.session from exe.onnx and picks the io: graph inputs that are
// not initializers, and graph outputs, each returned to the host every step.
void make_session(nxhal_graphcore_bexe_t& exe, const nxhal_graphcore_compile_config_t& config) {
  auto builder = popart::Builder::createFromOnnxModel(exe.onnx);
  for (const popart::TensorId& id : builder->getInputTensorIds()) {
    if (!builder->isInitializer(id)) exe.input_ids.push_back(id);
  }
  popart::AnchorReturnTypeMap anchors;
  for (const popart::TensorId& id : builder->getOutputTensorIds()) {
    anchors.emplace(id, popart::AnchorReturnType("All"));
    exe.output_ids.push_back(id);
  }
  exe.session = popart::InferenceSession::createFromOnnxModel(
      exe.onnx, popart::DataFlow(1, anchors), session_device(*exe.slot), popart::InputShapeInfo(),
      session_options(config));
}

// Records the io descriptions. Only once the session holds an executable
// (compiled or loaded): Session::getInfo asserts that it does.
nxhal_status_t* describe_io(nxhal_graphcore_bexe_t& exe) {
  for (int kind = 0; kind < 2; ++kind) {
    const auto& ids = kind == 0 ? exe.input_ids : exe.output_ids;
    auto& tensors = kind == 0 ? exe.input_tensors : exe.output_tensors;
    auto& infos = kind == 0 ? exe.input_infos : exe.output_infos;
    for (const std::string& id : ids) {
      tensors.push_back(exe.session->getInfo(id));
      nxhal_dtype_t dtype = to_nxhal_dtype(tensors.back().dataType());
      if (dtype == NXHAL_DTYPE_INVALID) {
        return make_status(NXHAL_UNIMPLEMENTED, "graphcore: tensor '" + id +
                                                    "' has a PopART element type nx_hal cannot "
                                                    "represent");
      }
      nxhal_gc::push_io_info(exe, id, dtype, tensors.back().shape(), infos);
    }
  }
  return nullptr;
}

}  // namespace

nxhal_status_t* nxhal_gc::popart_compile(nxhal_graphcore_bexe& exe, const nxhal_program_t& program,
                                         const nxhal_graphcore_compile_config_t& config) {
  exe.onnx.assign(static_cast<const char*>(program.data), program.size);
  if (config.precision_float16) {
    popart::GraphTransformer transformer(exe.onnx);
    transformer.convertFloatsToHalfs();
    exe.onnx = transformer.getModelProto();
  }
  make_session(exe, config);
  if (exe.slot->is_model) {
    // PopART's IPU Model cannot compile offline, so compileAndExport would
    // throw: compile and load for running only; nothing to serialize.
    exe.session->prepareDevice();
    exe.serializable = false;
  } else {
    // Hardware and offline devices compile offline: export the PopEF that
    // serialize writes. On hardware this also leaves the session prepared;
    // the engine is loaded on the first execute.
    std::ostringstream out;
    exe.session->compileAndExport(out);
    exe.popef = out.str();
  }
  nxhal_status_t* status = describe_io(exe);
  if (exe.slot->is_offline) exe.session.reset();  // nothing will run it
  return status;
}

nxhal_status_t* nxhal_gc::popart_load(nxhal_graphcore_bexe& exe, const nxhal_program_t& program) {
  const auto* bytes = static_cast<const unsigned char*>(program.data);
  uint64_t onnx_size = 0;
  for (int i = 0; i < 8; ++i) onnx_size |= static_cast<uint64_t>(bytes[8 + i]) << (8 * i);
  if (onnx_size > program.size - 16) {
    return make_status(NXHAL_INVALID_ARGUMENT, "graphcore: corrupted PopART executable envelope");
  }
  if (exe.slot->is_model) {
    return make_status(NXHAL_UNIMPLEMENTED,
                       "graphcore: serialized executables cannot run on the IPU Model");
  }
  exe.onnx.assign(reinterpret_cast<const char*>(bytes + 16), onnx_size);
  exe.popef.assign(reinterpret_cast<const char*>(bytes + 16 + onnx_size),
                   program.size - 16 - onnx_size);
  nxhal_graphcore_compile_config_t defaults{};
  defaults.struct_size = sizeof(defaults);
  make_session(exe, defaults);
  // As PopART's executable_serialization_test does: load the executable
  // (no graph compilation), then prepare the device with it.
  exe.session->loadExecutableFromStream(std::make_shared<std::istringstream>(exe.popef));
  if (!exe.slot->is_offline) exe.session->getDevice().prepare();
  nxhal_status_t* status = describe_io(exe);
  if (exe.slot->is_offline) exe.session.reset();  // nothing will run it
  return status;
}

nxhal_status_t* nxhal_gc::popart_execute(nxhal_graphcore_bexe& exe, const void* const* inputs,
                                         void* const* outputs) {
  DeviceSlot& slot = *exe.slot;
  std::lock_guard<std::mutex> lock(slot.run_mutex);
  if (slot.loaded != &exe) {
    // Another engine (a session's or a bare one, which PopART cannot see)
    // is on the device, or none yet: load ours and its weights again.
    exe.session->loadEngineAndConnectStreams();
    exe.session->weightsFromHost();
    slot.loaded = &exe;
  }
  std::vector<HostArray> arrays;
  arrays.reserve(exe.input_ids.size() + exe.output_ids.size());
  std::map<popart::TensorId, popart::IArray&> in_map;
  std::map<popart::TensorId, popart::IArray&> out_map;
  for (size_t i = 0; i < exe.input_ids.size(); ++i) {
    // PopART only reads input arrays; IArray::data() is non-const.
    arrays.emplace_back(const_cast<void*>(inputs[i]), exe.input_tensors[i]);
    in_map.emplace(exe.input_ids[i], arrays.back());
  }
  for (size_t i = 0; i < exe.output_ids.size(); ++i) {
    arrays.emplace_back(outputs[i], exe.output_tensors[i]);
    out_map.emplace(exe.output_ids[i], arrays.back());
  }
  popart::StepIO step(in_map, out_map);
  exe.session->run(step);
  return nullptr;
}

// executable.cpp -- ONNX -> PopEF through PopART, PopEF -> poplar::Engine,
// and execution with host buffers bound to the program's streams.
// Compiled only with the Poplar SDK.
#include <cstring>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <popart/builder.hpp>
#include <popart/dataflow.hpp>
#include <popart/devicemanager.hpp>
#include <popart/graphtransformer.hpp>
#include <popart/inputshapeinfo.hpp>
#include <popart/patterns/patterns.hpp>
#include <popart/session.hpp>
#include <popart/sessionoptions.hpp>
#include <poplar/Executable.hpp>
#include <poplar/OptionFlags.hpp>

#include "backend.hpp"

namespace {

using nxhal_gc::DeviceSlot;
using nxhal_gc::make_status;

// PopEF element types to ours; INVALID for those nx_hal has no name for.
nxhal_dtype_t to_nxhal_dtype(popef::DataType type) {
  switch (type) {
    case popef::DataType::F16: return NXHAL_DTYPE_F16;
    case popef::DataType::F32: return NXHAL_DTYPE_F32;
    case popef::DataType::F64: return NXHAL_DTYPE_F64;
    case popef::DataType::S8: return NXHAL_DTYPE_I8;
    case popef::DataType::S16: return NXHAL_DTYPE_I16;
    case popef::DataType::S32: return NXHAL_DTYPE_I32;
    case popef::DataType::S64: return NXHAL_DTYPE_I64;
    case popef::DataType::U8: return NXHAL_DTYPE_U8;
    case popef::DataType::U16: return NXHAL_DTYPE_U16;
    case popef::DataType::U32: return NXHAL_DTYPE_U32;
    case popef::DataType::U64: return NXHAL_DTYPE_U64;
    case popef::DataType::BOOL: return NXHAL_DTYPE_BOOL;
    default: return NXHAL_DTYPE_INVALID;
  }
}

// ONNX bytes -> PopEF bytes. The PopART device only describes the target:
// compiling needs no attached IPU, so one process can compile while another
// runs. PopART's engine cache (keyed with Poplar's package hash) makes a
// second compile of the same model cheap.
std::string compile_onnx(const DeviceSlot& slot, const nxhal_program_t& program,
                         const nxhal_graphcore_compile_config_t& config) {
  std::string model(static_cast<const char*>(program.data), program.size);
  if (config.precision_float16) {
    popart::GraphTransformer transformer(model);
    transformer.convertFloatsToHalfs();
    model = transformer.getModelProto();
  }

  // Every graph output is returned to the host after each step.
  auto builder = popart::Builder::createFromOnnxModel(model);
  popart::AnchorReturnTypeMap anchors;
  for (const popart::TensorId& id : builder->getOutputTensorIds()) {
    anchors.emplace(id, popart::AnchorReturnType("All"));
  }
  popart::DataFlow data_flow(1, anchors);

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

  std::map<std::string, std::string> device_options = {
      {"numIPUs", std::to_string(slot.target.getNumIPUs())},
      {"tilesPerIPU", std::to_string(slot.target.getTilesPerIPU())},
      {"ipuVersion", slot.arch},
  };
  auto& manager = popart::DeviceManager::createDeviceManager();
  std::shared_ptr<popart::DeviceInfo> device = slot.is_model
                                                   ? manager.createIpuModelDevice(device_options)
                                                   : manager.createOfflineIPUDevice(device_options);
  if (device == nullptr) {
    throw std::runtime_error("PopART could not describe a " + slot.arch + " target with " +
                             device_options["numIPUs"] + " IPU(s)");
  }
  auto session = popart::InferenceSession::createFromOnnxModel(model, data_flow, device,
                                                               popart::InputShapeInfo(), options);
  std::ostringstream out;
  session->compileAndExport(out);
  return out.str();
}

// Fills the io descriptions the frontend reads from an anchor list.
nxhal_status_t* describe(nxhal_graphcore_bexe_t& exe, const std::vector<popef::Anchor>& anchors,
                         std::vector<nxhal_io_info_t>& infos) {
  for (const popef::Anchor& anchor : anchors) {
    nxhal_dtype_t dtype = to_nxhal_dtype(anchor.tensorInfo().dataType());
    if (dtype == NXHAL_DTYPE_INVALID) {
      return make_status(NXHAL_UNIMPLEMENTED, "graphcore: tensor '" + anchor.name() +
                                                  "' has a PopEF element type nx_hal cannot "
                                                  "represent");
    }
    exe.dims_storage.push_back(std::make_unique<std::vector<int64_t>>(anchor.tensorInfo().shape()));
    nxhal_io_info_t info{};
    info.struct_size = sizeof(info);
    exe.name_storage.push_back(std::make_unique<std::string>(anchor.name()));
    info.name = exe.name_storage.back()->c_str();
    info.desc.struct_size = sizeof(info.desc);
    info.desc.dtype = dtype;
    info.desc.rank = static_cast<int64_t>(exe.dims_storage.back()->size());
    info.desc.dims = exe.dims_storage.back()->data();
    infos.push_back(info);
  }
  return nullptr;
}

// Reads a PopEF tensor's bytes (weights, constants) into host memory.
std::vector<char> read_all(std::unique_ptr<std::istream> stream) {
  std::vector<char> bytes;
  char chunk[1 << 16];
  while (stream->read(chunk, sizeof(chunk)) || stream->gcount() > 0) {
    bytes.insert(bytes.end(), chunk, chunk + stream->gcount());
  }
  return bytes;
}

// PopEF bytes -> metadata, anchors and (unless offline) an engine.
nxhal_status_t* load_popef(nxhal_graphcore_bexe_t& exe) {
  exe.reader = std::make_unique<popef::Reader>();
  exe.reader->parseStream(std::make_shared<std::istringstream>(exe.popef));
  const auto& metadata_list = exe.reader->metadata();
  if (metadata_list.size() != 1) {
    return make_status(NXHAL_INVALID_ARGUMENT, "graphcore: the PopEF program holds " +
                                                   std::to_string(metadata_list.size()) +
                                                   " models; exactly one is supported");
  }
  const popef::Metadata& metadata = metadata_list.front();
  if (metadata.replicationFactor() > 1) {
    return make_status(NXHAL_UNIMPLEMENTED,
                       "graphcore: replicated PopEF models (replication factor " +
                           std::to_string(metadata.replicationFactor()) + ") are not supported");
  }
  if (static_cast<int64_t>(metadata.numIpus()) >
      static_cast<int64_t>(exe.slot->target.getNumIPUs())) {
    return make_status(NXHAL_INVALID_ARGUMENT, "graphcore: the PopEF model needs " +
                                                   std::to_string(metadata.numIpus()) +
                                                   " IPUs but the device has " +
                                                   std::to_string(exe.slot->target.getNumIPUs()) +
                                                   " (create the client with a larger num_ipus)");
  }

  // Anchors with data in the file are the model's constants: stream them
  // from host memory. The rest are what the user feeds and gets back.
  std::map<std::string, const popef::TensorReader*> tensor_data;
  for (const popef::TensorReader& tensor : exe.reader->tensors()) {
    tensor_data.emplace(tensor.info.name(), &tensor);
  }
  for (const popef::Anchor& anchor : metadata.anchors()) {
    auto found = tensor_data.find(anchor.name());
    if (found != tensor_data.end()) {
      exe.constants.emplace_back(anchor.handle(),
                                 read_all(found->second->getStandaloneDataStream()));
    } else if (anchor.type() == popef::TensorType::INPUT) {
      exe.inputs.push_back(anchor);
    } else if (anchor.type() == popef::TensorType::OUTPUT) {
      exe.outputs.push_back(anchor);
    }
  }
  if (nxhal_status_t* status = describe(exe, exe.inputs, exe.input_infos)) return status;
  if (nxhal_status_t* status = describe(exe, exe.outputs, exe.output_infos)) return status;
  for (auto index : metadata.programFlow().load()) exe.load_programs.push_back(index);
  for (auto index : metadata.programFlow().main()) exe.main_programs.push_back(index);

  if (exe.slot->is_offline) return nullptr;  // compile only: nothing to load

  const popef::ExecutableReader* executable = nullptr;
  for (const popef::ExecutableReader& candidate : exe.reader->executables()) {
    if (candidate.name == metadata.executable()) executable = &candidate;
  }
  if (executable == nullptr) {
    return make_status(NXHAL_INVALID_ARGUMENT, "graphcore: the PopEF program has no executable '" +
                                                   metadata.executable() + "'");
  }
  poplar::OptionFlags engine_options;
  for (const auto& option : metadata.engineOptions()) {
    engine_options.set(option.first, option.second);
  }
  poplar::Executable poplar_exe =
      poplar::Executable::deserialize(executable->getStandaloneExecutableStream());
  exe.engine = std::make_unique<poplar::Engine>(std::move(poplar_exe), engine_options);
  return nullptr;
}

}  // namespace

nxhal_status_t* nxhal_gc_compile(nxhal_graphcore_bclient_t* client, size_t index,
                                 const nxhal_program_t* program,
                                 const nxhal_graphcore_compile_config_t* config,
                                 nxhal_graphcore_bexe_t** out_exe) {
  *out_exe = nullptr;
  return nxhal_gc::guarded("compile", [&]() -> nxhal_status_t* {
    if (index >= client->devices.size()) {
      return make_status(NXHAL_INVALID_ARGUMENT, "graphcore: device index out of range");
    }
    auto exe = std::make_unique<nxhal_graphcore_bexe_t>();
    exe->slot = client->devices[index].get();
    if (std::strcmp(program->format, "onnx") == 0) {
      exe->popef = compile_onnx(*exe->slot, *program, *config);
    } else {
      exe->popef.assign(static_cast<const char*>(program->data), program->size);
    }
    if (nxhal_status_t* status = load_popef(*exe)) return status;
    *out_exe = exe.release();
    return nullptr;
  });
}

nxhal_status_t* nxhal_gc_execute(nxhal_graphcore_bexe_t* exe, const void* const* inputs,
                                 const size_t* input_sizes, size_t num_inputs, void* const* outputs,
                                 const size_t* output_sizes, size_t num_outputs) {
  return nxhal_gc::guarded("execute", [&]() -> nxhal_status_t* {
    if (exe->engine == nullptr) {
      return make_status(NXHAL_FAILED_PRECONDITION,
                         "graphcore: this client was created with compile_only=true: its "
                         "executables can be serialized but not run");
    }
    if (num_inputs != exe->inputs.size() || num_outputs != exe->outputs.size()) {
      return make_status(NXHAL_INTERNAL, "graphcore: input/output count mismatch in execute");
    }
    (void)input_sizes;  // checked by the frontend against the io descriptions
    (void)output_sizes;
    DeviceSlot& slot = *exe->slot;
    std::lock_guard<std::mutex> lock(slot.run_mutex);
    if (slot.loaded != exe) {
      // Another executable's engine is on the device (or none yet): load
      // ours and stream its constants in with its load programs.
      exe->engine->load(*slot.device);
      for (auto& constant : exe->constants) {
        exe->engine->connectStream(constant.first, constant.second.data());
      }
      for (auto program : exe->load_programs) exe->engine->run(static_cast<unsigned>(program));
      slot.loaded = exe;
    }
    for (size_t i = 0; i < num_inputs; ++i) {
      // Poplar only reads from input streams; the cast is its API's.
      exe->engine->connectStream(exe->inputs[i].handle(), const_cast<void*>(inputs[i]));
    }
    for (size_t i = 0; i < num_outputs; ++i) {
      exe->engine->connectStream(exe->outputs[i].handle(), outputs[i]);
    }
    for (auto program : exe->main_programs) exe->engine->run(static_cast<unsigned>(program));
    return nullptr;
  });
}

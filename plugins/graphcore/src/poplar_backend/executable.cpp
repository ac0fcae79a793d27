// executable.cpp -- compile dispatch, and plain Poplar PopEF programs:
// PopEF -> poplar::Engine, executed with host buffers bound to the program's
// streams. ONNX programs go through PopART instead (session.cpp).
// Compiled only with the Poplar SDK.
#include <cstring>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <popef/Reader.hpp>
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
    nxhal_gc::push_io_info(exe, anchor.name(), dtype, anchor.tensorInfo().shape(), infos);
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

// Refuses PopEF that a bare engine cannot run: PopART's exports (which
// carry an opaque blob named "popart" and need every stream and program
// wired as PopART does) and anything on the IPU Model.
nxhal_status_t* check_plain_poplar(const nxhal_graphcore_bexe_t& exe) {
  for (const popef::OpaqueReader& blob : exe.reader->opaqueBlobs()) {
    if (blob.name.find("popart") != std::string::npos) {
      return make_status(NXHAL_UNIMPLEMENTED,
                         "graphcore: this PopEF was exported by PopART; PopART loads it only "
                         "into a session made from its ONNX model: compile the ONNX model, or "
                         "pass an executable serialized by nx_hal");
    }
  }
  if (exe.slot->is_model) {
    return make_status(NXHAL_UNIMPLEMENTED,
                       "graphcore: PopEF programs cannot run on the IPU Model (Poplar does not "
                       "serialize IPU Model executables); compile the ONNX model instead");
  }
  return nullptr;
}

// PopEF bytes -> metadata, anchors and (unless offline) an engine.
nxhal_status_t* load_popef(nxhal_graphcore_bexe_t& exe) {
  exe.reader = std::make_unique<popef::Reader>();
  exe.reader->parseStream(std::make_shared<std::istringstream>(exe.popef));
  if (nxhal_status_t* status = check_plain_poplar(exe)) return status;
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
  // An executable runs on exactly the IPU count it was compiled for, so
  // fewer is as wrong as more.
  if (static_cast<int64_t>(metadata.numIpus()) !=
      static_cast<int64_t>(exe.slot->target.getNumIPUs())) {
    return make_status(
        NXHAL_INVALID_ARGUMENT,
        "graphcore: the PopEF model was compiled for " + std::to_string(metadata.numIpus()) +
            " IPUs but the device has " + std::to_string(exe.slot->target.getNumIPUs()) +
            " (create the client with num_ipus=" + std::to_string(metadata.numIpus()) + ")");
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
  // popef::Option has name() and value() (PopART's
  // executable_serialization_test reads them so).
  for (const popef::Option& option : metadata.engineOptions()) {
    engine_options.set(option.name(), option.value());
  }
  poplar::Executable poplar_exe =
      poplar::Executable::deserialize(executable->getStandaloneExecutableStream());
  exe.engine = std::make_unique<poplar::Engine>(std::move(poplar_exe), engine_options);
  return nullptr;
}

bool is_popart_envelope(const nxhal_program_t& program) {
  return program.size >= 16 && std::memcmp(program.data, nxhal_gc::kPopartEnvelopeMagic, 8) == 0;
}

}  // namespace

void nxhal_gc::push_io_info(nxhal_graphcore_bexe& exe, const std::string& name, nxhal_dtype_t dtype,
                            const std::vector<int64_t>& dims, std::vector<nxhal_io_info_t>& infos) {
  exe.dims_storage.push_back(std::make_unique<std::vector<int64_t>>(dims));
  exe.name_storage.push_back(std::make_unique<std::string>(name));
  nxhal_io_info_t info{};
  info.struct_size = sizeof(info);
  info.name = exe.name_storage.back()->c_str();
  info.desc.struct_size = sizeof(info.desc);
  info.desc.dtype = dtype;
  info.desc.rank = static_cast<int64_t>(exe.dims_storage.back()->size());
  info.desc.dims = exe.dims_storage.back()->data();
  infos.push_back(info);
}

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
    nxhal_status_t* status = nullptr;
    if (std::strcmp(program->format, "onnx") == 0) {
      status = nxhal_gc::popart_compile(*exe, *program, *config);
    } else if (is_popart_envelope(*program)) {
      status = nxhal_gc::popart_load(*exe, *program);
    } else {
      exe->popef.assign(static_cast<const char*>(program->data), program->size);
      status = load_popef(*exe);
    }
    if (status != nullptr) return status;
    *out_exe = exe.release();
    return nullptr;
  });
}

nxhal_status_t* nxhal_gc_execute(nxhal_graphcore_bexe_t* exe, const void* const* inputs,
                                 const size_t* input_sizes, size_t num_inputs, void* const* outputs,
                                 const size_t* output_sizes, size_t num_outputs) {
  return nxhal_gc::guarded("execute", [&]() -> nxhal_status_t* {
    if (exe->slot->is_offline) {
      return make_status(NXHAL_FAILED_PRECONDITION,
                         "graphcore: this client was created with compile_only=true: its "
                         "executables can be serialized but not run");
    }
    if (num_inputs != exe->input_infos.size() || num_outputs != exe->output_infos.size()) {
      return make_status(NXHAL_INTERNAL, "graphcore: input/output count mismatch in execute");
    }
    (void)input_sizes;  // checked by the frontend against the io descriptions
    (void)output_sizes;
    if (exe->session != nullptr) return nxhal_gc::popart_execute(*exe, inputs, outputs);
    DeviceSlot& slot = *exe->slot;
    std::lock_guard<std::mutex> lock(slot.run_mutex);
    if (slot.loaded != exe) {
      // Another executable's engine is on the device (or none yet): load
      // ours and stream its constants in with its load programs.
      exe->engine->load(nxhal_gc::poplar_device(slot));
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

// run_model.cpp -- runs an ONNX model on the best nx_hal device and checks it
// against a reference, through the C++ API (nx_hal.hpp).
//
//   run_model [MODEL.onnx] [REFERENCE]
//
// MODEL defaults to examples/mlp.onnx, REFERENCE to the model's path with
// ".onnx" replaced by "_reference.txt". Plugins are those the loader finds:
// libnxhal_<name>.so files in NX_HAL_PLUGIN_PATH first, then the manifests of
// installed plugins. Of the devices that accept the "onnx" format,
// kinds are tried in the order tpu, gpu, npu, cpu (then any other); every
// device skipped is reported on stderr with the reason, and a device that
// fails to compile or run the model falls back to the next.
//
// The reference file is text: '#' starts a comment; each tensor is
//   input|output NAME DTYPE RANK DIM... followed by its values (f32 only)
// in the order of the model's inputs and outputs.
//
// Exit status: 0 the outputs match the reference (max abs error <= 1e-4),
// 1 they do not, 2 no plugin or device can run the model, 3 a bad command
// line or an unreadable model or reference.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "nx_hal/nx_hal.hpp"

#ifndef NXHAL_EXAMPLES_DIR
#define NXHAL_EXAMPLES_DIR "examples"
#endif

namespace {

constexpr double kTolerance = 1e-4;
constexpr int kTimedRuns = 20;
constexpr int kExitMismatch = 1;
constexpr int kExitNoDevice = 2;
constexpr int kExitUsage = 3;

// One tensor of the reference file.
struct Tensor {
  std::string name;
  nxhal::Shape shape;
  std::vector<float> values;
};

struct Reference {
  std::vector<Tensor> inputs;
  std::vector<Tensor> outputs;
};

// A device that accepts onnx, with the plugin it came from.
struct Candidate {
  std::string label;  // "npu:CPU (cpu)"
  int rank;           // position in the kind preference order
  nxhal::Device device;
};

// Thrown for a bad command line or file; main turns it into kExitUsage.
struct UsageError {
  std::string message;
};

// Position of `kind` in the preference order tpu, gpu, npu, cpu, others.
int preference(nxhal::DeviceKind kind) {
  switch (kind) {
    case NXHAL_DEVICE_TPU: return 0;
    case NXHAL_DEVICE_GPU: return 1;
    case NXHAL_DEVICE_NPU: return 2;
    case NXHAL_DEVICE_CPU: return 3;
    default: return 4;
  }
}

std::string join(const std::vector<std::string>& items) {
  std::string text;
  for (const std::string& item : items) text += (text.empty() ? "" : ", ") + item;
  return text.empty() ? "none" : text;
}

std::string shape_text(const nxhal::Shape& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? "," : "") + std::to_string(shape[i]);
  return text + "]";
}

std::string read_bytes(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw UsageError{"cannot read model '" + path + "'"};
  return std::string(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
}

// Parses the reference file (format in the comment at the top).
Reference read_reference(const std::string& path) {
  std::ifstream file(path);
  if (!file) throw UsageError{"cannot read reference '" + path + "'"};
  std::stringstream text;  // the file without comments
  for (std::string line; std::getline(file, line);) text << line.substr(0, line.find('#')) << '\n';
  Reference reference;
  std::string role;
  while (text >> role) {
    Tensor tensor;
    std::string dtype;
    int64_t rank = 0;
    if ((role != "input" && role != "output") || !(text >> tensor.name >> dtype >> rank) ||
        dtype != "f32" || rank < 0 || rank > 32) {
      throw UsageError{"reference '" + path + "': expected 'input|output NAME f32 RANK DIM...'"};
    }
    size_t count = 1;
    for (int64_t i = 0; i < rank; ++i) {
      int64_t dim = -1;
      if (!(text >> dim) || dim < 0) throw UsageError{"reference '" + path + "': bad dimension"};
      tensor.shape.push_back(dim);
      count *= static_cast<size_t>(dim);
    }
    tensor.values.resize(count);
    for (float& value : tensor.values) {
      if (!(text >> value)) {
        throw UsageError{"reference '" + path + "': tensor '" + tensor.name + "' needs " +
                         std::to_string(count) + " values"};
      }
    }
    (role == "input" ? reference.inputs : reference.outputs).push_back(std::move(tensor));
  }
  if (reference.inputs.empty() || reference.outputs.empty()) {
    throw UsageError{"reference '" + path + "' has no input or no output"};
  }
  return reference;
}

// Plugins and clients stay open while their devices are candidates.
struct Session {
  std::vector<nxhal::Client> clients;
  std::vector<Candidate> candidates;
};

// Opens every plugin found and collects the devices that accept onnx,
// reporting on stderr each plugin or device it skips and why.
Session find_candidates() {
  Session session;
  std::vector<nxhal::PluginEntry> entries = nxhal::enumerate_plugins();
  if (entries.empty()) {
    std::cerr << "no plugins found (searched " NXHAL_PLUGIN_PATH_ENV " and installed manifests)\n";
  }
  for (const nxhal::PluginEntry& entry : entries) {
    try {
      nxhal::Plugin plugin = nxhal::Plugin::open(entry.path);
      nxhal::Client client = plugin.create_client();
      for (const nxhal::Device& device : client.devices()) {
        nxhal::DeviceInfo info = device.info();
        std::string label = entry.name + ":" + info.name + " (" + nxhal::kind_name(info.kind) + ")";
        if (!info.accepts("onnx")) {
          std::cerr << "skipped " << label
                    << ": does not accept onnx (accepts: " << join(info.formats) << ")\n";
          continue;
        }
        session.candidates.push_back(Candidate{label, preference(info.kind), device});
      }
      session.clients.push_back(std::move(client));  // the plugin handle may close now
    } catch (const nxhal::Error& error) {
      std::cerr << "skipped plugin " << entry.name << " (" << entry.path << "): " << error.what()
                << "\n";
    }
  }
  std::stable_sort(session.candidates.begin(), session.candidates.end(),
                   [](const Candidate& a, const Candidate& b) { return a.rank < b.rank; });
  return session;
}

// Copies the reference inputs onto the device, checking them against the
// executable's inputs.
std::vector<nxhal::Buffer> upload(const nxhal::Device& device, const nxhal::Executable& executable,
                                  const Reference& reference) {
  std::vector<nxhal::IoInfo> inputs = executable.inputs();
  if (inputs.size() != reference.inputs.size()) {
    throw nxhal::Error(NXHAL_INVALID_ARGUMENT,
                       "the model takes " + std::to_string(inputs.size()) +
                           " inputs, the reference has " + std::to_string(reference.inputs.size()),
                       "run_model");
  }
  std::vector<nxhal::Buffer> buffers;
  for (const Tensor& tensor : reference.inputs)
    buffers.push_back(device.from_host(tensor.values, tensor.shape));
  return buffers;
}

// The largest |actual - expected| over every output; throws if the outputs
// differ in number or size.
double max_abs_error(const std::vector<nxhal::Buffer>& outputs, const Reference& reference) {
  if (outputs.size() != reference.outputs.size()) {
    throw nxhal::Error(NXHAL_INVALID_ARGUMENT,
                       "the model gave " + std::to_string(outputs.size()) +
                           " outputs, the reference has " +
                           std::to_string(reference.outputs.size()),
                       "run_model");
  }
  double worst = 0.0;
  for (size_t i = 0; i < outputs.size(); ++i) {
    std::vector<float> actual = outputs[i].to_host<float>();
    const std::vector<float>& expected = reference.outputs[i].values;
    if (actual.size() != expected.size()) {
      throw nxhal::Error(NXHAL_INVALID_ARGUMENT,
                         "output '" + reference.outputs[i].name + "' has " +
                             std::to_string(actual.size()) + " values, the reference " +
                             std::to_string(expected.size()),
                         "run_model");
    }
    for (size_t j = 0; j < actual.size(); ++j) {
      double error = std::fabs(static_cast<double>(actual[j]) - expected[j]);
      if (!(error <= worst)) worst = error;  // NaN sticks
    }
  }
  return worst;
}

// Milliseconds since `start`.
double elapsed_ms(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

int run(const std::string& model_path, const std::string& reference_path) {
  std::string model = read_bytes(model_path);
  Reference reference = read_reference(reference_path);
  Session session = find_candidates();
  if (session.candidates.empty()) {
    std::cerr << "no device accepts onnx: nothing can run " << model_path << "\n";
    return kExitNoDevice;
  }
  for (size_t c = 0; c < session.candidates.size(); ++c) {
    const Candidate& candidate = session.candidates[c];
    try {
      auto start = std::chrono::steady_clock::now();
      nxhal::Executable executable = candidate.device.compile("onnx", model);
      double compile_ms = elapsed_ms(start);
      std::vector<nxhal::Buffer> inputs = upload(candidate.device, executable, reference);
      start = std::chrono::steady_clock::now();
      std::vector<nxhal::Buffer> outputs = executable.execute(inputs);
      double first_ms = elapsed_ms(start);
      double error = max_abs_error(outputs, reference);

      std::vector<double> times;
      for (int i = 0; i < kTimedRuns; ++i) {
        start = std::chrono::steady_clock::now();
        executable.execute(inputs);
        times.push_back(elapsed_ms(start));
      }
      std::sort(times.begin(), times.end());

      for (size_t s = c + 1; s < session.candidates.size(); ++s) {
        std::cerr << "skipped " << session.candidates[s].label << ": " << candidate.label
                  << " is preferred\n";
      }
      std::vector<float> first = outputs[0].to_host<float>();
      size_t best =
          static_cast<size_t>(std::max_element(first.begin(), first.end()) - first.begin());
      std::printf("device: %s\n", candidate.label.c_str());
      std::printf("model: %s (%zu bytes), compiled in %.1f ms\n", model_path.c_str(), model.size(),
                  compile_ms);
      std::printf("latency: %.3f ms median of %d runs (first run %.3f ms)\n",
                  times[times.size() / 2], kTimedRuns, first_ms);
      std::printf("result: %s %s, argmax %zu (%.6f)\n", reference.outputs[0].name.c_str(),
                  shape_text(outputs[0].info().shape).c_str(), best,
                  static_cast<double>(first[best]));
      std::printf("max abs error: %.3g (tolerance %.0e): %s\n", error, kTolerance,
                  error <= kTolerance ? "match" : "MISMATCH");
      return error <= kTolerance ? 0 : kExitMismatch;
    } catch (const nxhal::Error& error) {
      std::cerr << "skipped " << candidate.label << ": cannot run the model: " << error.what()
                << "\n";
    }
  }
  std::cerr << "no device could run " << model_path << "\n";
  return kExitNoDevice;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() > 2 || (!args.empty() && !args[0].empty() && args[0][0] == '-')) {
    std::cerr << "usage: " << argv[0] << " [MODEL.onnx] [REFERENCE]\n";
    return !args.empty() && (args[0] == "-h" || args[0] == "--help") ? 0 : kExitUsage;
  }
  std::string model = args.size() > 0 ? args[0] : std::string(NXHAL_EXAMPLES_DIR "/mlp.onnx");
  std::string reference = model;
  if (args.size() > 1) {
    reference = args[1];
  } else {
    size_t dot = reference.rfind(".onnx");
    reference = reference.substr(0, dot) + "_reference.txt";
  }
  try {
    return run(model, reference);
  } catch (const UsageError& error) {
    std::cerr << "run_model: " << error.message << "\n";
    return kExitUsage;
  } catch (const nxhal::Error& error) {
    std::cerr << "run_model: " << error.what() << "\n";
    return kExitNoDevice;
  }
}

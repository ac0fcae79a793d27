// sealed_cpp -- nx_hal.hpp's sealed Executable::serialize and Device::deserialize
// against the host-memory fixture, for tests/test_sealed_c.py (NX_HAL_PLUGIN_PATH
// holds the fixture's directory):
//   sealed_cpp save SEALED RAW      compiles "add f32 4"; writes serialize() to SEALED
//                                   and the plugin's own bytes (its table) to RAW
//   sealed_cpp load FILE [trusted]  deserializes FILE (with nxhal::trusted), runs it
//                                   on {1,2,3,4} + {10,20,30,40}; prints "loaded"
// Exit status: 0 done, 1 an nxhal::Error ("<code>\n<what()>" on stderr), 2 usage
// or I/O, 3 a wrong result.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "nx_hal/nx_hal.hpp"

namespace {

bool write_file(const std::string& path, const void* data, size_t size) {
  std::ofstream file(path, std::ios::binary);
  file.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
  return static_cast<bool>(file);
}

bool read_file(const std::string& path, std::string* out) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return false;
  out->assign(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
  return true;
}

int save(const nxhal::Device& device, const std::string& sealed_path, const std::string& raw_path) {
  nxhal::Executable add = device.compile("fixture-elementwise", std::string("add f32 4"));
  std::vector<uint8_t> sealed = add.serialize();
  nxhal_blob_t* raw = nullptr;
  nxhal_status_t* status = add.api()->executable_serialize(add.get(), &raw);
  if (status != nullptr) {
    add.api()->status_free(status);
    return 2;
  }
  std::unique_ptr<nxhal_blob_t, void (*)(nxhal_blob_t*)> owned(raw, add.api()->blob_free);
  if (!write_file(sealed_path, sealed.data(), sealed.size()) ||
      !write_file(raw_path, raw->data, raw->size)) {
    return 2;
  }
  std::printf("saved %zu sealed bytes\n", sealed.size());
  return 0;
}

int load(const nxhal::Device& device, const std::string& path, bool trusted) {
  std::string data;
  if (!read_file(path, &data)) return 2;
  nxhal::Executable exe =
      trusted ? device.deserialize(data, nxhal::trusted) : device.deserialize(data);
  nxhal::Buffer x = device.from_host(std::vector<float>{1, 2, 3, 4}, {4});
  nxhal::Buffer y = device.from_host(std::vector<float>{10, 20, 30, 40}, {4});
  if (exe.execute({&x, &y})[0].to_host<float>() != std::vector<float>{11, 22, 33, 44}) return 3;
  std::printf("loaded\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  bool saving = args.size() == 3 && args[0] == "save";
  bool loading =
      (args.size() == 2 || (args.size() == 3 && args[2] == "trusted")) && args[0] == "load";
  if (!saving && !loading) {
    std::fprintf(stderr, "usage: sealed_cpp save SEALED RAW | load FILE [trusted]\n");
    return 2;
  }
  try {
    nxhal::Plugin plugin = nxhal::Plugin::open_by_name("fixture_hostmem");
    nxhal::Client client = plugin.create_client();
    nxhal::Device device = client.device(0);
    return saving ? save(device, args[1], args[2]) : load(device, args[1], args.size() == 3);
  } catch (const nxhal::Error& error) {
    std::fprintf(stderr, "%s\n%s\n", nxhal::code_name(error.code()), error.what());
    return 1;
  }
}

"""Tests of the C++ API (include/nx_hal/nx_hal.hpp) and the C++ example
(examples/cpp/run_model.cpp), built with the system C++ compiler against the
in-tree headers and the loader compiled from cabi/, and of the example's
committed reference (examples/mlp_reference.txt)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests import cbuild

ROOT = cbuild.repo_root()
HEADER = ROOT / "include" / "nx_hal" / "nx_hal.hpp"
EXAMPLE = ROOT / "examples" / "cpp" / "run_model.cpp"
MODEL = ROOT / "examples" / "mlp.onnx"
REFERENCE = ROOT / "examples" / "mlp_reference.txt"
TOLERANCE = 1e-4
CXX_WARNINGS = ("-Wall", "-Wextra", "-Wpedantic", "-Werror")
SANITIZE_FLAGS = ("-g", "-fsanitize=address,undefined", "-fno-omit-frame-pointer",
                  "-fno-sanitize-recover=all")
EXIT_MISMATCH, EXIT_NO_DEVICE, EXIT_USAGE = 1, 2, 3


def cxx() -> list[str]:
    """The C++ compiler command: $CXX split like a shell would, else ``g++``."""
    return shlex.split(os.environ.get("CXX") or "g++")


def _require(command: Sequence[str]) -> None:
    if shutil.which(command[0]) is None:
        pytest.skip(f"C++ compiler '{command[0]}' not found")


def run(cmd: Sequence[str | Path], env: dict[str, str] | None = None,
        timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Runs a command, capturing text output."""
    return subprocess.run([str(part) for part in cmd], capture_output=True, text=True, env=env,
                          timeout=timeout)


def env_with_path(*dirs: Path) -> dict[str, str]:
    """The environment with NX_HAL_PLUGIN_PATH set to `dirs` and no other place
    the loader searches for manifests (virtual or conda environment, XDG data
    directories), so a test sees only the plugins it put there."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "CONDA_PREFIX")}
    env["NX_HAL_PLUGIN_PATH"] = ":".join(str(d) for d in dirs)
    nowhere = str(Path(dirs[0] if dirs else "/") / "nonexistent-nx_hal-data")
    env["XDG_DATA_HOME"] = env["XDG_DATA_DIRS"] = nowhere
    return env


# --- Building ------------------------------------------------------------------


@dataclass(frozen=True)
class _CxxProgramBuilder:
    """Compiles the loader as C with cbuild's compiler, then the C++ sources
    with `cxx_args`, and links them."""

    c_args: tuple[str, ...]
    cxx_args: tuple[str, ...]

    def __call__(self, work_dir: Path, output: Path) -> Path:
        objects = []
        for source in cbuild.loader_sources():
            obj = work_dir / f"{source.stem}.o"
            cbuild._run([*cbuild.compiler(), *self.c_args, "-c", str(source), "-o", str(obj)],
                        cwd=ROOT)
            objects.append(str(obj))
        cbuild._run([*cxx(), *self.cxx_args, *objects, "-ldl", "-o", str(output)], cwd=ROOT)
        return output


def build_cpp_program(out_name: str, sources: Sequence[Path], out_dir: Path,
                      std: str = "c++17", defines: Sequence[str] = (),
                      extra_flags: Sequence[str] = ()) -> Path:
    """Builds a C++ program using nx_hal.hpp, with the loader compiled in,
    cached like cbuild's outputs (keyed on compilers, flags, sources, headers)."""
    _require(cxx())
    include = f"-I{ROOT / 'include'}"
    # The loader's compiled-in install prefix is also searched: point it nowhere
    # so that a plugin installed on the machine cannot reach the tests.
    c_args = (*cbuild.WARNING_FLAGS, "-pthread", include,
              '-DNXHAL_LOADER_DATADIR="/nonexistent-nx_hal-prefix"', *extra_flags)
    cxx_args = (f"-std={std}", *CXX_WARNINGS, "-pthread", include,
                *[f"-D{define}" for define in defines], *extra_flags, *map(str, sources))
    built = cbuild._cached(out_name, ["cxx-program", *cxx(), *c_args, *cxx_args],
                           [*sources, *cbuild.loader_sources(), HEADER],
                           _CxxProgramBuilder(c_args, cxx_args))
    return cbuild._publish(built, out_dir)


@pytest.fixture(scope="module")
def run_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """examples/cpp/run_model, defaulting to the committed model and reference."""
    return build_cpp_program("run_model", [EXAMPLE], tmp_path_factory.mktemp("run_model"),
                             defines=[f'NXHAL_EXAMPLES_DIR="{ROOT / "examples"}"'])


@pytest.fixture(scope="module")
def npu_dir() -> Path:
    """The directory of the installed npu plugin (libnxhal_npu.so)."""
    try:
        import nx_hal_npu
    except ImportError as error:
        pytest.skip(f"nx-hal-npu is not installed ({error}): pip install ./plugins/npu")
    library = Path(nx_hal_npu.LIBRARY)
    if not library.is_file():
        pytest.skip(f"nx-hal-npu is installed without its library ({library})")
    return library.parent


# --- The header ------------------------------------------------------------------

# Uses every template of the header so that -Werror sees each instantiation.
HEADER_USE = r"""
#include "nx_hal/nx_hal.hpp"
#include "nx_hal/nx_hal.hpp"  // include guard

int header_use(nxhal::Device& device, nxhal::Executable& exe) {
  nxhal::Options options{{"streams", 2}, {"target", "CPU"}, {"scale", 0.5}, {"fast", true},
                         {"dims", {1, 2}}, {"count", 3u}, {"name", std::string("x")}};
  options.set("limit", uint64_t{7}).set("ratio", 1.5f);
  std::vector<nxhal_option_t> c_options = options.to_c();
  std::vector<float> values(64);
  std::array<int32_t, 4> ints{};
  nxhal::Span<const float> view(values);
  nxhal::Span<int32_t> ints_view(ints);
  nxhal::Span<const int32_t> const_view = ints_view;
  nxhal::Buffer a = device.from_host(values, {1, 64});
  nxhal::Buffer b = device.from_host(const_view, {4});
  nxhal::Buffer b2 = device.from_host(ints_view, {4});
  nxhal::Buffer c = device.from_host(NXHAL_DTYPE_F32, {1, 64}, view, NXHAL_HOST_ZERO_COPY);
  std::vector<float> back = a.to_host<float>();
  a.to_host(nxhal::Span<float>(values));
  std::vector<nxhal::Buffer> outputs = exe.execute({&a, &b});
  std::vector<nxhal::Buffer> outputs2 = exe.execute(outputs);
  nxhal::AsyncOutputs pending = exe.execute_async({&c});
  pending.ready.on_ready([](const nxhal::Error* error) { (void)error; });
  bool done = pending.ready.await_for(std::chrono::milliseconds(1));
  nxhal::Executable again = device.deserialize(exe.serialize());
  nxhal::Executable trusting = device.deserialize(exe.serialize(), nxhal::trusted, options);
  nxhal::Executable compiled = device.compile("onnx", std::string("bytes"), options);
  nxhal::DlpackTensor tensor = a.to_dlpack();
  nxhal::Buffer imported = device.from_dlpack(tensor);
  for (const nxhal::PluginEntry& entry : nxhal::enumerate_plugins()) (void)entry;
  static_assert(nxhal::dtype_of<const float> == NXHAL_DTYPE_F32, "dtype_of");
  static_assert(!std::is_copy_constructible_v<nxhal::Buffer>, "owners are move-only");
  static_assert(std::is_nothrow_move_constructible_v<nxhal::Buffer>, "noexcept moves");
  static_assert(std::is_nothrow_move_assignable_v<nxhal::Executable>, "noexcept moves");
  static_assert(std::is_nothrow_move_constructible_v<nxhal::Client>, "noexcept moves");
  static_assert(std::is_nothrow_move_constructible_v<nxhal::Plugin>, "noexcept moves");
  static_assert(std::is_copy_constructible_v<nxhal::Device>, "devices are views");
  return static_cast<int>(c_options.size() + back.size() + outputs2.size()) + done;
}
"""


def _compilers() -> list[object]:
    """g++ and clang++ ($GXX / $CLANGXX where those name another command), each
    in C++17 and C++20."""
    params: list[object] = []
    for name, variable in (("g++", "GXX"), ("clang++", "CLANGXX")):
        command = os.environ.get(variable) or name
        for std in ("c++17", "c++20"):
            params.append(pytest.param(command, std, id=f"{name}-{std}"))
    return params


@pytest.mark.parametrize(("compiler", "std"), _compilers())
def test_header_compiles_strictly(compiler: str, std: str, tmp_path: Path) -> None:
    _require([compiler])
    first, second = tmp_path / "use.cpp", tmp_path / "main.cpp"
    first.write_text(HEADER_USE)
    # A second translation unit: every function in the header must be inline.
    second.write_text('#include "nx_hal/nx_hal.hpp"\n'
                      "int header_use(nxhal::Device&, nxhal::Executable&);\n"
                      "int main() { return nxhal::code_name(NXHAL_OK)[0] == 'O' ? 0 : 1; }\n")
    objects = []
    for source in (first, second):
        obj = tmp_path / f"{source.stem}.o"
        result = run([compiler, f"-std={std}", *CXX_WARNINGS, f"-I{ROOT / 'include'}", "-c",
                      source, "-o", obj])
        assert result.returncode == 0, result.stderr
        objects.append(obj)
    c_objects = []
    for source in cbuild.loader_sources():
        obj = tmp_path / f"{source.stem}.o"
        built = run([*cbuild.compiler(), "-std=c99", f"-I{ROOT / 'include'}", "-c", source, "-o",
                     obj])
        assert built.returncode == 0, built.stderr
        c_objects.append(obj)
    linked = run([compiler, *objects, *c_objects, "-ldl", "-o", tmp_path / "use"])
    assert linked.returncode == 0, linked.stderr


def test_header_includes_only_the_c_headers_and_std() -> None:
    includes = re.findall(r'^#include\s+([<"][^>"]+[>"])', HEADER.read_text(), re.MULTILINE)
    ours = [name for name in includes if name.startswith('"')]
    assert ours == ['"nx_hal/nx_hal.h"', '"nx_hal/nx_hal_loader.h"']
    others = [name for name in includes if name.startswith("<")]
    # C++ standard headers have no extension; <stdlib.h> and friends are C's.
    assert others and all("." not in name for name in others), others


# --- Error paths, against the host-memory fixture ----------------------------------

ERROR_PATHS = r"""
// Error paths and ownership of nx_hal.hpp, against the host-memory fixture:
//   error_paths FIXTURE.so   (NX_HAL_PLUGIN_PATH holds the fixture's directory)
#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "nx_hal/nx_hal.hpp"

static int failures = 0;
static int checks = 0;
#define CHECK(cond)                                                     \
  do {                                                                  \
    ++checks;                                                           \
    if (!(cond)) {                                                      \
      std::fprintf(stderr, "line %d: CHECK(%s) failed\n", __LINE__, #cond); \
      ++failures;                                                       \
    }                                                                   \
  } while (0)

// Runs `body`; CHECKs that it throws nxhal::Error with `code` and `text` in what().
template <typename Body>
static void expect_error(int line, nxhal_status_code_t code, const char* text, Body body) {
  ++checks;
  try {
    body();
    std::fprintf(stderr, "line %d: no exception (expected %s)\n", line, nxhal::code_name(code));
    ++failures;
  } catch (const nxhal::Error& error) {
    std::printf("line %d: %s\n", line, error.what());
    if (error.code() != code || std::strstr(error.what(), nxhal::code_name(code)) == nullptr ||
        std::strstr(error.what(), text) == nullptr) {
      std::fprintf(stderr, "line %d: got '%s', expected %s with '%s'\n", line, error.what(),
                   nxhal::code_name(code), text);
      ++failures;
    }
  }
}
#define EXPECT_ERROR(code, text, body) expect_error(__LINE__, code, text, [&] { body; })

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  const std::string fixture = argv[1];

  // --- Plugins: bad path, no such name, enumerate ---
  EXPECT_ERROR(NXHAL_UNAVAILABLE, "cannot load plugin",
               nxhal::Plugin::open("/nonexistent/libnxhal_absent.so"));
  EXPECT_ERROR(NXHAL_NOT_FOUND, "libnxhal_absent.so", nxhal::Plugin::open_by_name("absent"));
  EXPECT_ERROR(NXHAL_INVALID_ARGUMENT, "plugin path", nxhal::Plugin::open(""));
  std::vector<nxhal::PluginEntry> entries = nxhal::enumerate_plugins();
  CHECK(entries.size() == 1 && entries[0].name == "fixture_hostmem" && entries[0].path == fixture);

  nxhal::Plugin plugin = nxhal::Plugin::open_by_name("fixture_hostmem");
  CHECK(plugin.path() == fixture);
  CHECK(plugin.info().name == "fixture-hostmem");
  CHECK(plugin.abi_major() == NXHAL_ABI_VERSION_MAJOR);

  // --- Clients: typed options, rejected options ---
  EXPECT_ERROR(NXHAL_INVALID_ARGUMENT, "bogus", plugin.create_client({{"bogus", 1}}));
  EXPECT_ERROR(NXHAL_INVALID_ARGUMENT, "device_count",
               plugin.create_client({{"device_count", "two"}}));
  EXPECT_ERROR(NXHAL_UNAVAILABLE, "unavailable", plugin.create_client({{"fail_create", true}}));
  EXPECT_ERROR(NXHAL_INVALID_ARGUMENT, "does not fit in int64",
               nxhal::Option("device_count", UINT64_MAX));
  nxhal::Client client = plugin.create_client({{"device_count", 2}, {"compat_key", "key-a"}});
  CHECK(client.device_count() == 2);
  CHECK(client.diagnostics().find("key-a") != std::string::npos);
  EXPECT_ERROR(NXHAL_INVALID_ARGUMENT, "out of range", client.device(5));

  // --- Devices ---
  nxhal::Device device = client.device(0);
  nxhal::DeviceInfo info = device.info();
  CHECK(info.kind == NXHAL_DEVICE_CPU);
  CHECK(info.formats.size() == 1 && info.formats[0] == "fixture-elementwise");
  CHECK(info.accepts("fixture-elementwise") && !info.accepts("onnx"));
  CHECK(info.compat_key == "key-a");
  CHECK(!device.attributes().empty());

  // --- Compile and I/O info ---
  EXPECT_ERROR(NXHAL_INVALID_ARGUMENT, "format 'onnx' is not accepted",
               device.compile("onnx", std::string("not a model")));
  EXPECT_ERROR(NXHAL_INVALID_ARGUMENT, "unknown op", device.compile("fixture-elementwise",
                                                                    std::string("pow f32 4")));
  nxhal::Executable add = device.compile("fixture-elementwise", std::string("add f32 4"));
  std::vector<nxhal::IoInfo> inputs = add.inputs();
  CHECK(inputs.size() == 2 && inputs[0].dtype == NXHAL_DTYPE_F32 &&
        inputs[0].shape == nxhal::Shape{4});
  CHECK(add.outputs().size() == 1 && add.outputs()[0].name == "out");

  // --- Buffers and execute: right and wrong inputs ---
  std::vector<float> x{1, 2, 3, 4}, y{10, 20, 30, 40};
  nxhal::Buffer bx = device.from_host(x, {4});
  nxhal::Buffer by = device.from_host(y, {4});
  CHECK(bx.info().shape == nxhal::Shape{4} && bx.info().size_bytes == 16);
  CHECK(device.memory_stats().bytes_in_use >= 32);
  std::vector<nxhal::Buffer> out = add.execute({&bx, &by});
  CHECK(out.size() == 1 && (out[0].to_host<float>() == std::vector<float>{11, 22, 33, 44}));
  EXPECT_ERROR(NXHAL_INVALID_ARGUMENT, "f32", out[0].to_host<int32_t>());
  std::vector<int32_t> ints{1, 2, 3, 4};
  nxhal::Buffer wrong_dtype = device.from_host(ints, {4});
  EXPECT_ERROR(NXHAL_INVALID_ARGUMENT, "dtype i32", add.execute({&bx, &wrong_dtype}));
  nxhal::Buffer wrong_shape = device.from_host(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_ERROR(NXHAL_INVALID_ARGUMENT, "rank", add.execute({&wrong_shape, &by}));
  EXPECT_ERROR(NXHAL_INVALID_ARGUMENT, "takes 2 inputs", add.execute({&bx}));
  EXPECT_ERROR(NXHAL_INVALID_ARGUMENT, "size_bytes", device.from_host(x, {5}));
  EXPECT_ERROR(NXHAL_INVALID_ARGUMENT, "null or empty", add.execute({&bx, nullptr}));
  nxhal::Buffer on_other = client.device(1).from_host(x, {4});
  EXPECT_ERROR(NXHAL_INVALID_ARGUMENT, "device", add.execute({&bx, &on_other}));

  // --- Asynchronous: events, callbacks ---
  nxhal::AsyncOutputs pending = add.execute_async({&bx, &by});
  pending.ready.await();
  CHECK(pending.ready.ready());
  std::atomic<int> called{0};
  pending.ready.on_ready([&](const nxhal::Error* error) { called = error == nullptr ? 1 : 2; });
  CHECK(called == 1);
  std::vector<float> copy(4);
  nxhal::Event copying = pending.outputs[0].to_host_async(copy.data(), copy.size() * sizeof(float));
  CHECK(copying.await_for(std::chrono::seconds(10)));
  CHECK((copy == std::vector<float>{11, 22, 33, 44}));

  // --- Serialize / deserialize ---
  std::vector<uint8_t> blob = add.serialize();
  nxhal::Executable loaded = device.deserialize(blob);
  CHECK((loaded.execute({&bx, &by})[0].to_host<float>() == std::vector<float>{11, 22, 33, 44}));
  EXPECT_ERROR(NXHAL_INVALID_ARGUMENT, "refusing to load a serialized executable",
               device.deserialize(std::string("junk")));
  EXPECT_ERROR(NXHAL_INVALID_ARGUMENT, "not a serialized",
               device.deserialize(std::string("junk"), nxhal::trusted));
  nxhal::Client other = plugin.create_client({{"compat_key", "key-b"}});
  EXPECT_ERROR(NXHAL_FAILED_PRECONDITION, "key-a", other.device(0).deserialize(blob));

  // --- DLPack round trip ---
  nxhal::DlpackTensor tensor = bx.to_dlpack();
  CHECK(tensor && tensor.get()->dl_tensor.ndim == 1);
  nxhal::Buffer imported = device.from_dlpack(tensor);
  CHECK(!tensor && (imported.to_host<float>() == x));

  // --- Moved-from owners are empty, safe to use (throws) and to destroy ---
  nxhal::Buffer moved = std::move(bx);
  CHECK(!bx && bx.get() == nullptr && moved);
  EXPECT_ERROR(NXHAL_INVALID_ARGUMENT, "moved from", bx.info());
  EXPECT_ERROR(NXHAL_INVALID_ARGUMENT, "null or empty", add.execute({&bx, &by}));
  bx = std::move(moved);  // move-assign into a moved-from owner
  CHECK(bx && !moved);
  moved = device.from_host(y, {4});
  moved = std::move(by);  // move-assign over a live buffer frees it
  CHECK(!by && (moved.to_host<float>() == y));
  nxhal::Executable add2 = std::move(add);
  EXPECT_ERROR(NXHAL_INVALID_ARGUMENT, "moved from", add.inputs());
  nxhal::Event event2 = std::move(copying);
  EXPECT_ERROR(NXHAL_INVALID_ARGUMENT, "moved from", copying.await());
  nxhal::Client client2 = std::move(other);
  EXPECT_ERROR(NXHAL_INVALID_ARGUMENT, "moved from", other.device_count());
  nxhal::Plugin plugin2 = std::move(plugin);
  EXPECT_ERROR(NXHAL_INVALID_ARGUMENT, "moved from", plugin.info());
  nxhal_buffer_t* raw = moved.release();
  CHECK(!moved && raw != nullptr);
  client.api()->buffer_destroy(raw);

  // --- Lifetimes: buffers keep their client; devices do not ---
  nxhal::Buffer survivor;
  nxhal::Device orphan;
  {
    nxhal::Client scoped = plugin2.create_client();
    orphan = scoped.device(0);
    survivor = orphan.from_host(x, {4});
  }
  CHECK((survivor.to_host<float>() == x));  // the client lives while the buffer does
  survivor.reset();
  EXPECT_ERROR(NXHAL_FAILED_PRECONDITION, "client was destroyed", orphan.info());
  EXPECT_ERROR(NXHAL_FAILED_PRECONDITION, "never set", nxhal::Device().info());

  // --- Several threads execute one executable ---
  std::vector<std::thread> threads;
  std::atomic<int> right{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 50; ++i) {
        if (add2.execute({&bx, &bx})[0].to_host<float>() ==
            std::vector<float>{2, 4, 6, 8}) {
          ++right;
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  CHECK(right == 200);

  std::printf("%d checks, %d failed\n", checks, failures);
  return failures == 0 ? 0 : 1;
}
"""


@pytest.fixture(scope="module")
def error_paths(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The error-path program, under AddressSanitizer and UBSan."""
    out = tmp_path_factory.mktemp("error_paths")
    source = out / "error_paths.cpp"
    source.write_text(ERROR_PATHS)
    return build_cpp_program("error_paths", [source], out, extra_flags=SANITIZE_FLAGS)


def test_header_error_paths_and_ownership(error_paths: Path, hostmem_dir: Path) -> None:
    fixture = hostmem_dir / cbuild.fixture_library_name("hostmem")
    result = run([error_paths, fixture], env=env_with_path(hostmem_dir))
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"^\d+ checks, 0 failed$", result.stdout, re.MULTILINE), result.stdout
    # The codes' names reach what().
    assert "UNAVAILABLE: cannot load plugin '/nonexistent/libnxhal_absent.so'" in result.stdout
    assert re.search(r"nxhal_plugin_open_by_name: NOT_FOUND: .*libnxhal_absent\.so", result.stdout)
    assert re.search(r"executable_execute: INVALID_ARGUMENT: input '\w+' has dtype i32, "
                     r"expected f32", result.stdout), result.stdout


# --- The example ------------------------------------------------------------------


def _max_abs_error(stdout: str) -> float:
    match = re.search(r"^max abs error: (\S+) ", stdout, re.MULTILINE)
    assert match, stdout
    return float(match.group(1))


def test_run_model_on_npu_plugin(run_model: Path, npu_dir: Path) -> None:
    result = run([run_model], env=env_with_path(npu_dir))
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"^device: npu:.+ \((cpu|npu|gpu)\)$", result.stdout, re.MULTILINE)
    assert re.search(r"^latency: [0-9.]+ ms", result.stdout, re.MULTILINE)
    assert "result: probabilities [1,10]" in result.stdout
    assert _max_abs_error(result.stdout) <= TOLERANCE


def test_run_model_reports_a_mismatch(run_model: Path, npu_dir: Path, tmp_path: Path) -> None:
    # The same reference with one expected probability off by 1e-3.
    lines = REFERENCE.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("output ")) + 1
    values = lines[at].split()
    values[0] = repr(float(values[0]) + 1e-3)
    lines[at] = " ".join(values)
    tampered = tmp_path / "tampered.txt"
    tampered.write_text("\n".join(lines) + "\n")
    result = run([run_model, MODEL, tampered], env=env_with_path(npu_dir))
    assert result.returncode == EXIT_MISMATCH, result.stdout + result.stderr
    assert "MISMATCH" in result.stdout
    assert _max_abs_error(result.stdout) == pytest.approx(1e-3, rel=1e-2)


def test_run_model_without_an_onnx_device(run_model: Path, hostmem_dir: Path) -> None:
    result = run([run_model], env=env_with_path(hostmem_dir))
    assert result.returncode == EXIT_NO_DEVICE, result.stdout + result.stderr
    assert re.search(r"skipped fixture_hostmem:.*\(cpu\): does not accept onnx "
                     r"\(accepts: fixture-elementwise\)", result.stderr), result.stderr
    assert "no device accepts onnx" in result.stderr


def test_run_model_without_plugins(run_model: Path, tmp_path: Path) -> None:
    result = run([run_model], env=env_with_path(tmp_path))
    assert result.returncode == EXIT_NO_DEVICE
    assert "no plugins found (searched NX_HAL_PLUGIN_PATH" in result.stderr


def test_run_model_skips_an_unloadable_plugin(run_model: Path, tmp_path: Path) -> None:
    (tmp_path / "libnxhal_broken.so").write_text("not a library")
    result = run([run_model], env=env_with_path(tmp_path))
    assert result.returncode == EXIT_NO_DEVICE
    assert re.search(r"skipped plugin broken \(.*libnxhal_broken.so\): nxhal_plugin_open: "
                     r"UNAVAILABLE", result.stderr), result.stderr


def test_run_model_bad_reference(run_model: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_text("input image f32 2 1 64\n1 2 3\n")
    result = run([run_model, MODEL, bad], env=env_with_path(tmp_path))
    assert result.returncode == EXIT_USAGE
    assert "tensor 'image' needs 64 values" in result.stderr
    missing = run([run_model, tmp_path / "absent.onnx"], env=env_with_path(tmp_path))
    assert missing.returncode == EXIT_USAGE and "cannot read model" in missing.stderr


def test_example_cmake_project_builds(tmp_path: Path) -> None:
    """examples/cpp as a user builds it, against the SDK the core package ships."""
    cmake = shutil.which("cmake")
    if cmake is None:
        pytest.skip("cmake not found")
    from nx_hal import sdk

    try:
        cmake_dir = sdk.get_cmake_dir()
    except sdk.SdkMissingError as error:
        pytest.skip(f"no nx_hal CMake package next to the package: {error}")
    build = tmp_path / "build"
    configure = run([cmake, "-S", ROOT / "examples" / "cpp", "-B", build,
                     f"-Dnx_hal_DIR={cmake_dir}", "-DCMAKE_BUILD_TYPE=Release"], timeout=300)
    assert configure.returncode == 0, configure.stdout + configure.stderr
    built = run([cmake, "--build", build], timeout=300)
    assert built.returncode == 0, built.stdout + built.stderr
    usage = run([build / "run_model", "--help"])
    assert usage.returncode == 0 and "usage:" in usage.stderr

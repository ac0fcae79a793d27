"""StableHLO written for the backend's own version (the core's reserialize
policy, through torch-mlir): a portable artifact newer than the backend's
StableHLO is written again for it, text the backend rejects is retried that
way, and what the backend's version cannot express is a clear error."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from conftest import PROGRAMS

nx_hal = pytest.importorskip("nx_hal")
pytest.importorskip("torch_mlir")
from nx_hal import programs  # noqa: E402
from nx_hal.onnx import convert  # noqa: E402

# exp with a result-accuracy attribute: VHLO exponential_v2, StableHLO 1.9.0 and newer
EXP_HIGHEST = """func.func public @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.exponential %x {result_accuracy = #stablehlo.result_accuracy<mode = #stablehlo.result_accuracy_mode<HIGHEST>>} : tensor<4xf32>
  return %0 : tensor<4xf32>
}
"""


def _artifact(text: str, version: str) -> bytes:
    from torch_mlir import ir
    from torch_mlir._mlir_libs import _stablehlo as stablehlo

    context = ir.Context()
    stablehlo.register_dialect(context)
    with context:
        return bytes(stablehlo.serialize_portable_artifact(ir.Module.parse(text), version))


def _newest() -> str:
    from torch_mlir._mlir_libs import _stablehlo as stablehlo

    return str(stablehlo.get_current_version())


@pytest.fixture()
def seen(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """The program bytes each plugin compile received."""
    received: list[bytes] = []
    original = nx_hal.Device._compile

    def spy(self: Any, prog: Any, options: Any) -> Any:
        received.append(prog.data)
        return original(self, prog, options)

    monkeypatch.setattr(nx_hal.Device, "_compile", spy)
    return received


def _add_inputs() -> tuple[np.ndarray, np.ndarray]:
    return np.array([1, 2, 3, 4], np.float32), np.array([0.5, -1, 8, 0], np.float32)


def test_newer_artifact_is_written_for_the_backend(devices: list[Any], seen: list[bytes]) -> None:
    dev = devices[0]
    backend = dev.attributes["stablehlo_version"]
    newest = _newest()
    if programs.version_tuple(newest) <= programs.version_tuple(backend):
        pytest.skip(f"torch-mlir's StableHLO {newest} is not newer than the backend's {backend}")
    artifact = _artifact((PROGRAMS / "add.mlir").read_text(), newest)
    assert programs.stablehlo_artifact_version(artifact) == newest
    exe = dev.compile(artifact, "stablehlo", cache=False)
    assert [programs.stablehlo_artifact_version(p) for p in seen] == [backend]
    x, y = _add_inputs()
    np.testing.assert_array_equal(exe(x, y)[0].to_numpy(), x + y)
    # "never" hands the plugin the bytes as given
    seen.clear()
    exe = dev.compile(artifact, "stablehlo", cache=False, reserialize="never")
    assert seen == [artifact]
    np.testing.assert_array_equal(exe(x, y)[0].to_numpy(), x + y)


def test_text_is_passed_as_is_and_retried_when_unparsed(devices: list[Any], seen: list[bytes],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    dev = devices[0]
    text = (PROGRAMS / "add.mlir").read_bytes()
    dev.compile(text, "stablehlo", cache=False)
    assert seen == [text]  # no rewrite (and no torch-mlir child) when the backend takes it
    # A backend whose parser predates the text: rejected as text, read as an artifact.
    original = nx_hal.Device._compile  # the spy: it records what arrives
    seen.clear()

    def old_parser(self: Any, prog: Any, options: Any) -> Any:
        if programs.stablehlo_artifact_version(prog.data) is None:
            seen.append(prog.data)
            # What the plugin reports for a program PJRT could not parse (ABI 1.2).
            raise nx_hal.InvalidProgramError("error: custom op 'stablehlo.add' is unknown; "
                                             "Failed to parse using StableHLO v1.0.0", plugin="tpu")
        return original(self, prog, options)

    monkeypatch.setattr(nx_hal.Device, "_compile", old_parser)
    exe = dev.compile(text, "stablehlo", cache=False)
    assert [programs.stablehlo_artifact_version(p) for p in seen] == [None, dev.attributes["stablehlo_version"]]
    x, y = _add_inputs()
    np.testing.assert_array_equal(exe(x, y)[0].to_numpy(), x + y)
    # Text torch-mlir cannot read never reaches the backend: it is rejected first.
    with pytest.raises(nx_hal.InvalidArgumentError,
                       match=r"rejected before the backend's parser \(malformed\).*cannot read the program"):
        dev.compile(b"module { func.func @main( }", "stablehlo", cache=False)
    # An error that is not INVALID_PROGRAM is not retried, whatever its words.
    def other_error(self: Any, prog: Any, options: Any) -> Any:
        seen.append(prog.data)
        raise nx_hal.InvalidArgumentError("Failed to parse the options", plugin="tpu")

    monkeypatch.setattr(nx_hal.Device, "_compile", other_error)
    seen.clear()
    with pytest.raises(nx_hal.InvalidArgumentError, match="Failed to parse the options"):
        dev.compile(text, "stablehlo", cache=False)
    assert seen == [text]
    # Errors other than parsing are not retried.
    monkeypatch.undo()
    seen.clear()
    with pytest.raises(nx_hal.InvalidArgumentError, match="num_replicas=64") as error:
        dev.compile(text, "stablehlo", cache=False, num_replicas=64)
    assert "failed too" not in str(error.value)


def test_what_the_backend_version_cannot_express(devices: list[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    dev = devices[0]
    exe = dev.compile(EXP_HIGHEST, "stablehlo", cache=False, reserialize="always")
    x = np.array([0, 1, -1, 2], np.float32)
    np.testing.assert_allclose(exe(x)[0].to_numpy(), np.exp(x), rtol=1e-6)
    # The same program for a backend that reads StableHLO 1.5.0 only.
    monkeypatch.setitem(dev.attributes, "stablehlo_version", "1.5.0")
    with pytest.raises(nx_hal.InvalidArgumentError, match=r"StableHLO 1\.5\.0.*exponential"):
        dev.compile(EXP_HIGHEST, "stablehlo", cache=False, reserialize="always")
    with pytest.raises(nx_hal.InvalidArgumentError, match="option 'reserialize'"):
        dev.compile(EXP_HIGHEST, "stablehlo", cache=False, reserialize="sometimes")


def test_reserialize_stablehlo_errors() -> None:
    with pytest.raises(convert.ConversionError) as malformed:
        convert.reserialize_stablehlo(b"not mlir at all", "1.13.3")
    assert malformed.value.reason == "malformed"
    with pytest.raises(convert.ConversionError, match="newer than the current version"):
        convert.reserialize_stablehlo(b"ML\xefR\x00StableHLO_v1.2.3\x00junk", "1.13.3")
    with pytest.raises(nx_hal.InvalidArgumentError, match="not a StableHLO version"):
        convert.reserialize_stablehlo(b"module {}", "latest")
    result = convert.reserialize_stablehlo((PROGRAMS / "add.mlir").read_bytes(), "1.0.0")
    assert programs.stablehlo_artifact_version(result.module) == "1.0.0"
    assert result.stablehlo_ops == {"stablehlo.add": 1}


def test_unparsable_program_is_its_own_code(devices: list[Any]) -> None:
    """The plugin tells a program PJRT cannot parse apart by its status code
    (INVALID_PROGRAM, a kind of INVALID_ARGUMENT), so the core never reads
    PJRT's words; a program that parses but cannot compile stays
    INVALID_ARGUMENT."""
    dev = devices[0]
    unknown_op = (b"func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {\n"
                  b"  %0 = stablehlo.frobnicate %a : tensor<4xf32>\n  return %0 : tensor<4xf32>\n}\n")
    for garbage in (unknown_op, b"ML\xefR\x00garbage"):
        with pytest.raises(nx_hal.InvalidProgramError, match=r"(?s)\[tpu\] INVALID_PROGRAM: .*parse"):
            dev.compile(garbage, "stablehlo", cache=False, verify="off")
    text = (PROGRAMS / "add.mlir").read_bytes()
    with pytest.raises(nx_hal.InvalidArgumentError) as error:
        dev.compile(text, "stablehlo", cache=False, num_replicas=64)
    assert not isinstance(error.value, nx_hal.InvalidProgramError)

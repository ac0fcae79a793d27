"""StableHLO verification before the backend's parser (nx_hal.onnx.verify).

Also a fuzzer: ``python -m tests.test_verify --count 3000 [--unchecked]``
compiles that many mutants of a real bytecode program (and as many of text
programs with ``--text``) on tpu:cpu, each in a child process, and prints
the crash and hang counts; ``--unchecked`` skips the verification (the
behaviour before it existed).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import select
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from nx_hal import InvalidArgumentError, UnavailableError
from nx_hal.onnx import convert, verify
from nx_hal.store import Store
from tests.store_util import entries, foreign_put

PROGRAMS = Path(__file__).resolve().parent.parent / "plugins" / "tpu" / "tests" / "programs"
BYTECODE = PROGRAMS / "matmul_sum.mlirbc"
TEXTS = ("add.mlir", "matmul.mlir", "matmul_sum.mlir", "mlp.mlir", "scalar_i32.mlir")
_HAS_TORCH_MLIR = convert.converter_available() is None
needs_torch_mlir = pytest.mark.skipif(not _HAS_TORCH_MLIR, reason="needs torch-mlir (nx-hal[onnx])")


# ---------------------------------------------------------------- mutants

_INTERESTING = (0x00, 0x01, 0x7F, 0x80, 0xFF, 0x3F, 0x40, 0xFE)
_MLIR_BITS = (b"{", b"}", b"(", b")", b"<", b">", b"x", b":", b",", b"%", b"@", b"0", b"-1",
              b"99999999999", b"tensor<", b"f32", b"i64", b"\"", b"\n", b"stablehlo.")


def mutate(data: bytes, rng: random.Random, *, text: bool = False) -> bytes:
    """One to four random edits of ``data``: byte flips, interesting values,
    inserts, deletes, duplicated ranges, truncation (for text, also MLIR
    tokens spliced in)."""
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        if not out:
            break
        at = rng.randrange(len(out))
        kind = rng.randrange(7 if text else 6)
        if kind == 0:
            out[at] ^= 1 << rng.randrange(8)
        elif kind == 1:
            out[at] = rng.choice(_INTERESTING)
        elif kind == 2:
            out[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        elif kind == 3:
            del out[at:at + rng.randint(1, 16)]
        elif kind == 4:
            span = out[at:at + rng.randint(1, 32)]
            out[rng.randrange(len(out)):0] = span
        elif kind == 5:
            if rng.random() < 0.3:
                del out[at:]
            else:
                out[at] = rng.randrange(256)
        else:
            out[at:at] = rng.choice(_MLIR_BITS)
    return bytes(out)


def mutants(count: int, seed: int, *, text: bool = False) -> Iterator[bytes]:
    rng = random.Random(seed)
    sources = [(PROGRAMS / name).read_bytes() for name in TEXTS] if text else [BYTECODE.read_bytes()]
    for _ in range(count):
        yield mutate(rng.choice(sources), rng, text=text)


# ---------------------------------------------------------------- compile in a child

# Compiles the programs named on stdin one by one on tpu:cpu and answers one
# line each; dies with the process when a program crashes it.
_CHILD = r"""
import os, sys, nx_hal
verify = "off" if os.environ.get("NXHAL_FUZZ_UNCHECKED") == "1" else "auto"
dev = nx_hal.device("tpu:cpu")
print("ready", flush=True)
for line in sys.stdin:
    path = line.strip()
    try:
        dev.compile(open(path, "rb").read(), format="stablehlo", cache=False, verify=verify)
        verdict = "ok"
    except nx_hal.NxHalError as exc:
        verdict = exc.code
    except Exception as exc:
        verdict = "python:" + type(exc).__name__
    print(verdict, flush=True)
"""


def _readline(proc: subprocess.Popen[bytes], timeout: float) -> str | None:
    """A line from the child, "" at EOF (it died), None on time-out."""
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    if not ready:
        return None
    return proc.stdout.readline().decode(errors="replace").strip()


def compile_in_children(programs: Sequence[bytes], *, unchecked: bool = False, timeout: float = 60,
                        outcomes: list[str] | None = None) -> Counter[str]:
    """Outcome counts: "ok", an error code, "crash" (the child died) or "hang";
    each program's outcome is appended to ``outcomes`` when given."""
    counts: Counter[str] = Counter()
    env = dict(os.environ, NXHAL_FUZZ_UNCHECKED="1" if unchecked else "0",
               PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parent.parent)]
                                          + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    with tempfile.TemporaryDirectory(prefix="nxhal-fuzz-") as tmp:
        paths = []
        for index, data in enumerate(programs):
            path = Path(tmp) / f"{index}.mlir"
            path.write_bytes(data)
            paths.append(path)
        proc: subprocess.Popen[bytes] | None = None
        for path in paths:
            if proc is None:
                proc = subprocess.Popen([sys.executable, "-c", _CHILD], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
                if _readline(proc, 120) != "ready":
                    raise RuntimeError("the fuzzing child did not start (is nx-hal-tpu installed?)")
            assert proc.stdin is not None
            proc.stdin.write(f"{path}\n".encode())
            proc.stdin.flush()
            answer = _readline(proc, timeout)
            outcome = answer or ("hang" if answer is None else "crash")
            counts[outcome] += 1
            if outcomes is not None:
                outcomes.append(outcome)
            if answer:
                continue
            proc.kill()
            proc.wait()
            proc = None
        if proc is not None:
            assert proc.stdin is not None
            proc.stdin.close()
            proc.wait(timeout=30)
    return counts


def _xla_cpu() -> Any:
    pytest.importorskip("nx_hal_tpu", reason="the tpu plugin is not installed")
    import nx_hal

    try:
        return nx_hal.device("tpu:cpu")
    except nx_hal.NxHalError as exc:
        pytest.skip(f"no XLA CPU device: {exc}")


# ---------------------------------------------------------------- verdicts


@pytest.fixture(autouse=True)
def _fresh_memory() -> Iterator[None]:
    verify.clear_memory()
    yield
    verify.clear_memory()


@needs_torch_mlir
@pytest.mark.parametrize("name", ["matmul_sum.mlir", "matmul_sum.mlirbc", "add.mlir"])
def test_good_programs_verify(name: str, tmp_path: Path) -> None:
    verdict = verify.stablehlo((PROGRAMS / name).read_bytes(), cache_dir=tmp_path)
    assert verdict.ok and verdict.reason == "ok" and not verdict.cached
    assert verdict.unverified_ops == ()


@needs_torch_mlir
def test_bad_text_is_malformed_and_named(tmp_path: Path) -> None:
    verdict = verify.stablehlo((PROGRAMS / "malformed.mlir").read_bytes(), cache_dir=tmp_path)
    assert not verdict.ok and verdict.reason == "malformed"
    assert "expected ':'" in verdict.message


@needs_torch_mlir
def test_program_that_fails_the_verifier_is_malformed(tmp_path: Path) -> None:
    # Parses, but the result type contradicts the operands'.
    text = b"""func.func @main(%a: tensor<2xf32>, %b: tensor<2xf32>) -> tensor<3xf32> {
  %0 = stablehlo.add %a, %b : (tensor<2xf32>, tensor<2xf32>) -> tensor<3xf32>
  return %0 : tensor<3xf32>
}"""
    verdict = verify.stablehlo(text, cache_dir=tmp_path)
    assert verdict.reason == "malformed", verdict
    assert "stablehlo.add" in verdict.message or "op" in verdict.message


@needs_torch_mlir
def test_damaged_bytecode_is_malformed(tmp_path: Path) -> None:
    data = BYTECODE.read_bytes()
    verdict = verify.stablehlo(data[: len(data) // 2], cache_dir=tmp_path)
    assert verdict.reason in ("malformed", "crash") and not verdict.ok


@needs_torch_mlir
def test_ops_of_other_dialects_in_generic_form_are_listed_not_verified(tmp_path: Path) -> None:
    text = b"""func.func @main(%a: tensor<2xf32>) -> tensor<2xf32> {
  %0 = "chlo.erf"(%a) : (tensor<2xf32>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}"""
    verdict = verify.stablehlo(text, cache_dir=tmp_path)
    assert verdict.ok and verdict.unverified_ops == ("chlo.erf",)


@needs_torch_mlir
def test_custom_syntax_of_unknown_dialect_is_unverifiable(tmp_path: Path) -> None:
    text = b"""func.func @main(%a: tensor<2xf32>) -> tensor<2xf32> {
  %0 = chlo.erf %a : tensor<2xf32> -> tensor<2xf32>
  return %0 : tensor<2xf32>
}"""
    verdict = verify.stablehlo(text, cache_dir=tmp_path)
    assert verdict.reason == "unverifiable" and "chlo.erf" in verdict.message
    assert verify.check_stablehlo(text, cache_dir=tmp_path) is None  # "auto" passes it on
    with pytest.raises(InvalidArgumentError, match="unverifiable"):
        verify.check_stablehlo(text, policy="require", cache_dir=tmp_path)
    # An op a dialect torch-mlir has does not know is no excuse: malformed.
    typo = text.replace(b"chlo.erf", b"stablehlo.erfx")
    assert verify.stablehlo(typo, cache_dir=tmp_path).reason == "malformed"


@needs_torch_mlir
def test_verdicts_are_cached_in_memory_and_on_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    good = (PROGRAMS / "add.mlir").read_bytes()
    bad = (PROGRAMS / "malformed.mlir").read_bytes()
    first_good = verify.stablehlo(good, cache_dir=tmp_path)
    first_bad = verify.stablehlo(bad, cache_dir=tmp_path)
    tm = convert._torch_mlir_version()
    files = sorted(p.name for p in entries(tmp_path, "verdicts"))
    assert files == sorted([verify._key(first_good.digest, tm), verify._key(first_bad.digest, tm)])
    assert oct((tmp_path / "verdicts").stat().st_mode & 0o777) == "0o700"

    def no_child(*args: object, **kwargs: object) -> object:
        raise AssertionError("a cached verdict must not ask the child")

    monkeypatch.setattr(verify, "_ask_child", no_child)
    assert verify.stablehlo(good, cache_dir=tmp_path) is first_good  # memory
    verify.clear_memory()
    again = verify.stablehlo(bad, cache_dir=tmp_path)  # disk
    assert again.cached and again.reason == "malformed" and again.message == first_bad.message


@needs_torch_mlir
def test_foreign_or_torn_disk_verdicts_are_ignored(tmp_path: Path) -> None:
    bad = (PROGRAMS / "malformed.mlir").read_bytes()
    digest = hashlib.sha256(bad).hexdigest()
    tm = convert._torch_mlir_version()
    ok = {"reason": "ok", "message": "", "unverified_ops": []}
    # "ok" from another torch-mlir (another key), and "ok" planted under
    # this one's key by another user (another secret): neither is taken.
    assert Store(tmp_path).put_json("verdicts", verify._key(digest, "0.0"), ok)
    planted = foreign_put(tmp_path, "verdicts", verify._key(digest, tm), b"", ok, tmp_path / "other")
    verify.clear_memory()
    assert verify.stablehlo(bad, cache_dir=tmp_path).reason == "malformed"
    planted.write_bytes(planted.read_bytes()[:-1])  # our own verdict (it replaced the planted one), torn
    verify.clear_memory()
    assert verify.stablehlo(bad, cache_dir=tmp_path).reason == "malformed"


@needs_torch_mlir
def test_verdicts_in_a_directory_others_can_write_are_not_trusted(tmp_path: Path) -> None:
    folder = tmp_path / "verdicts"
    folder.mkdir(mode=0o777)
    folder.chmod(0o777)
    good = (PROGRAMS / "add.mlir").read_bytes()
    verify.stablehlo(good, cache_dir=tmp_path)
    assert not list(folder.rglob("*"))


@needs_torch_mlir
def test_crash_of_the_parser_is_a_verdict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def crash(*args: object, **kwargs: object) -> object:
        raise convert.ConversionError("converter crashed (SIGSEGV) in parse: ...", reason="crash")

    class Crashing:
        closed = False
        run = staticmethod(crash)

    monkeypatch.setattr(convert, "shared_worker", lambda: Crashing())
    verdict = verify.stablehlo(b"module {}\n// crashes", cache_dir=tmp_path)
    assert verdict.reason == "crash" and "SIGSEGV" in verdict.message
    with pytest.raises(InvalidArgumentError, match=r"rejected before the backend's parser \(crash\).*SIGSEGV"):
        verify.check_stablehlo(b"module {}\n// crashes", cache_dir=tmp_path)


def test_without_torch_mlir_auto_passes_once_warned_and_require_refuses(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(convert, "converter_available", lambda: "needs torch-mlir")
    monkeypatch.setattr(verify, "_warned", False)
    with pytest.warns(RuntimeWarning, match="unverified: needs torch-mlir"):
        assert verify.check_stablehlo(b"module {}") is None
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert verify.check_stablehlo(b"module { }") is None  # said once only
    with pytest.raises(UnavailableError, match="verify='require'"):
        verify.check_stablehlo(b"module {}", policy="require")


# ---------------------------------------------------------------- Device.compile


@needs_torch_mlir
def test_compile_rejects_bad_text_before_the_plugin(monkeypatch: pytest.MonkeyPatch) -> None:
    dev = _xla_cpu()
    calls: list[str] = []
    real = type(dev)._compile

    def counting(self: Any, prog: Any, options: Any) -> Any:
        calls.append(prog.format)
        return real(self, prog, options)

    monkeypatch.setattr(type(dev), "_compile", counting)
    bad = (PROGRAMS / "malformed.mlir").read_bytes()
    for _ in range(2):
        with pytest.raises(InvalidArgumentError, match=r"rejected before the backend's parser \(malformed\)"):
            dev.compile(bad, format="stablehlo", cache=False)
    assert calls == []  # neither the plugin nor a re-serialising child saw it
    dev.compile((PROGRAMS / "add.mlir").read_bytes(), format="stablehlo", cache=False)
    assert calls == ["stablehlo"]


def test_compile_verify_option_is_checked() -> None:
    dev = _xla_cpu()
    with pytest.raises(InvalidArgumentError, match="option 'verify'"):
        dev.compile((PROGRAMS / "add.mlir").read_bytes(), format="stablehlo", verify="no")


@needs_torch_mlir
def test_fuzzed_programs_never_crash_compile() -> None:
    """Eleven known crashers and a few hundred other mutants of real programs,
    compiled in children: none may crash or hang one (the full 3,000 run is
    ``python -m tests.test_verify``)."""
    _xla_cpu()
    started = time.monotonic()
    # Mutants of ``python -m tests.test_verify`` (seed 2026) that crashed XLA's
    # parser on tpu:cpu (SIGSEGV, SIGABRT) before verification existed.
    known = list(mutants(3000, seed=2026))
    crashers = [known[i] for i in (44, 540, 779, 782, 811, 1089, 1455, 2101, 2303, 2310, 2601)]
    programs = crashers + list(mutants(200, seed=11)) + list(mutants(100, seed=12, text=True))
    counts = compile_in_children(programs)
    assert counts["crash"] == 0 and counts["hang"] == 0, counts
    assert counts["INVALID_ARGUMENT"] > len(programs) // 2, counts  # the mutants were mostly damaged
    assert time.monotonic() - started < 300


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--text", action="store_true", help="mutate the text programs instead")
    parser.add_argument("--unchecked", action="store_true", help="skip verification (the old behaviour)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    counts = compile_in_children(list(mutants(args.count, args.seed, text=args.text)), unchecked=args.unchecked)
    kind = "text" if args.text else "bytecode"
    mode = "unchecked" if args.unchecked else "verified"
    print(f"{args.count} {kind} mutants (seed {args.seed}), {mode}: {dict(sorted(counts.items()))} "
          f"in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Sealed serialized executables from C and C++ (cabi/sealed.c, declared in
nx_hal_loader.h; Executable::serialize and Device::deserialize in nx_hal.hpp),
checked against the Python package's nx_hal/store/sealed.py and secret.py,
and against the hmac module: the same key file, the same bytes, the same
refusals, so blobs move between the languages both ways. The C and C++
programs are built with AddressSanitizer and UBSan."""

from __future__ import annotations

import hashlib
import hmac
import os
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from nx_hal.errors import InvalidArgumentError
from nx_hal.store import sealed, secret
from tests import cbuild
from tests.test_cpp_api import SANITIZE_FLAGS, build_cpp_program, env_with_path

ROOT = cbuild.repo_root()
ME = os.geteuid()
OTHER_UID = 12345  # any uid but ours; only root can give a file to it
DOMAIN = b"nx_hal executable 1\0"
REFUSING = "refusing to load a serialized executable: "
NOT_CHECKED = REFUSING + "its authenticator does not check"
NOT_SEALED = REFUSING + "it carries no authenticator"
ONLY_TRUSTED = "only for bytes from a source you trust"


def needs_root() -> None:
    if ME != 0:
        pytest.skip("giving a file to another user needs root (chown)")


# --- Building and running ------------------------------------------------------


@pytest.fixture(scope="module")
def tool(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/c/sealed_tool.c with the loader compiled in, under ASan and UBSan."""
    return cbuild.build_program("sealed_tool", [ROOT / "tests" / "c" / "sealed_tool.c",
                                                *cbuild.loader_sources()],
                                tmp_path_factory.mktemp("sealed_tool"), extra_flags=SANITIZE_FLAGS)


@pytest.fixture(scope="module")
def cpp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/c/sealed_cpp.cpp, under ASan and UBSan."""
    return build_cpp_program("sealed_cpp", [ROOT / "tests" / "c" / "sealed_cpp.cpp"],
                             tmp_path_factory.mktemp("sealed_cpp"), extra_flags=SANITIZE_FLAGS)


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh XDG_CONFIG_HOME for Python and the programs alike; the key is
    <config>/nx_hal/secret."""
    home = tmp_path / "config"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home))
    secret.forget()
    yield home
    secret.forget()


def run(cmd: list[str | Path], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([str(part) for part in cmd], capture_output=True, env=env, timeout=120)


def c_seal(tool: Path, tmp_path: Path, payload: bytes) -> subprocess.CompletedProcess[bytes]:
    """Runs `sealed_tool seal`; the sealed bytes are in the result's stdout."""
    source, target = tmp_path / "c-in", tmp_path / "c-out"
    source.write_bytes(payload)
    target.unlink(missing_ok=True)
    result = run([tool, "seal", source, target])
    if result.returncode == 0:
        result.stdout = target.read_bytes()
    return result


def c_unseal(tool: Path, tmp_path: Path, data: bytes, trusted: bool = False) -> subprocess.CompletedProcess[bytes]:
    """Runs `sealed_tool unseal`; the payload is in the result's stdout."""
    source, target = tmp_path / "c-in", tmp_path / "c-out"
    source.write_bytes(data)
    target.unlink(missing_ok=True)
    result = run([tool, "unseal", source, target, *(["trusted"] if trusted else [])])
    if result.returncode == 0:
        result.stdout = target.read_bytes()
    return result


def expected_seal(key: bytes, payload: bytes) -> bytes:
    """The format, from its definition and the hmac module."""
    tag = hmac.new(key, DOMAIN + len(payload).to_bytes(8, "little") + payload, hashlib.sha256).digest()
    return b"NXHALEX1" + tag + payload


def key_file(config: Path) -> Path:
    return config / "nx_hal" / "secret"


def python_refuses(data: bytes) -> str:
    with pytest.raises(InvalidArgumentError) as caught:
        sealed.unseal(data)
    return str(caught.value)


# --- C: the format and the key, against Python -----------------------------------


@pytest.mark.parametrize("size", [0, 1, 55, 64, 1000, 100_000])
def test_c_seals_what_python_seals(tool: Path, config: Path, tmp_path: Path, size: int) -> None:
    payload = os.urandom(size)
    made = c_seal(tool, tmp_path, payload)  # makes the key
    assert made.returncode == 0, made.stderr
    key = bytes.fromhex(key_file(config).read_text())
    assert made.stdout == expected_seal(key, payload)
    assert made.stdout == sealed.seal(payload)  # Python reads the key C made
    assert bytes(sealed.unseal(made.stdout)) == payload
    opened = c_unseal(tool, tmp_path, sealed.seal(payload))
    assert opened.returncode == 0, opened.stderr
    assert opened.stdout == payload


def test_the_key_c_makes_is_private_and_python_uses_it(tool: Path, config: Path, tmp_path: Path) -> None:
    assert c_seal(tool, tmp_path, b"x").returncode == 0
    path = key_file(config)
    info = path.lstat()
    assert stat.S_ISREG(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o600 and info.st_uid == ME
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    text = path.read_text()
    assert len(text) == 64 and text == text.lower() and len(bytes.fromhex(text)) == 32
    assert secret.key() == bytes.fromhex(text)
    assert c_seal(tool, tmp_path, b"y").returncode == 0 and path.read_text() == text  # kept


def test_c_uses_the_key_python_made(tool: Path, config: Path, tmp_path: Path) -> None:
    payload = os.urandom(300)
    by_python = sealed.seal(payload)  # makes the key
    text = key_file(config).read_text()
    made = c_seal(tool, tmp_path, payload)
    assert made.returncode == 0, made.stderr
    assert made.stdout == by_python == expected_seal(bytes.fromhex(text), payload)
    assert key_file(config).read_text() == text


@pytest.mark.parametrize(("where", "why"), [
    (0, NOT_SEALED),  # the magic: then it is no sealed blob at all
    (7, NOT_SEALED),
    (8, NOT_CHECKED),  # the tag's first and last bytes
    (39, NOT_CHECKED),
    (40, NOT_CHECKED),  # the payload's
    (-1, NOT_CHECKED),
])
def test_c_refuses_a_flipped_byte(tool: Path, config: Path, tmp_path: Path, where: int, why: str) -> None:
    payload = os.urandom(200)
    good = bytearray(sealed.seal(payload))
    good[where] ^= 0x01
    bad = bytes(good)
    assert why in python_refuses(bad)
    refused = c_unseal(tool, tmp_path, bad)
    assert refused.returncode == 1, refused.stderr
    message = refused.stderr.decode()
    assert message.startswith("INVALID_ARGUMENT: " + why), message
    assert "pass trusted" in message and ONLY_TRUSTED in message
    trusted = c_unseal(tool, tmp_path, bad, trusted=True)
    assert trusted.returncode == 0, trusted.stderr
    assert trusted.stdout == bytes(sealed.unseal(bad, trusted=True))


@pytest.mark.parametrize("change", ["truncated", "extended", "empty", "magic only", "head only"])
def test_c_refuses_a_changed_length(tool: Path, config: Path, tmp_path: Path, change: str) -> None:
    good = sealed.seal(os.urandom(100))
    bad = {"truncated": good[:-1], "extended": good + b"\0", "empty": b"", "magic only": good[:8],
           "head only": good[:40]}[change]
    python_why = python_refuses(bad)
    refused = c_unseal(tool, tmp_path, bad)
    assert refused.returncode == 1, refused.stderr
    message = refused.stderr.decode()
    expected = NOT_SEALED if "no authenticator" in python_why else NOT_CHECKED
    assert message.startswith("INVALID_ARGUMENT: " + expected), (message, python_why)
    trusted = c_unseal(tool, tmp_path, bad, trusted=True)
    assert trusted.returncode == 0, trusted.stderr
    assert trusted.stdout == bytes(sealed.unseal(bad, trusted=True))


def test_c_refuses_unsealed_bytes_unless_trusted(tool: Path, config: Path, tmp_path: Path) -> None:
    raw = b"\x7fELF" + os.urandom(500)
    python_refuses(raw)
    refused = c_unseal(tool, tmp_path, raw)
    assert refused.returncode == 1
    assert refused.stderr.decode().startswith("INVALID_ARGUMENT: " + NOT_SEALED)
    trusted = c_unseal(tool, tmp_path, raw, trusted=True)
    assert trusted.returncode == 0 and trusted.stdout == raw == bytes(sealed.unseal(raw, trusted=True))
    assert not key_file(config).exists()  # neither refusing nor trusting needs the key


def test_c_refuses_a_blob_sealed_with_another_key(tool: Path, config: Path, tmp_path: Path) -> None:
    payload = os.urandom(64)
    other = expected_seal(os.urandom(32), payload)
    python_refuses(other)
    refused = c_unseal(tool, tmp_path, other)
    assert refused.returncode == 1
    assert refused.stderr.decode().startswith("INVALID_ARGUMENT: " + NOT_CHECKED)
    trusted = c_unseal(tool, tmp_path, other, trusted=True)
    assert trusted.returncode == 0 and trusted.stdout == payload


def test_c_misuse_is_invalid_argument(tool: Path) -> None:
    result = run([tool, "misuse"])
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stderr.decode().count("INVALID_ARGUMENT: ") == 7


# --- Key files C and Python both refuse ----------------------------------------------

KEY_FILE_CASES = ["group may read", "others may read", "group may write", "a link", "a link to a good key",
                  "directory others may write", "a directory", "too short", "not hex",
                  "another user's", "directory of another user"]


def _spoil(folder: Path, good: Path, how: str) -> None:
    path = folder / "secret"
    if how in ("group may read", "others may read", "group may write", "another user's", "directory others may write",
               "directory of another user"):
        path.write_text(good.read_text())
        path.chmod({"group may read": 0o640, "others may read": 0o604, "group may write": 0o620}.get(how, 0o600))
    if how == "another user's":
        os.chown(path, OTHER_UID, OTHER_UID)
    elif how == "directory others may write":
        folder.chmod(0o777)
    elif how == "directory of another user":
        os.chown(folder, OTHER_UID, OTHER_UID)
    elif how == "a link":
        path.symlink_to(folder.parent / "missing")
    elif how == "a link to a good key":
        path.symlink_to(good)
    elif how == "a directory":
        path.mkdir()
    elif how in ("too short", "not hex"):
        path.write_text(good.read_text()[:-2] if how == "too short" else "zz" + good.read_text()[2:])
        path.chmod(0o600)


@pytest.mark.parametrize("how", KEY_FILE_CASES)
def test_c_refuses_a_key_file_python_refuses(tool: Path, config: Path, tmp_path: Path, how: str) -> None:
    if "another user" in how:
        needs_root()
    folder = config / "nx_hal"
    folder.mkdir(parents=True, mode=0o700)
    good = tmp_path / "good-key"
    good.write_text(os.urandom(32).hex())
    good.chmod(0o600)
    _spoil(folder, good, how)
    path = folder / "secret"
    before = os.readlink(path) if path.is_symlink() else None if path.is_dir() else path.read_bytes()
    assert secret.key() is None  # the oracle: Python refuses it too

    made = c_seal(tool, tmp_path, b"payload")
    assert made.returncode == 1, made.stderr
    message = made.stderr.decode()
    assert message.startswith(f"FAILED_PRECONDITION: cannot seal a serialized executable: cannot use the key "
                              f"in {path} ("), message
    # A blob sealed with that very key is not opened through a file C does not trust.
    blob = expected_seal(bytes.fromhex(good.read_text()), b"payload")
    refused = c_unseal(tool, tmp_path, blob)
    assert refused.returncode == 1
    assert refused.stderr.decode().startswith(
        f"INVALID_ARGUMENT: {REFUSING}its authenticator cannot be checked: cannot use the key in {path} (")
    assert c_unseal(tool, tmp_path, blob, trusted=True).stdout == b"payload"
    after = os.readlink(path) if path.is_symlink() else None if path.is_dir() else path.read_bytes()
    assert after == before  # never rewritten


# --- Where the key is: the same path as Python's config_dir ------------------------------

PATH_CASES = {
    "XDG_CONFIG_HOME": {"XDG_CONFIG_HOME": "{tmp}/xdg", "HOME": "{tmp}/home"},
    "XDG_CONFIG_HOME with slashes": {"XDG_CONFIG_HOME": "{tmp}//xdg/./", "HOME": "{tmp}/home"},
    "relative XDG_CONFIG_HOME": {"XDG_CONFIG_HOME": "xdg", "HOME": "{tmp}/home/"},
    "empty XDG_CONFIG_HOME": {"XDG_CONFIG_HOME": "", "HOME": "{tmp}/home"},
    "XDG_RUNTIME_DIR": {"XDG_RUNTIME_DIR": "{tmp}/run"},
    "relative HOME, TMPDIR": {"HOME": "home", "TMPDIR": "{tmp}/t"},
    "TMPDIR with ..": {"TMPDIR": "{tmp}/t/../t2/"},
    "TMPDIR missing": {"TMPDIR": "{tmp}/missing", "TEMP": "{tmp}/t"},
    "nothing": {},
}


@pytest.mark.parametrize("case", list(PATH_CASES))
def test_c_finds_the_key_where_python_does(tool: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           case: str) -> None:
    for folder in ("run", "t", "t2", "home"):
        (tmp_path / folder).mkdir(mode=0o700)
    env = {name: value.format(tmp=tmp_path) for name, value in PATH_CASES[case].items()}
    for name in ("XDG_CONFIG_HOME", "HOME", "XDG_RUNTIME_DIR", "TMPDIR", "TEMP", "TMP"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() looks again
    monkeypatch.chdir(tmp_path)
    expected = secret.secret_path()
    result = subprocess.run([str(tool), "key-path"], capture_output=True, text=True, env=env, cwd=tmp_path,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{expected}\n"


def _no_home_env(tmp_path: Path) -> dict[str, str]:
    shared = tmp_path / "shared"
    shared.mkdir(exist_ok=True)
    shared.chmod(0o1777)  # a sticky, world-writable directory, as /tmp
    return {"TMPDIR": str(shared)}


def _use_env(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> None:
    for name in ("XDG_CONFIG_HOME", "HOME", "XDG_RUNTIME_DIR", "TMPDIR", "TEMP", "TMP"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(tempfile, "tempdir", None)
    secret.forget()


def test_without_a_home_c_and_python_share_the_per_user_key(tool: Path, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    env = _no_home_env(tmp_path)
    _use_env(monkeypatch, env)
    payload = os.urandom(100)
    source, target = tmp_path / "in", tmp_path / "out"
    source.write_bytes(payload)
    made = run([tool, "seal", source, target], env=env)
    assert made.returncode == 0, made.stderr
    per_user = tmp_path / "shared" / f"nx_hal-{ME}"
    assert stat.S_IMODE(per_user.lstat().st_mode) == 0o700 and per_user.lstat().st_uid == ME
    assert secret.secret_path() == per_user / "config" / "secret"
    assert target.read_bytes() == sealed.seal(payload)
    secret.forget()


@pytest.mark.parametrize("how", ["writable by others", "another user's", "a link"])
def test_c_refuses_a_per_user_directory_python_refuses(tool: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       how: str) -> None:
    if how == "another user's":
        needs_root()
    env = _no_home_env(tmp_path)
    _use_env(monkeypatch, env)
    per_user = tmp_path / "shared" / f"nx_hal-{ME}"
    if how == "a link":
        (tmp_path / "elsewhere").mkdir(mode=0o700)
        per_user.symlink_to(tmp_path / "elsewhere")
    else:
        per_user.mkdir(mode=0o700)
        if how == "writable by others":
            per_user.chmod(0o777)
        else:
            os.chown(per_user, OTHER_UID, OTHER_UID)
    assert secret.key() is None  # the oracle
    source, target = tmp_path / "in", tmp_path / "out"
    source.write_bytes(b"payload")
    made = run([tool, "seal", source, target], env=env)
    assert made.returncode == 1, made.stderr
    message = made.stderr.decode()
    assert message.startswith("FAILED_PRECONDITION: cannot seal a serialized executable: cannot use the key in "
                              f"{per_user}/config/secret ({per_user}"), message
    assert not (tmp_path / "elsewhere" / "config").exists()  # nothing made through the link
    secret.forget()


# --- C++: Executable::serialize and Device::deserialize ----------------------------------


def cpp_env(hostmem_dir: Path, config: Path) -> dict[str, str]:
    env = env_with_path(hostmem_dir)
    env["XDG_CONFIG_HOME"] = str(config)
    return env


def cpp_save(cpp: Path, hostmem_dir: Path, config: Path, tmp_path: Path) -> tuple[bytes, bytes]:
    """serialize()'s bytes and the plugin's own, from the C++ program."""
    sealed_path, raw_path = tmp_path / "sealed.bin", tmp_path / "raw.bin"
    result = run([cpp, "save", sealed_path, raw_path], env=cpp_env(hostmem_dir, config))
    assert result.returncode == 0, result.stdout + result.stderr
    return sealed_path.read_bytes(), raw_path.read_bytes()


def cpp_load(cpp: Path, hostmem_dir: Path, config: Path, tmp_path: Path, data: bytes,
             trusted: bool = False) -> subprocess.CompletedProcess[bytes]:
    path = tmp_path / "load.bin"
    path.write_bytes(data)
    return run([cpp, "load", path, *(["trusted"] if trusted else [])], env=cpp_env(hostmem_dir, config))


def test_cpp_serialize_seals_as_python_does(cpp: Path, hostmem_dir: Path, config: Path, tmp_path: Path) -> None:
    blob, raw = cpp_save(cpp, hostmem_dir, config, tmp_path)
    assert raw.startswith(b"NXHAL-FIXTURE-EXE")  # the plugin's own format
    assert blob == expected_seal(bytes.fromhex(key_file(config).read_text()), raw)
    assert bytes(sealed.unseal(blob)) == raw and sealed.seal(raw) == blob
    loaded = cpp_load(cpp, hostmem_dir, config, tmp_path, blob)
    assert loaded.returncode == 0 and loaded.stdout == b"loaded\n", loaded.stderr


def test_a_blob_python_sealed_loads_in_cpp(cpp: Path, hostmem_dir: Path, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    _, raw = cpp_save(cpp, hostmem_dir, tmp_path / "first", tmp_path)
    fresh = tmp_path / "fresh"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(fresh))
    secret.forget()
    blob = sealed.seal(raw)  # Python makes this key
    assert blob.startswith(b"NXHALEX1") and key_file(fresh).exists()
    loaded = cpp_load(cpp, hostmem_dir, fresh, tmp_path, blob)
    assert loaded.returncode == 0 and loaded.stdout == b"loaded\n", loaded.stderr
    # The key of the first directory did not seal it.
    other = cpp_load(cpp, hostmem_dir, tmp_path / "first", tmp_path, blob)
    assert other.returncode == 1 and NOT_CHECKED in other.stderr.decode()
    secret.forget()


@pytest.mark.parametrize(("change", "why"), [
    ("tag", NOT_CHECKED), ("payload", NOT_CHECKED), ("magic", NOT_SEALED), ("unsealed", NOT_SEALED),
])
def test_cpp_refuses_what_python_refuses(cpp: Path, hostmem_dir: Path, config: Path, tmp_path: Path,
                                         change: str, why: str) -> None:
    blob, raw = cpp_save(cpp, hostmem_dir, config, tmp_path)
    if change == "unsealed":
        bad = raw
    else:
        spoiled = bytearray(blob)
        spoiled[{"tag": 20, "payload": -1, "magic": 0}[change]] ^= 0x01
        bad = bytes(spoiled)
    assert why in python_refuses(bad)
    refused = cpp_load(cpp, hostmem_dir, config, tmp_path, bad)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    code, what = refused.stderr.decode().splitlines()[:2]
    assert code == "INVALID_ARGUMENT"
    # Refused by the loader, before the plugin's executable_deserialize saw a byte.
    assert what.startswith(f"nxhal_executable_unseal: INVALID_ARGUMENT: {why}"), what
    assert "nxhal::trusted" in what and ONLY_TRUSTED in what


@pytest.mark.parametrize("change", ["none", "tag", "unsealed", "another key"])
def test_cpp_loads_trusted_bytes_sealed_or_not(cpp: Path, hostmem_dir: Path, config: Path, tmp_path: Path,
                                               change: str) -> None:
    blob, raw = cpp_save(cpp, hostmem_dir, config, tmp_path)
    data = {"none": blob, "unsealed": raw, "another key": expected_seal(os.urandom(32), raw)}.get(change, b"")
    if change == "tag":
        spoiled = bytearray(blob)
        spoiled[20] ^= 0x01
        data = bytes(spoiled)
    assert bytes(sealed.unseal(data, trusted=True)) == raw
    loaded = cpp_load(cpp, hostmem_dir, config, tmp_path, data, trusted=True)
    assert loaded.returncode == 0 and loaded.stdout == b"loaded\n", loaded.stderr


def test_cpp_trusted_bytes_still_meet_the_plugins_checks(cpp: Path, hostmem_dir: Path, config: Path,
                                                         tmp_path: Path) -> None:
    blob, raw = cpp_save(cpp, hostmem_dir, config, tmp_path)
    spoiled = bytearray(raw)
    spoiled[-1] ^= 0x01  # the program text: the fixture's own digest no longer matches
    refused = cpp_load(cpp, hostmem_dir, config, tmp_path, bytes(spoiled), trusted=True)
    assert refused.returncode == 1
    assert refused.stderr.decode().splitlines()[1].startswith("executable_deserialize: ")


def test_the_sdk_loader_exports_the_sealing_functions() -> None:
    from nx_hal import sdk

    try:
        loader = Path(sdk.get_library_dir()) / f"libnxhal_loader.so.{cbuild.ABI[0]}"
    except sdk.SdkMissingError as error:
        pytest.skip(f"no SDK next to the package: {error}")
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(loader)], capture_output=True, text=True,
                             check=True).stdout.split()
    for name in ("nxhal_executable_seal", "nxhal_executable_unseal", "nxhal_executable_key_path",
                 "nxhal_loader_free"):
        assert name in symbols, f"{loader.name} does not export {name}: rebuild (pip install -e .)"
    assert not [s for s in symbols if s.startswith("nxhal_sha256")], "the digest helpers must stay hidden"

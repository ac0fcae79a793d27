"""A plugin library loaded in this process: negotiated table, plugin info, client."""

from __future__ import annotations

import os
import stat
import threading
import weakref
from dataclasses import dataclass
from typing import Any

from nx_hal.native import NULL, check, check_loader, ffi, lib, text
from nx_hal.options import to_c_options

__all__ = [
    "PluginInfo", "Library", "Client", "PluginEntry", "open_library", "scan_plugins", "release_clients",
    "pending_releases", "plugin_path_untrusted",
]


@dataclass(frozen=True)
class PluginInfo:
    name: str
    vendor: str
    plugin_version: str
    sdk_version: str
    abi_version: str  # the version the plugin speaks
    negotiated_abi: str  # the version host and plugin use

    def to_dict(self) -> dict[str, str]:
        return dict(self.__dict__)


class Library:
    """An opened, negotiated plugin library. Stays loaded for the process's life."""

    __slots__ = ("path", "api", "info", "_handle")

    def __init__(self, path: str, handle: Any) -> None:
        self.path = path
        self._handle = handle
        self.api = lib.nxhal_plugin_api(handle)
        out = ffi.new("nxhal_plugin_info_t*")
        out.struct_size = ffi.sizeof("nxhal_plugin_info_t")
        check(self.api, lib.nxhal_call_plugin_info(self.api, out), None)
        self.info = PluginInfo(
            name=text(out.name),
            vendor=text(out.vendor),
            plugin_version=text(out.plugin_version),
            sdk_version=text(out.sdk_version),
            abi_version=f"{out.abi_major}.{out.abi_minor}",
            negotiated_abi=f"{lib.nxhal_plugin_abi_major(handle)}.{lib.nxhal_plugin_abi_minor(handle)}",
        )

    def create_client(self, options: dict[str, object], plugin: str) -> Client:
        copts = to_c_options(options)
        out = ffi.new("nxhal_client_t**")
        check(self.api, lib.nxhal_call_client_create(self.api, copts.array, copts.count, out), plugin)
        return Client(self, out[0], plugin)


# Clients no Python object can reach any more, waiting for release_clients().
# Their destruction is deferred rather than done in the finalizer: a
# finalizer may run inside a garbage collection whose unreachable set also
# holds buffers of that client (a user's reference cycle), and CPython calls
# weakref callbacks before it deallocates the members of the set, so the
# buffers' destroy calls still need the client. Once the collection is over,
# every buffer that held the client is gone.
_pending: list[tuple[Any, Any]] = []
_pending_lock = threading.Lock()


def _client_unreachable(api: Any, handle: Any) -> None:
    with _pending_lock:
        _pending.append((api, handle))


def pending_releases() -> int:
    """How many unreachable clients wait for release_clients()."""
    with _pending_lock:
        return len(_pending)


def release_clients() -> int:
    """Destroys the clients nothing refers to any more; returns how many.
    Never called from a finalizer or during a garbage collection."""
    with _pending_lock:
        todo = _pending[:]
        del _pending[:]
    for api, handle in todo:
        lib.nxhal_call_client_destroy(api, handle)
    return len(todo)


class Client:
    """A plugin client: owns the plugin's devices. Devices hold their client,
    and buffers and executables hold their device, so the client is
    unreachable only when nothing made from it is alive; it is then destroyed
    by the next release_clients() (nx_hal.configure() calls it). Clients alive
    at interpreter exit are not destroyed: vendor SDKs differ in what they
    tolerate at teardown."""

    __slots__ = ("library", "handle", "plugin", "diagnostics", "device_handles", "__weakref__")

    def __init__(self, library: Library, handle: Any, plugin: str) -> None:
        self.library = library
        self.handle = handle
        self.plugin = plugin
        # Registered before the calls below can raise: a client that fails
        # half-way is released too.
        release = weakref.finalize(self, _client_unreachable, library.api, handle)
        release.atexit = False
        api = library.api
        diag = ffi.new("const char**")
        check(api, lib.nxhal_call_client_diagnostics(api, handle, diag), plugin)
        self.diagnostics = text(diag[0]).strip()
        count = ffi.new("size_t*")
        check(api, lib.nxhal_call_client_device_count(api, handle, count), plugin)
        self.device_handles = []
        dev = ffi.new("nxhal_device_t**")
        for index in range(count[0]):
            check(api, lib.nxhal_call_client_device(api, handle, index, dev), plugin)
            self.device_handles.append(dev[0])


# Libraries stay loaded for the process's life, so each is opened once: a
# second configure() reuses it instead of negotiating (and allocating) again.
_libraries: dict[str, Library] = {}
_libraries_lock = threading.Lock()


def open_library(path: str, plugin: str | None = None) -> Library:
    """dlopen + negotiate through the C loader (once per path); raises the loader's error."""
    key = str(path)
    with _libraries_lock:
        found = _libraries.get(key)
        if found is not None:
            return found
        out = ffi.new("nxhal_plugin_t**")
        check_loader(lib.nxhal_plugin_open(key.encode(), out), plugin)
        if out[0] == NULL:  # defensive: the loader sets it on success
            raise RuntimeError("loader returned no plugin")
        found = _libraries[key] = Library(key, out[0])
        return found


@dataclass(frozen=True)
class PluginEntry:
    """One plugin file the C loader's search found (nxhal_plugin_scan)."""

    name: str
    library: str | None  # None: the manifest's library could not be resolved
    source: str  # the manifest, or the bare library file
    origin: str  # why its directory is searched: "NX_HAL_PLUGIN_PATH", "VIRTUAL_ENV", ...
    abi_version: str
    skip_reason: str | None  # None: the plugin nxhal_plugin_open_by_name would load


def scan_plugins() -> list[PluginEntry]:
    """Every plugin the C loader would consider, in its search order (the
    NX_HAL_PLUGIN_PATH directories, then the manifests of the active
    environment, the install prefix and the user's and system's data
    directories), with the reason for each it would skip. Loads nothing."""
    found: list[PluginEntry] = []

    def optional(value: Any) -> str | None:
        return None if value == NULL else ffi.string(value).decode(errors="replace")

    @ffi.callback("nxhal_plugin_entry_fn")  # type: ignore[untyped-decorator]
    def visit(entry: Any, _user: Any) -> int:
        found.append(PluginEntry(
            name=optional(entry.name) or "", library=optional(entry.library),
            source=optional(entry.source) or "", origin=optional(entry.origin) or "",
            abi_version=optional(entry.abi_version) or "", skip_reason=optional(entry.skip_reason)))
        return 0

    check_loader(lib.nxhal_plugin_scan(visit, NULL), None)
    return found


def plugin_path_untrusted(path: str, *, directory: bool = False) -> str | None:
    """Why a plugin_path / NX_HAL_PLUGIN_PATH directory (``directory``) or a
    library found in one may not be loaded; None: it may. The C loader's rule
    (nxhal_trust_check_path in cabi/manifest.c), in the same words: an
    absolute directory, or a regular file after symlinks are resolved in a
    directory that passes too, owned by this user or root and writable by no
    group or other. Whoever may write a file or its directory chooses the
    code this process runs."""
    if directory and not os.path.isabs(path):  # else the working directory would be a source of code
        return f"'{path}' is not an absolute directory"
    shown = path
    try:
        if not directory:
            shown = os.path.realpath(path, strict=True)  # novermin (strict: 3.10)
        info = os.stat(shown)
    except OSError as exc:
        return f"'{shown}' cannot be read: {exc.strerror}"
    if not (stat.S_ISDIR(info.st_mode) if directory else stat.S_ISREG(info.st_mode)):
        return f"'{shown}' is not {'a directory' if directory else 'a regular file'}"
    uid = os.geteuid()
    if info.st_uid not in (uid, 0):
        return f"'{shown}' is owned by uid {info.st_uid}, not by this user (uid {uid}) or root"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        mode = stat.S_IMODE(info.st_mode)
        return f"'{shown}' is writable by group or others (mode {mode:04o}; chmod go-w to trust it)"
    return None if directory else plugin_path_untrusted(os.path.dirname(shown), directory=True)

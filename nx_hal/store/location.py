"""Where the store and the per-user secret live, by the XDG base directory
rules, without ever needing a home directory.

A container often runs as a user with no passwd entry and no ``HOME``;
``Path.home()`` raises there. So the cache root is, first found:
the setting ``cache_dir`` (``NX_HAL_CACHE_DIR``; set but empty is an error
naming it: an empty value would otherwise mean the working directory), ``$XDG_CACHE_HOME/nx_hal``,
``$HOME/.cache/nx_hal``, and with neither, a per-user directory under
``$XDG_RUNTIME_DIR`` or the temporary directory (``nx_hal-<uid>``). The XDG
rules ignore relative values, and so does this: a relative ``HOME`` or
``XDG_CACHE_HOME`` would put the cache wherever the process happens to run.
The secret's directory follows the same rules with ``XDG_CONFIG_HOME`` and
``$HOME/.config``.

Stdlib only: the settings model imports it on every start.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path
from typing import Final

from nx_hal.errors import ConfigError

__all__ = ["DEFAULT_CACHE_MAX_BYTES", "default_cache_dir", "config_dir", "per_user_dir", "check_cache_dir", "home_dir",
           "untrusted_per_user_dir"]

# The setting cache_max_bytes when nothing sets it; 0 means no limit.
DEFAULT_CACHE_MAX_BYTES: Final = 2 * 1024**3


def _absolute(name: str) -> Path | None:
    value = os.environ.get(name, "")
    return Path(value) if value and os.path.isabs(value) else None


def per_user_dir() -> Path:
    """A directory for this user when there is no home: under the session's
    runtime directory (private by its rules), else the temporary directory.
    Whoever made it must be this user, which the store checks on use."""
    base = _absolute("XDG_RUNTIME_DIR") or Path(tempfile.gettempdir())
    return base / f"nx_hal-{os.geteuid()}"


def untrusted_per_user_dir(path: Path) -> str | None:
    """Why ``path``, when it lies in the per-user directory, may not be used:
    nx_hal chose that directory in a shared place (the temporary directory),
    where another user may have made it, or a link by its name, first."""
    base = per_user_dir()
    if base != path and base not in path.parents:
        return None
    try:
        base.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = os.lstat(base)
    except OSError as exc:
        return f"{base}: {exc.strerror or exc}"
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        return f"{base} is not a directory (a symbolic link, or another file, was there first)"
    if info.st_uid != os.geteuid() or info.st_mode & 0o022:
        return (f"{base} is owned by uid {info.st_uid} with mode {stat.S_IMODE(info.st_mode):o}; nx_hal's "
                f"per-user directory must be this user's (uid {os.geteuid()}) and writable by no one else")
    return None


def home_dir() -> Path | None:
    """``HOME`` when it is an absolute path; never the passwd entry."""
    return _absolute("HOME")


def _xdg(variable: str, under_home: str, fallback: str) -> Path:
    """``$variable/nx_hal``, else ``$HOME/under_home/nx_hal``, else the per-user directory's ``fallback``."""
    xdg = _absolute(variable)
    if xdg is not None:
        return xdg / "nx_hal"
    home = home_dir()
    return home / under_home / "nx_hal" if home is not None else per_user_dir() / fallback


def default_cache_dir() -> Path:
    """The cache root when the settings name none (NX_HAL_CACHE_DIR is a
    setting: the configuration reads it)."""
    return _xdg("XDG_CACHE_HOME", ".cache", "cache")


def config_dir() -> Path:
    """nx_hal's directory of per-user configuration (the store's secret)."""
    return _xdg("XDG_CONFIG_HOME", ".config", "config")


def check_cache_dir(value: str | os.PathLike[str], origin: str) -> Path:
    """A cache_dir setting as a path: empty is an error naming ``origin``
    (it would mean the working directory, and every entry there)."""
    text = os.fspath(value)
    if not text.strip():
        raise ConfigError(f"{origin} is set but empty; name a directory, or unset it for the default "
                          f"({default_cache_dir()})")
    return Path(text).expanduser() if text.startswith("~") and home_dir() is not None else Path(text)


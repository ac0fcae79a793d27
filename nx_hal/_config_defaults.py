"""What the plain settings (config.py) and the pydantic model
(_config_model.py) share: the default cache directory and how a list is read
from an environment variable. Its own module so that the model does not import
the loader that imports it."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["default_cache_dir", "split_list"]


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "nx_hal"


def split_list(value: object) -> object:
    """Lists from the environment: JSON (``["tpu","cpu"]``) or comma-separated."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            import json

            return json.loads(text)
        return [part.strip() for part in text.split(",") if part.strip()]
    return value

"""The one on-disk cache: every section (executables, conversions, verdicts,
probe results, discovery records) is kept by ``Store`` under one root, with
one trust rule, one entry format authenticated by a per-user key, and one
eviction policy (``maintenance``). See ``store.py``."""

from nx_hal.store.location import DEFAULT_CACHE_MAX_BYTES, check_cache_dir, default_cache_dir
from nx_hal.store.maintenance import SECTIONS
from nx_hal.store.store import Entry, Store, content_digest, digest, digest_scope

__all__ = ["Store", "Entry", "digest", "content_digest", "digest_scope", "SECTIONS", "DEFAULT_CACHE_MAX_BYTES", "default_cache_dir", "check_cache_dir"]

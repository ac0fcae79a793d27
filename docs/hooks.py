"""MkDocs hooks (mkdocs.yml ``hooks:``): the generated C API page, and a
check that the Python reference covers every public name.

- ``on_files`` adds ``reference/c-api.md``, made from the C headers by
  ``docs/gen_c_api.py`` in memory: the page is never written into the tree,
  so it cannot be committed stale.
- ``on_post_build`` fails the build unless every name in the ``__all__`` of
  ``nx_hal``, ``nx_hal.array_api``, ``nx_hal.ray`` and ``nx_hal.examples`` has an anchor of its
  own (``id="nx_hal.NAME"``) in the built reference pages: a name added to
  ``__all__`` without reaching the reference breaks the build, as a broken
  link does. The lists are read from the sources with ``ast``, so the check
  imports nothing.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
# Each public namespace, the file holding its __all__, and the reference page for it.
NAMESPACES: dict[str, tuple[Path, str]] = {
    "nx_hal": (ROOT / "nx_hal" / "__init__.py", "reference/python"),
    "nx_hal.array_api": (ROOT / "nx_hal" / "array_api" / "__init__.py", "reference/array-api"),
    "nx_hal.ray": (ROOT / "nx_hal" / "ray" / "__init__.py", "reference/ray"),
    "nx_hal.examples": (ROOT / "nx_hal" / "examples" / "__init__.py", "examples"),
}


def _gen_c_api() -> Any:
    """docs/gen_c_api.py as a module: hooks are loaded by path, so their
    directory is not importable as a package."""
    spec = importlib.util.spec_from_file_location("nx_hal_docs_gen_c_api", DOCS / "gen_c_api.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def public_names(source: Path) -> list[str]:
    """The literal ``__all__`` list of a module's source."""
    for node in ast.parse(source.read_text()).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            names = ast.literal_eval(node.value)
            assert isinstance(names, list), f"{source}: __all__ is not a list"
            return [str(name) for name in names]
    raise PluginError(f"{source} has no literal __all__")


def missing_names(site_dir: Path) -> list[str]:
    """Public names without an anchor of their own in their reference page."""
    missing = []
    for namespace, (source, page) in NAMESPACES.items():
        built = site_dir / page / "index.html"
        ids = set(re.findall(r'id="([^"]+)"', built.read_text())) if built.exists() else set()
        missing += [f"{namespace}.{name}" for name in public_names(source) if f"{namespace}.{name}" not in ids]
    return missing


def on_files(files: Files, config: Any) -> Files:
    """Adds the C API page, made from the headers now."""
    page = _gen_c_api().PAGE
    stale = files.get_file_from_path(page)
    if stale is not None:  # written by hand with `python docs/gen_c_api.py docs/...`: the fresh one wins
        files.remove(stale)
    files.append(File.generated(config, page, content=_gen_c_api().render()))
    return files


def on_post_build(config: Any) -> None:
    """Fails the build when a public name has no entry in the reference."""
    missing = missing_names(Path(config["site_dir"]))
    if missing:
        raise PluginError("public names missing from the API reference (add them to docs/reference/*.md): "
                          + ", ".join(missing))

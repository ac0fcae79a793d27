"""A griffe extension (mkdocs.yml, mkdocstrings' ``extensions``): the
modules behind ``nx_hal.array_api`` read at run time instead of from source.

Most array API functions are made by factories (``add = _bin("add", ...)``),
so reading the source finds attributes with neither a signature nor a
docstring; importing the module finds the functions as they are. Only these
modules are inspected: inspecting the whole ``nx_hal`` package would import
every module in it (``nx_hal/__main__.py`` runs the CLI when imported) and
would lose the names ``nx_hal`` imports lazily.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import griffe

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "array_api"


class ArrayApiAtRunTime(griffe.Extension):
    """Replaces the statically read modules of ``nx_hal.array_api`` with inspected ones."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        if pkg.name != "nx_hal" or PACKAGE not in pkg.members:
            return
        namespace = pkg.members[PACKAGE]
        assert isinstance(namespace, griffe.Module)
        for name, member in list(namespace.members.items()):
            if not isinstance(member, griffe.Module):
                continue
            inspected = griffe.inspect(
                name,  # joined to the parent's path
                filepath=member.filepath if not isinstance(member.filepath, list) else None,
                import_paths=[str(ROOT), *sys.path],  # griffe imports with exactly these
                parent=namespace,
                docstring_parser=loader.docstring_parser,
                docstring_options=loader.docstring_options,
                lines_collection=loader.lines_collection,
                modules_collection=loader.modules_collection,
            )
            namespace.set_member(name, inspected)
            for attribute in inspected.attributes.values():
                # The dtypes are numpy's: their inherited docstring is numpy's class's, in reST.
                if attribute.docstring and attribute.docstring.value.startswith("DType class corresponding"):
                    attribute.docstring = griffe.Docstring(
                        f"numpy's ``{attribute.name}`` dtype: the standard's ``{attribute.name}``.",
                        parent=attribute)
        # The namespace's own names are aliases into those modules, some
        # already resolved (to the attributes read from source) while the
        # package loaded: fresh ones find the inspected functions.
        for name, member in list(namespace.members.items()):
            if isinstance(member, griffe.Alias) and member.target_path.startswith(f"{namespace.path}."):
                namespace.set_member(name, griffe.Alias(name, member.target_path, lineno=member.lineno,
                                                        endlineno=member.endlineno, parent=namespace))

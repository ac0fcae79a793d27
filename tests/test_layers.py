"""The core's import graph: no cycle among nx_hal's modules, counting imports
made inside functions, and the ONNX package reached only through the
converter interface. (lint-imports checks the layers in pyproject.toml; a
layers contract does not see a cycle inside one layer, this test does.)

Imports under ``if TYPE_CHECKING:`` count too: a module below another names
its types through protocols (a Buffer's ``device`` is an nx_hal.held.HeldOn,
which nx_hal.device.Device provides), never by importing upwards."""

from __future__ import annotations

import grimp
import pytest

CORE = "nx_hal"


def _graph(*, type_checking: bool) -> dict[str, set[str]]:
    graph = grimp.build_graph(CORE, include_external_packages=False, exclude_type_checking_imports=not type_checking)
    return {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}


def strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one module, or
    one module that imports itself."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(edges.get(node, ())):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in edges.get(node, ()):
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def cycle_path(edges: dict[str, set[str]], component: list[str]) -> list[str]:
    """A shortest import cycle through the component's first module, as a path back to it."""
    start = component[0]
    members = set(component)
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for succ in sorted(edges.get(node, set()) & members):
                if succ == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [*reversed(path), start]
                if succ not in previous:
                    previous[succ] = node
                    following.append(succ)
        frontier = following
    return component


def test_finder_reports_a_cycle() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}}
    components = strongly_connected(edges)
    assert components == [["a", "b", "c"], ["e"]]
    assert cycle_path(edges, components[0]) == ["a", "b", "c", "a"]
    assert strongly_connected({"a": {"b"}, "b": set()}) == []


@pytest.mark.parametrize("type_checking", [False, True], ids=["runtime", "with-type-checking"])
def test_no_import_cycle(type_checking: bool) -> None:
    edges = _graph(type_checking=type_checking)
    assert "nx_hal.device" in edges and "nx_hal.onnx.convert" in edges  # the graph is the package's
    cycles = [" -> ".join(cycle_path(edges, c)) for c in strongly_connected(edges)]
    assert not cycles, "import cycles among nx_hal's modules:\n" + "\n".join(cycles)


@pytest.mark.parametrize("module", ["nx_hal.device", "nx_hal.executable", "nx_hal.plugin", "nx_hal.sandbox"])
def test_core_does_not_import_onnx(module: str) -> None:
    """Devices convert ONNX through nx_hal.converter.Converter, given by the
    registry; nothing below the registry imports nx_hal.onnx, even for types."""
    graph = grimp.build_graph(CORE, include_external_packages=False)
    reached = graph.find_upstream_modules(module)
    assert not {m for m in reached if m == "nx_hal.onnx" or m.startswith("nx_hal.onnx.")}, sorted(reached)


def test_onnx_importers() -> None:
    """Only the registry (which hands devices the converter) and the CLI
    import the ONNX package from outside it."""
    edges = _graph(type_checking=False)
    importers = {m for m, imported in edges.items() if not m.startswith("nx_hal.onnx")
                 and any(i == "nx_hal.onnx" or i.startswith("nx_hal.onnx.") for i in imported)}
    assert importers == {"nx_hal.registry", "nx_hal.cli.commands"}

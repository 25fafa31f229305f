"""The package import graph of src/headwater has no cycle and follows the declared layers.

The graph is computed from the source with :mod:`ast`: every ``import headwater.x`` and
``from headwater.x import ...`` anywhere in a module (inside functions too: a lazy import is
still a dependency), except under ``if TYPE_CHECKING:`` (annotations only). A node is a
top-level package or module of ``headwater`` (``headwater.sinks.mysql.bulk`` counts as
``sinks``); imports inside one package are not edges.

:data:`LAYERS` is the order docs/architecture.md draws, top to bottom. An edge may only go
down to a *lower* layer: two packages of one layer (``spark`` and ``sinks``) never import
each other.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "src" / "headwater"

#: Top to bottom. A package may import packages of lower layers only.
LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"cli"}),
    frozenset({"demo"}),
    frozenset({"pipeline", "replay"}),
    frozenset({"snapshot", "replay"}),
    frozenset({"spark", "sinks", "verify", "sandbox", "client", "logs"}),
    frozenset({"reader"}),
    frozenset({"server", "httpapi"}),
    frozenset({"store", "schema", "changes", "config", "coordination"}),
    frozenset({"binlog", "configfile", "connections", "gcpause"}),
    frozenset({"_native", "position", "errors"}),
    frozenset({"_varlen"}),
)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(node: ast.AST) -> Iterator[str]:
    """Dotted names of the headwater modules ``node`` imports, TYPE_CHECKING blocks aside."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for orelse in child.orelse:
                yield from _imports(orelse)
            continue
        if isinstance(child, ast.Import):
            yield from (a.name for a in child.names)
        elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
            if child.module == "headwater":
                yield from (f"headwater.{a.name}" for a in child.names)
            else:
                yield child.module
        yield from _imports(child)


def _node(module: str, root: Path) -> str | None:
    """The top-level package or module of ``module``; None outside headwater, or for a
    name of the root package (``from headwater import __version__``)."""
    parts = module.split(".")
    if parts[0] != "headwater" or len(parts) < 2:
        return None
    name = parts[1]
    return name if (root / name).is_dir() or (root / f"{name}.py").is_file() else None


def package_graph(root: Path = ROOT) -> dict[str, dict[str, set[str]]]:
    """``{importer: {imported: {files}}}`` between top-level packages and modules."""
    graph: dict[str, dict[str, set[str]]] = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if rel == Path("__init__.py"):
            continue  # the package root re-exports its leaves; it is nobody's dependency
        source = rel.parts[0].removesuffix(".py")
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        edges = graph.setdefault(source, {})
        for module in _imports(tree):
            target = _node(module, root)
            if target is not None and target != source:
                edges.setdefault(target, set()).add(str(rel))
    return graph


def find_cycle(graph: dict[str, dict[str, set[str]]]) -> list[str] | None:
    """One cycle of ``graph`` as a path ``[a, b, ..., a]``, or None."""
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, {})):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def _rank(name: str) -> int:
    for i, layer in enumerate(LAYERS):
        if name in layer:
            return i
    raise AssertionError(f"headwater.{name} is in no layer of LAYERS (tests/unit/test_layering.py)")


def test_no_package_import_cycle() -> None:
    graph = package_graph()
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(
        f"{a} ({', '.join(sorted(graph[a][b]))})" for a, b in itertools.pairwise(cycle)
    )


def test_every_package_has_a_layer() -> None:
    names = {p.name.removesuffix(".py") for p in ROOT.iterdir()}
    names = {n for n in names if not n.startswith((".", "__")) and not n.endswith(".egg-info")}
    missing = sorted(n for n in names if not any(n in layer for layer in LAYERS))
    assert missing == []


def test_imports_only_go_down_the_layers() -> None:
    wrong = [
        f"{a} -> {b} ({', '.join(sorted(files))})"
        for a, targets in package_graph().items()
        for b, files in targets.items()
        if _rank(a) >= _rank(b)
    ]
    assert wrong == []


def test_the_graph_sees_lazy_imports_and_skips_type_checking_ones(tmp_path: Path) -> None:
    pkg = tmp_path / "headwater"
    (pkg / "low").mkdir(parents=True)
    (pkg / "low" / "__init__.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from headwater.high import X\n"
        "def f():\n    from headwater.mid.sub import Y\n    import headwater.errors\n"
    )
    (pkg / "mid.py").write_text("from headwater import low\n")
    (pkg / "high.py").write_text("")
    (pkg / "errors.py").write_text("from headwater import __version__\n")
    graph = package_graph(pkg)
    assert {k: sorted(v) for k, v in graph.items()} == {
        "errors": [],
        "high": [],
        "low": ["errors", "mid"],
        "mid": ["low"],
    }
    assert find_cycle(graph) == ["low", "mid", "low"]


@pytest.mark.parametrize("edge", [("spark", "sinks"), ("sinks", "spark"), ("sinks", "pipeline")])
def test_a_wrong_edge_breaks_the_order(edge: tuple[str, str]) -> None:
    a, b = edge
    assert _rank(a) >= _rank(b)

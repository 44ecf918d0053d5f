"""The package structure holds: no import cycle anywhere in ``connect/``, ``connectors/`` and
``worker/`` (inside one package or across them), and ``connect/`` (the API a connector author
imports) never imports from ``worker/`` or ``connectors/``. Per broker, config and defaults sit
below the connector, task and side-output modules, which import them and never each other in a
circle.

Every import statement counts, module-level or inside a function: a lazy import that closes a
circle is still a circle - it only moves the failure from import time to the first call that
takes that path, and makes the modules' order of import matter. Imports under
``if TYPE_CHECKING:`` are the exception: they never run, so they cannot take part in a cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("connect", "worker", "connectors")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}


def _type_checking_only(tree: ast.AST) -> set[int]:
    """ids of import nodes inside ``if TYPE_CHECKING:`` blocks."""
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return skipped


def _imports(name: str, source: str, is_package: bool, modules: dict[str, Path]) -> dict[str, int]:
    """The modules of ``modules`` that ``name`` imports, with the line of the first such import."""
    tree = ast.parse(source, name)
    skipped = _type_checking_only(tree)
    package = name if is_package else name.rpartition(".")[0]
    found: dict[str, int] = {}
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package, up level - 1
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            # "from a import b" with b a module depends on a.b only (a runs first for any a.b anyway);
            # with b a name defined in a, on a
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        for target in targets:
            # "import a.b.c" imports a, a.b and a.b.c: the deepest one we hold is what it depends on
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.setdefault(target, node.lineno)
    return found


def _graph() -> dict[str, dict[str, int]]:
    modules = _modules()
    return {name: _imports(name, path.read_text(), path.name == "__init__.py", modules)
            for name, path in modules.items()}


def _cycles(graph: dict[str, dict[str, int]], within: str) -> list[list[str]]:
    """Each import cycle among the modules of package ``within`` (every module if ``within`` is
    empty), one per strongly connected set."""
    nodes = [n for n in graph if not within or n == within or n.startswith(within + ".")]
    adj = {n: [t for t in graph[n] if t in nodes] for n in nodes}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in adj[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in nodes:
        if v not in index:
            visit(v)
    return found


def _describe(cycle: list[str], graph: dict[str, dict[str, int]]) -> str:
    members = set(cycle)
    edges = [f"{a} -> {b} (line {line})" for a in cycle for b, line in graph[a].items() if b in members]
    return "; ".join(edges)


@pytest.mark.parametrize("package", [*PACKAGES, ""], ids=[*PACKAGES, "across-packages"])
def test_no_import_cycle_inside_the_package(package):
    graph = _graph()
    cycles = _cycles(graph, package)
    assert not cycles, "import cycles (module-level or lazy): " + " | ".join(_describe(c, graph) for c in cycles)


def test_connect_imports_nothing_from_worker_or_connectors():
    graph = _graph()
    wrong = [f"{src} imports {dst} (line {line})" for src, deps in graph.items()
             if src == "connect" or src.startswith("connect.")
             for dst, line in deps.items() if dst.split(".")[0] in ("worker", "connectors")]
    assert not wrong, "connect/ is the API a connector author imports; it may not depend on the runtime: " + \
        "; ".join(wrong)


def test_the_checks_would_see_a_cycle_and_a_wrong_direction():
    graph = {"connect.a": {"connect.b": 1}, "connect.b": {"connect.c": 3}, "connect.c": {"connect.a": 9},
             "worker.x": {}}
    assert _cycles(graph, "connect") == [["connect.a", "connect.b", "connect.c"]]
    assert _cycles(graph, "worker") == []
    graph["worker.x"] = {"connect.a": 2}
    graph["connect.c"]["worker.x"] = 4
    assert _cycles(graph, "") == [["connect.a", "connect.b", "connect.c", "worker.x"]]
    modules = _modules()
    # a lazy import inside a function counts; a TYPE_CHECKING one does not
    source = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from worker.runtime.driver import Driver\n"
              "def f():\n    from worker.pipeline import parse_pipeline\n    from . import records\n")
    found = _imports("connect._structure_probe", source, False, modules)
    assert found == {"worker.pipeline": 5, "connect.records": 6}  # "from . import records": the module only

"""The project's import graph, read from the source with `ast` (nothing is imported or run).

Every `import` counts, at module top or inside a function: an import inside a function that closes
a loop is still a loop, only one that fails later."""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

from tests.conftest import REPO

# The project's top-level packages and script folders (the layout in README.md).
PACKAGES = ("checks", "worker", "portal", "testbed", "tests", "bench")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules() -> dict[str, Path]:
    """Dotted name -> file, for every .py file of the project packages."""
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            found[module_name(path)] = path
    return found


def _imported(tree: ast.AST, name: str, is_package: bool) -> Iterator[tuple[str, list[str]]]:
    """(module, names taken from it) for every import statement, relative ones resolved."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, []
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".")
                anchor = anchor if is_package else anchor[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            yield base, [alias.name for alias in node.names]


def import_graph() -> dict[str, set[str]]:
    """Project module -> the project modules it imports (`from a import b` counts as a.b when b is
    a module, else as a; importing a.b.c also runs a and a.b, which count too, except the packages
    the importing module is itself in). A copy: callers may change it."""
    return {module: set(targets) for module, targets in _source_graph().items()}


# The source does not change during a test session: parsed once (about 4 s of CPU), not per test.
@functools.cache
def _source_graph() -> dict[str, set[str]]:
    modules = project_modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges: set[str] = set()
        tree = ast.parse(path.read_text(), filename=str(path))
        for module, names in _imported(tree, name, path.name == "__init__.py"):
            targets = [f"{module}.{n}" for n in names if f"{module}.{n}" in modules] or [module]
            for target in targets:
                parts = target.split(".")
                runs = (".".join(parts[:i]) for i in range(1, len(parts))) if target in modules else ()
                # The packages a module sits in are set up before it runs: importing a sibling runs
                # none of them again, so they are no edge (naming one's own package still is).
                edges.update(p for p in runs if p in modules and not name.startswith(f"{p}."))
                edges.update(t for t in (target,) if t in modules)
        edges.discard(name)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(component)
    return found


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = {start}, [start]
    while todo:
        for child in graph.get(todo.pop(), ()):
            if child not in seen:
                seen.add(child)
                todo.append(child)
    return seen


def all_imports(path: Path) -> set[str]:
    """Every module named by an import in one file (project or not)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    name = module_name(path)
    return {
        f"{module}.{n}" if n != "*" else module
        for module, names in _imported(tree, name, path.name == "__init__.py")
        for n in (names or ["*"])
    } | {module for module, _ in _imported(tree, name, path.name == "__init__.py")}

"""The layering the design promises, checked on the source: no module and no app is in an import
loop (every import counts, inside functions too), and the remote-execution layer (worker/) reaches no Django
model. The layers themselves are import-linter's contract (tests/meta/test_layers.py)."""

from __future__ import annotations

from tests.meta.imports import all_imports, cycles, import_graph, project_modules, reachable


def _top(module: str) -> str:
    return module.split(".")[0]


def test_no_import_cycle_spans_two_top_level_packages() -> None:
    spanning = [sorted(c) for c in cycles(import_graph()) if len({_top(m) for m in c}) > 1]
    assert spanning == []


def _loops(packages: tuple[str, ...]) -> list[list[str]]:
    return [sorted(c) for c in cycles(import_graph()) if any(_top(m) in packages for m in c)]


# The units of the app-level graph: each portal app (portal.runs, ...) and top module (portal.roles,
# ...) is one, and worker, checks and testbed are one each; tests and bench import everything.
APP_ROOTS = ("portal", "worker", "checks", "testbed")


def _unit(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "portal" and len(parts) > 1 else parts[0]


def app_graph(graph: dict[str, set[str]]) -> tuple[dict[str, set[str]], dict[tuple[str, str], list[str]]]:
    """The module graph folded onto its units, and for each unit edge the module imports behind it."""
    units: dict[str, set[str]] = {}
    behind: dict[tuple[str, str], list[str]] = {}
    for module, targets in graph.items():
        if _top(module) not in APP_ROOTS:
            continue
        for target in sorted(targets):
            source, sink = _unit(module), _unit(target)
            if _top(target) in APP_ROOTS and source != sink:
                units.setdefault(source, set()).add(sink)
                units.setdefault(sink, set())
                behind.setdefault((source, sink), []).append(f"{module} -> {target}")
    return units, behind


def test_no_app_is_in_an_import_cycle() -> None:
    # Every import counts, inside functions too: two apps that import each other cannot be layered.
    units, behind = app_graph(import_graph())
    loops = [[imp for a in sorted(c) for b in sorted(units[a] & c) for imp in behind[(a, b)]] for c in cycles(units)]
    assert loops == []


def test_the_app_graph_folds_modules_onto_their_app() -> None:
    graph = {
        "portal.runs.views": {"portal.charts.selectors", "portal.runs.models", "checks.core.base"},
        "portal.charts.selectors": {"portal.runs.models"},
        "portal.runs.models": set(),
        "checks.core.base": set(),
        "tests.meta": {"portal.runs.views"},
    }
    units, behind = app_graph(graph)
    assert units == {"portal.runs": {"portal.charts", "checks"}, "portal.charts": {"portal.runs"}, "checks": set()}
    assert behind[("portal.charts", "portal.runs")] == ["portal.charts.selectors -> portal.runs.models"]
    assert cycles(units) == [{"portal.runs", "portal.charts"}]


def test_no_module_outside_checks_is_in_an_import_cycle() -> None:
    assert _loops(("portal", "worker", "testbed", "bench", "tests")) == []


def test_no_module_of_checks_is_in_an_import_cycle() -> None:
    assert _loops(("checks",)) == []


def test_a_module_importing_its_sibling_does_not_loop_through_their_package() -> None:
    # Python sets a package up before any module in it runs: such an import runs no package again.
    graph = import_graph()
    assert "portal.inventory.importers" in graph["portal.inventory.views"]
    assert "portal.inventory.importers" not in graph["portal.inventory.importers.k8s"]
    assert "portal.inventory.importers.records" in graph["portal.inventory.importers.k8s"]


def test_the_walk_finds_a_cycle_when_there_is_one() -> None:
    graph = {"portal.a": {"worker.b"}, "worker.b": {"worker.c"}, "worker.c": {"portal.a"}, "checks.d": set()}
    assert cycles(graph) == [{"portal.a", "worker.b", "worker.c"}]


def test_the_graph_sees_imports_inside_functions() -> None:
    # portal/runs/apps.py registers the run tasks inside ready(): the walk must see that import.
    assert "portal.runs.tasks" in import_graph()["portal.runs.apps"]


def test_the_remote_execution_layer_imports_no_django_model() -> None:
    graph = import_graph()
    modules = project_modules()
    worker = [m for m in modules if m == "worker" or m.startswith("worker.")]
    offenders = {}
    for name in worker:
        for module in reachable(graph, name):
            named = all_imports(modules[module])
            models = sorted(m for m in named | {module} if m.split(".")[-1] == "models" or ".models." in m)
            if models:
                offenders[f"{name} (via {module})"] = models
    assert offenders == {}


def test_the_remote_execution_layer_reaches_no_app() -> None:
    graph = import_graph()
    reached = {m for name in graph if name.startswith("worker") for m in reachable(graph, name)}
    assert sorted(m for m in reached if _top(m) not in ("worker", "checks")) == []

"""The layering the design promises, checked on the source: no import loop spans two top-level
packages, and the remote-execution layer (worker/) reaches no Django model."""

from __future__ import annotations

from tests.meta.imports import all_imports, cycles, import_graph, project_modules, reachable


def _top(module: str) -> str:
    return module.split(".")[0]


def test_no_import_cycle_spans_two_top_level_packages() -> None:
    spanning = [sorted(c) for c in cycles(import_graph()) if len({_top(m) for m in c}) > 1]
    assert spanning == []


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

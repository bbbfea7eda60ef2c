"""No import loop between the modules of checks/: a module that needs another's definitions imports
it, and that one imports nothing back (thresholds live beside the judging steps that read them).

The package itself is left out: `checks/__init__.py` imports every module to fill the registry, so
every module that imports a sibling (and with it the package) reaches back to the package."""

from __future__ import annotations

from tests.meta.imports import cycles, import_graph


def checks_graph() -> dict[str, set[str]]:
    graph = import_graph()
    return {m: {t for t in edges if t.startswith("checks.")} for m, edges in graph.items() if m.startswith("checks.")}


def test_no_import_cycle_between_checks_modules() -> None:
    assert [sorted(c) for c in cycles(checks_graph())] == []


def test_the_judge_modules_import_nothing_back() -> None:
    graph = checks_graph()
    assert "checks.fs.throughput" not in graph["checks.fs.judge"]
    assert "checks.thermal.check" not in graph["checks.thermal.judge"]
    assert "checks.core.base" not in graph["checks.core.evidence"]

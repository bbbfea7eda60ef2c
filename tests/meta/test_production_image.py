"""The demo stays out of production: no production module reaches the simulator (testbed/) or the
demo app (portal/demo), nor starts a program of the simulator; the image's build leaves both out;
and a portal without them starts: its system checks, URL conf and commands, with `kiln demo` saying
that the demo is not installed."""

from __future__ import annotations

import ast
import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

from setuptools import find_packages

from tests.conftest import REPO
from tests.meta.imports import import_graph, project_modules, reachable

DEMO = ("testbed", "portal.demo")


def _is_demo(module: str) -> bool:
    return any(module == d or module.startswith(f"{d}.") for d in DEMO)


def test_no_production_module_reaches_the_simulator_or_the_demo() -> None:
    graph = import_graph()
    production = [m for m in graph if m.split(".")[0] in ("portal", "worker", "checks") and not _is_demo(m)]
    # Who imports it first, then (through modules outside production, if any) who reaches it at all.
    importers = {name: sorted(m for m in graph[name] if _is_demo(m)) for name in production}
    assert {name: named for name, named in importers.items() if named} == {}
    assert [name for name in production if any(_is_demo(m) for m in reachable(graph, name))] == []


def _module_strings(path: Path) -> list[str]:
    """A module's string literals naming a module of the simulator (`python -m testbed.sim...`)."""
    return [
        node.value
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and SIMULATOR_MODULE.search(node.value)
    ]


SIMULATOR_MODULE = re.compile(r"\btestbed\.\w")


def test_no_production_module_starts_the_simulator() -> None:
    """Imports aside: no program of the simulator run by name (`make up` starts them: the demo app)."""
    modules = project_modules()
    production = [m for m in modules if m.split(".")[0] in ("portal", "worker", "checks") and not _is_demo(m)]
    assert {m: found for m in production if (found := _module_strings(modules[m]))} == {}
    assert _module_strings(modules["portal.demo.up"])  # where the demo starts its facility service


def test_the_walk_sees_the_demo_reach_the_simulator() -> None:
    graph = import_graph()
    assert "testbed.sim" in reachable(graph, "portal.demo.management.commands.kiln_demo")  # via the cluster
    # Imported inside facility_served() only: the walk sees it all the same.
    assert "testbed.sim.redfish_facility" in graph["portal.demo.facility"]


# --- the image ------------------------------------------------------------------------------------


def _pattern(line: str) -> re.Pattern[str]:
    """One .dockerignore pattern as a regular expression over paths relative to the build context (the
    part of Docker's syntax used there: `*`, `?` and `**`)."""
    regex = ""
    for segment in line.strip("/").split("/"):
        if segment == "**":
            regex += "(?:[^/]+/)*"
        else:
            regex += re.escape(segment).replace(r"\*", "[^/]*").replace(r"\?", "[^/]") + "/"
    return re.compile(regex.removesuffix("/"))


def _dockerignore_patterns() -> list[re.Pattern[str]]:
    lines = [line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()]
    lines = [line for line in lines if line and not line.startswith("#")]
    assert not [line for line in lines if line.startswith("!")], "this test does not read `!` exceptions"
    return [_pattern(line) for line in lines]


def _ignored(path: str, patterns: list[re.Pattern[str]]) -> bool:
    """A path is left out when it or a folder above it matches a pattern."""
    parts = path.split("/")
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    return any(p.fullmatch(prefix) for p in patterns for prefix in prefixes)


def _image_files() -> list[str]:
    """The files the Dockerfile's COPY lines take from the build context, .dockerignore applied."""
    patterns = _dockerignore_patterns()
    sources: list[str] = []
    for line in (REPO / "Dockerfile").read_text().splitlines():
        words = shlex.split(line) if line.startswith("COPY ") else []
        if words and not any(w.startswith("--from") for w in words):
            sources += [w for w in words[1:-1] if not w.startswith("--")]
    files = []
    for source in sources:
        root = REPO / source
        found = [root] if root.is_file() else [p for p in root.rglob("*") if p.is_file()]
        files += [p.relative_to(REPO).as_posix() for p in found]
    return [f for f in files if not _ignored(f, patterns)]


def test_the_image_carries_neither_the_simulator_nor_the_demo_app() -> None:
    files = _image_files()
    assert "portal/settings.py" in files and "checks/__init__.py" in files  # the walk sees the COPY lines
    assert [f for f in files if f.startswith(("testbed/", "portal/demo/"))] == []


def test_the_images_package_list_leaves_out_the_simulator_and_the_demo_app(tmp_path: Path) -> None:
    """What `pip install .` in the image packs: pyproject's package list over the image's files."""
    for name in _image_files():
        if name.endswith("__init__.py"):
            (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / name).touch()
    found = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    packages = find_packages(where=str(tmp_path), include=found["include"], exclude=found.get("exclude", ()))
    assert {"portal", "portal.runs", "checks", "worker"} <= set(packages)
    assert [p for p in packages if _is_demo(p)] == []


def test_the_ignore_patterns_match_as_docker_reads_them() -> None:
    patterns = [_pattern(p) for p in ("testbed", "portal/demo", "**/__pycache__", "*.log")]
    assert _ignored("testbed/sim/__init__.py", patterns)
    assert _ignored("portal/demo/apps.py", patterns)
    assert _ignored("portal/runs/__pycache__/x.pyc", patterns)
    assert not _ignored("portal/demonstration.py", patterns)
    assert not _ignored("portal/runs/models.py", patterns)
    assert _ignored("x.log", patterns) and not _ignored("logs/x.log", patterns)


# --- a portal without the demo ----------------------------------------------------------------------

# As in the image: neither the simulator nor the demo app can be imported (an import of either fails),
# and KILN_DEMO is unset, so the settings find them absent themselves.
ABSENT = """
import sys
sys.modules["testbed"] = sys.modules["portal.demo"] = None
"""
WITHOUT_DEMO = (
    ABSENT
    + """
import django
django.setup()
from django.apps import apps
from django.core.management import call_command, get_commands
from django.urls import get_resolver
call_command("check", fail_level="ERROR")
def views(patterns):  # every include() loaded: every view module imported
    return [v for p in patterns for v in (views(p.url_patterns) if hasattr(p, "url_patterns") else [p])]
assert len(views(get_resolver().url_patterns)) > 50
import worker.celery  # the worker's entry point
assert not apps.is_installed("portal.demo")
assert "kiln_demo" not in get_commands()
print("started")
"""
)


def _absent(code: str, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "KILN_DEMO"}
    env |= {"DJANGO_SETTINGS_MODULE": "portal.settings", **extra}
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)


def test_the_portal_starts_and_checks_clean_without_the_demo() -> None:
    done = _absent(WITHOUT_DEMO)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "started"


def test_kiln_demo_says_the_demo_is_not_installed() -> None:
    done = _absent(ABSENT + "from portal.cli.main import main\nmain(['demo'])")
    assert done.returncode == 2, done.stderr
    assert "the demo is not part of this installation" in done.stderr


def test_asking_for_a_demo_that_is_absent_stops_the_settings() -> None:
    done = _absent(ABSENT + "import django\ndjango.setup()", KILN_DEMO="1")
    assert done.returncode == 1
    assert "KILN_DEMO=1, but this installation has no demo" in done.stderr


def test_kiln_demo_0_leaves_the_demo_out_of_a_checkout() -> None:
    code = "import django\ndjango.setup()\nfrom django.apps import apps\nprint(apps.is_installed('portal.demo'))"
    assert _absent(code, KILN_DEMO="0").stdout.strip() == "False"
    assert _absent(code).stdout.strip() == "True"  # where both are present, it is on unless told

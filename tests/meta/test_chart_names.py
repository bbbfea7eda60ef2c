"""The chart code knows no measurement name: every name a chart, the capacity page, the ECC table or
the certificate's charts read comes from the check kind's Presentation. A string literal in that code
equal to a name some check declares or judges is a name the portal has started to keep again."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.conftest import REPO

CHART_CODE = ("portal/charts", "portal/certificates/charts.py")
CHART_TEMPLATES = "portal/charts/templates/charts"
# Ordinary words that one check also uses as a measurement name (mdtest's count of nodes): a page
# may say "nodes" without reading that measurement.
WORDS = frozenset({"nodes", "tasks"})
# What Django never sends, and the expressions of what it does: {{ ... }} and {% ... %}.
TEMPLATE_COMMENTS = re.compile(r"\{#[^\n]*?#\}|\{%\s*comment\s*%\}.*?\{%\s*endcomment\s*%\}", re.DOTALL)
TEMPLATE_CODE = re.compile(r"\{\{(.*?)\}\}|\{%(.*?)%\}", re.DOTALL)
TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def declared_names() -> frozenset[str]:
    """Every measurement and series name the checks declare (presentation, remedies, GPU and hardware identity)
    or judge as evidence."""
    from checks import presented
    from checks.core.base import REGISTRY

    names: set[str] = set()
    for _, shown in presented():
        names |= shown.charted_names() | shown.fleet_metrics()
        names |= {n for r in shown.remedies for n in r.names} | {n for n, _ in shown.gpu_identity}
        names |= {h.measurement for h in shown.hardware}
        names.add(shown.gpu_bus_id)
    for cls in REGISTRY.values():
        names |= set(getattr(cls, "evidence", {}) or {})
    return frozenset(names - {""} - WORDS)


def _docstrings(tree: ast.AST) -> set[int]:
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, kinds) and node.body and isinstance(node.body[0], ast.Expr)
    }


def _shown(path: Path) -> str:
    return str(path.relative_to(REPO) if path.is_relative_to(REPO) else path)


def python_literals(path: Path, names: frozenset[str]) -> list[str]:
    tree = ast.parse(path.read_text())
    docs = _docstrings(tree)
    return [
        f"{_shown(path)}:{node.lineno}: {node.value!r}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
        if node.value in names
    ]


def template_names(path: Path, names: frozenset[str]) -> list[str]:
    """Names in a template's expressions (a variable's attribute, a quoted string), comments aside."""
    shown = TEMPLATE_COMMENTS.sub("", path.read_text())
    found = []
    for match in TEMPLATE_CODE.finditer(shown):
        code = match.group(1) or match.group(2) or ""
        found += [f"{_shown(path)}: {t}" for t in TOKEN.findall(code) if t in names]
    return found


def chart_files() -> list[Path]:
    files: list[Path] = []
    for part in CHART_CODE:
        where = REPO / part
        files += sorted(where.rglob("*.py")) if where.is_dir() else [where]
    return files


def test_the_declared_names_are_collected() -> None:
    names = declared_names()
    # One of each family's declarations: the collection itself must not come back empty.
    assert {"busbw", "temp_gpu", "ecc_volatile_uncorrected", "rack_peak_power_w", "write_bw_sum"} <= names


def test_chart_code_holds_no_measurement_name() -> None:
    names = declared_names()
    found = [hit for path in chart_files() for hit in python_literals(path, names)]
    assert found == [], "read these names from the check's Presentation instead:\n" + "\n".join(found)


def test_chart_templates_hold_no_measurement_name() -> None:
    names = declared_names()
    templates = sorted((REPO / CHART_TEMPLATES).rglob("*.html"))
    assert templates, f"no chart templates under {CHART_TEMPLATES}"
    found = [hit for path in templates for hit in template_names(path, names)]
    assert found == [], "read these names from the check's Presentation instead:\n" + "\n".join(found)


def test_it_finds_a_name_in_code_and_in_a_template(tmp_path: Path) -> None:
    names = frozenset({"busbw"})
    module, template = tmp_path / "probe.py", tmp_path / "probe.html"
    module.write_text('"""busbw in a docstring is prose."""\nNAME = "busbw"\n')
    template.write_text('{# busbw #}{{ s.values.busbw }} {% if x == "busbw" %}{% endif %} busbw\n')
    assert python_literals(module, names) == [f"{module}:2: 'busbw'"]
    assert template_names(template, names) == [f"{template}: busbw"] * 2

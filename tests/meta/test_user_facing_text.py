"""Text that reaches a page names no source file (the health page once said "see
portal/health/trends.py"). Users read what a rule does on the page, not where it is coded."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.conftest import REPO

SOURCE_PATH = re.compile(
    r"\b(?:portal|checks|worker|testbed|scripts|bench|tests|templates)/[\w/.-]*\.(?:py|sh|c|html)\b"
)
# What Django never sends: one-line {# #} comments and {% comment %} blocks (a {# #} spanning lines
# is printed as is, so it is not removed here).
TEMPLATE_COMMENTS = re.compile(r"\{#[^\n]*?#\}|\{%\s*comment\s*%\}.*?\{%\s*endcomment\s*%\}", re.DOTALL)


def template_paths() -> list[str]:
    found = []
    for path in sorted((REPO / "portal").glob("**/templates/**/*.html")):
        shown = TEMPLATE_COMMENTS.sub("", path.read_text())
        found += [f"{path.relative_to(REPO)}: {m}" for m in SOURCE_PATH.findall(shown)]
    return found


def _docstrings(tree: ast.AST) -> set[int]:
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, kinds) and node.body and isinstance(node.body[0], ast.Expr)
    }


# `make up`'s launcher, a command line of the checkout like portal/cli (it lives with the demo it starts).
MAKE_UP = REPO / "portal" / "demo" / "up.py"


def string_paths(root: Path) -> list[str]:
    """Source paths in the string literals of the portal's code, docstrings aside. Management
    commands and the `kiln`/`make up` command lines (terminal help for operators, and the checkout's
    programs they start) and models (field help texts: the admin only, and rewording one is a
    migration) are left out."""
    found = []
    for path in sorted(root.rglob("*.py")):
        if {"migrations", "management", "cli"} & set(path.parts) or path.name == "models.py" or path == MAKE_UP:
            continue
        found += [f"{path.relative_to(REPO)}:{where}" for where in literal_paths(path)]
    return found


def literal_paths(module: Path) -> list[str]:
    tree = ast.parse(module.read_text())
    docs = _docstrings(tree)
    return [
        f"{node.lineno}: {m}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
        for m in SOURCE_PATH.findall(node.value)
    ]


def test_no_template_shows_a_source_path() -> None:
    assert template_paths() == []


def test_no_string_of_the_portal_shows_a_source_path() -> None:
    assert string_paths(REPO / "portal") == []


def test_the_scan_finds_a_path_where_there_is_one(tmp_path: Path) -> None:
    assert SOURCE_PATH.findall("(see portal/health/trends.py)") == ["portal/health/trends.py"]
    assert TEMPLATE_COMMENTS.sub("", "{# checks/core/presentation.py #}shown") == "shown"
    assert SOURCE_PATH.findall(TEMPLATE_COMMENTS.sub("", "{# a\nportal/x.py #}")) == ["portal/x.py"]
    module = tmp_path / "m.py"
    module.write_text('"""Docstring: portal/a.py."""\nMESSAGE = "see worker/ssh.py"\n')
    assert literal_paths(module) == ["2: worker/ssh.py"]

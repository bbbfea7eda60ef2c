"""Every default threshold number has its source written next to it.

For each check kind: every field of its Thresholds (and Params) dataclass whose default is a number,
and every number in its per-profile thresholds, must have a comment on the same line or in the
comment block right above it (the convention the check modules follow).
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap

import pytest

import checks  # noqa: F401  (fills the registry)
from checks.core.base import REGISTRY


def _commented(lines: list[str], index: int) -> bool:
    """Line `index`, or the lines above it in the same paragraph (up to a blank line or the class
    line), hold a comment: a source written for a whole profile block covers its numbers."""
    i = index
    while i >= 0:
        stripped = lines[i].strip()
        if "#" in stripped:
            return True
        if not stripped or stripped.startswith(("class ", "def ", "@")):
            return False
        i -= 1
    return False


def _numeric(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value not in (0, 1)


def _uncommented_fields(schema: type) -> list[str]:
    source = textwrap.dedent(inspect.getsource(schema))
    lines = source.splitlines()
    defaults = {f.name: f.default for f in dataclasses.fields(schema)}
    missing = []
    for index, line in enumerate(lines):
        stripped = line.strip()
        name = stripped.split(":", 1)[0]
        if name in defaults and _numeric(defaults[name]) and not _commented(lines, index):
            missing.append(name)
    return missing


@pytest.mark.parametrize("kind", sorted(REGISTRY))
def test_it_documents_the_source_of_every_default_threshold(kind: str) -> None:
    check_class = REGISTRY[kind]
    assert _uncommented_fields(check_class.Thresholds) == [], f"{kind}: threshold defaults without a source"


@pytest.mark.parametrize("kind", sorted(k for k, c in REGISTRY.items() if c.profile_thresholds))
def test_it_documents_the_source_of_every_profile_threshold(kind: str) -> None:
    check_class = REGISTRY[kind]
    module_source = inspect.getsource(inspect.getmodule(check_class))
    tree = ast.parse(module_source)
    lines = module_source.splitlines()
    missing = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.ClassDef) and node.name == check_class.__name__):
            continue
        for stmt in node.body:
            target = getattr(stmt, "target", None) or (getattr(stmt, "targets", [None])[0])
            if getattr(target, "id", None) != "profile_thresholds" or stmt.value is None:
                continue
            for inner in ast.walk(stmt.value):
                if isinstance(inner, ast.Constant) and _numeric(inner.value):
                    if not _commented(lines, inner.lineno - 1):
                        missing.append(f"line {inner.lineno}: {lines[inner.lineno - 1].strip()}")
    assert missing == [], f"{kind}: profile numbers without a source"


@dataclasses.dataclass
class _Undocumented:
    max_temperature_c: float = 85.0


@dataclasses.dataclass
class _Documented:
    # NVIDIA datasheet: slowdown at 87 C.
    max_temperature_c: float = 85.0


def test_it_notices_a_number_without_a_source() -> None:
    assert _uncommented_fields(_Undocumented) == ["max_temperature_c"]
    assert _uncommented_fields(_Documented) == []

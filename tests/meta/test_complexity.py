"""The complexity ceiling: no function of Kiln's code over 20 (radon's cyclomatic complexity).

KNOWN_OVER lists the functions that were over it when this test was added: a debt, each to
be split, never a place to add one. The test fails for a function over 20 that is not listed, for a
listed one that grew, and for a listed one that is gone or back under the ceiling (then delete its
line, so that the list only shrinks).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from radon.complexity import cc_visit
from radon.visitors import Function

from tests.conftest import REPO

CEILING = 20  # the project guide's limit (radon rank C ends at 20)
PACKAGES = ("portal", "checks", "worker", "testbed", "bench")
# The simulated node tools: Python scripts without the .py suffix (copied to the testbed's nodes).
SCRIPTS = "testbed/sim/tools"

KNOWN_OVER: dict[str, int] = {}  # all paid; keep it empty


def python_files() -> list[Path]:
    """The packages' .py files (migrations aside), then the files in SCRIPTS that start with a python shebang."""
    files = [path for package in PACKAGES for path in sorted((REPO / package).rglob("*.py"))]
    files = [path for path in files if "migrations" not in path.parts]
    for path in sorted((REPO / SCRIPTS).iterdir()):
        first_line = path.read_bytes().partition(b"\n")[0] if path.is_file() else b""
        if first_line.startswith(b"#!") and b"python" in first_line:
            files.append(path)
    return files


@cache
def complexities() -> dict[str, int]:
    """Every function and method of python_files(): 'path::[Class.]name' -> complexity."""
    found: dict[str, int] = {}
    for path in python_files():
        for block in cc_visit(path.read_text(encoding="utf-8")):
            if isinstance(block, Function):
                name = f"{block.classname}.{block.name}" if block.classname else block.name
                found[f"{path.relative_to(REPO).as_posix()}::{name}"] = block.complexity
    return found


def test_no_function_is_over_the_ceiling_unless_listed_and_none_grew() -> None:
    over = {name: c for name, c in complexities().items() if c > CEILING}
    new = {name: c for name, c in over.items() if name not in KNOWN_OVER}
    grown = {name: (KNOWN_OVER[name], c) for name, c in over.items() if c > KNOWN_OVER.get(name, c)}
    assert not new, f"over complexity {CEILING} (split them): {new}"
    assert not grown, f"grew further over {CEILING} (listed, now): {grown}"


def test_the_list_of_known_debts_only_shrinks() -> None:
    found = complexities()
    paid = sorted(name for name in KNOWN_OVER if found.get(name, 0) <= CEILING)
    assert not paid, f"gone or at most {CEILING} now; delete from KNOWN_OVER: {paid}"


def test_it_reads_the_simulated_node_tools() -> None:
    found = complexities()
    assert f"{SCRIPTS}/gpu_burn::burn" in found
    assert f"{SCRIPTS}/mpirun::main" in found


def test_it_sees_a_function_over_the_ceiling() -> None:
    branches = "\n".join(f"    if x == {i}:\n        return {i}" for i in range(CEILING))
    [block] = cc_visit(f"def f(x):\n{branches}\n    return -1\n")
    assert block.complexity == CEILING + 1

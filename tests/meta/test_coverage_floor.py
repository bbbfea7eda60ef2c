"""The coverage floor (.ci/coverage-floor, `make test`'s --cov-fail-under) may only rise: every
committed version of the file, and the one in the checkout, is at least the one before it."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from tests.conftest import REPO

FLOOR = REPO / ".ci" / "coverage-floor"
FLOOR_PATH = ".ci/coverage-floor"


def parse_floor(text: str) -> float:
    """The file's one number (a percentage); anything else in it is an error, not a floor of 0."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*", text)
    if not match:
        raise ValueError(f"{FLOOR_PATH} must hold one number, got {text!r}")
    return float(match.group(1))


def floors_in_history(log_patch: str) -> list[float]:
    """The floors `git log -p --reverse` shows the file taking, oldest first (its added lines)."""
    added = [line[1:] for line in log_patch.splitlines() if line.startswith("+") and not line.startswith("+++")]
    return [parse_floor(line) for line in added]


def lowered(floors: list[float]) -> list[tuple[float, float]]:
    return [(before, after) for before, after in zip(floors, floors[1:], strict=False) if after < before]


def _history() -> str:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout: the floor's history cannot be read")
    run = subprocess.run(
        ["git", "log", "-p", "--reverse", "--format=commit %H", "--", FLOOR_PATH],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return run.stdout


def test_the_floor_never_went_down() -> None:
    floors = [*floors_in_history(_history()), parse_floor(FLOOR.read_text())]
    assert not lowered(floors), f"{FLOOR_PATH} went down: {lowered(floors)} (history, oldest first: {floors})"


def test_a_lowered_floor_is_caught() -> None:
    patch = "commit a\n+++ b/.ci/coverage-floor\n+70\ncommit b\n-70\n+72.5\ncommit c\n-72.5\n+71\n"
    assert floors_in_history(patch) == [70.0, 72.5, 71.0]
    assert lowered(floors_in_history(patch)) == [(72.5, 71.0)]
    with pytest.raises(ValueError):
        parse_floor("seventy")


def test_make_test_fails_below_the_floor() -> None:
    makefile = (REPO / "Makefile").read_text()
    assert f"--cov-fail-under=$$(cat {FLOOR_PATH})" in makefile
    assert "$(COVERAGE)" in makefile.split("\ntest: install", 1)[1].split("\n\n", 1)[0]

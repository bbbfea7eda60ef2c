"""CI never skips silently: with CI=true a run that skipped anything exits non-zero."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

SKIPPING = """
import pytest

def test_it_runs():
    assert True

@pytest.mark.skipif(True, reason="a prerequisite is missing")
def test_it_would_skip():
    assert True
"""


def _run(tmp_path: Path, ci: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_sample.py").write_text(SKIPPING)
    env = {**os.environ, "CI": ci, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:django", "-p", "tests.ci_guard",
         "--rootdir", str(tmp_path), str(tmp_path / "test_sample.py")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_it_fails_a_ci_run_that_skipped_a_test(tmp_path: Path) -> None:
    proc = _run(tmp_path, "true")
    assert proc.returncode == 1, proc.stdout
    assert "1 skipped test(s) fail this run" in proc.stdout and "a prerequisite is missing" in proc.stdout


def test_it_lets_a_local_run_skip(tmp_path: Path) -> None:
    proc = _run(tmp_path, "")
    assert proc.returncode == 0, proc.stdout

"""The layers of pyproject.toml's [tool.importlinter] hold on the tree, and `lint-imports` does
catch an import that climbs them (a copy of the tree with one upward import added)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def _lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), str(root / "pyproject.toml"), "--no-cache"],
        cwd=root,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_tree_keeps_its_layers() -> None:
    result = _lint_imports(REPO)
    assert result.returncode == 0, result.stdout + result.stderr


def test_an_upward_import_breaks_the_layers(tmp_path: Path) -> None:
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    for package in ("checks", "worker", "portal"):
        shutil.copytree(REPO / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__", "static"))
    # The lowest layer reaching into an app.
    (tmp_path / "checks" / "upward.py").write_text("from portal.runs.models import Run  # noqa: F401\n")
    result = _lint_imports(tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "checks.upward -> portal.runs.models" in result.stdout

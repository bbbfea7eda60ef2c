"""A fresh virtualenv with Kiln installed as `make install` does (the lock with hashes, then the
project with no build isolation, so nothing is downloaded to build it): its `kiln` script answers
from any directory without the virtualenv activated. About 1.5 min with pip's cache."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.integration


def _run(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900, **kwargs)  # type: ignore[call-overload]
    assert done.returncode == 0, f"{argv}: exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.mark.timeout(1200)
def test_a_fresh_virtualenv_runs_kiln_without_activation(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    started = time.monotonic()
    _run([sys.executable, "-m", "venv", str(venv)])
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    _run([*pip, "--require-hashes", "-r", str(REPO / "requirements" / "base.txt")])
    # --no-index: building Kiln itself needs only the setuptools the lock installed (requirements/build.in).
    _run([*pip, "--no-deps", "--no-build-isolation", "--no-index", "-e", str(REPO)], cwd=tmp_path)
    print(f"fresh virtualenv installed in {time.monotonic() - started:.0f} s")

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {"PATH": "/usr/bin:/bin", "KILN_DATA_DIR": str(tmp_path / "data")}
    kiln = str(venv / "bin" / "kiln")
    assert _run([kiln, "--help"], cwd=elsewhere, env=env).stdout.startswith("usage: kiln [-h] [--version] SUB ...")
    assert "usage: kiln run [-h] [--nodes NODES]" in _run([kiln, "run", "--help"], cwd=elsewhere, env=env).stdout
    assert _run([kiln, "--version"], cwd=elsewhere, env=env).stdout.strip() == "kiln 0.1.0"

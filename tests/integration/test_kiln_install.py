"""A fresh virtualenv, made as a new user makes one (`python3 -m venv`, with the pip the interpreter
bundles), installed by `make install` itself: the lock without resolving, Kiln without build isolation,
then the lock's completeness check. Its `kiln` script answers from any directory without the
virtualenv activated. About 1.5 min with pip's cache."""

from __future__ import annotations

import ensurepip
import os
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
def test_a_fresh_virtualenv_with_the_bundled_pip_installs_by_make_and_runs_kiln(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    started = time.monotonic()
    _run([sys.executable, "-m", "venv", str(venv)])
    python = str(venv / "bin" / "python")
    # The pip a new user starts with: whatever this interpreter bundles (23.2.1 for Python 3.11.7,
    # which resolved WeasyPrint's fonttools[woff] against the index's newest release).
    bundled = _run([python, "-m", "pip", "--version"]).stdout.split()[1]
    assert bundled == ensurepip.version()

    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAKE", "PIP_"))}
    done = _run(["make", "-C", str(REPO), "install", f"VENV={venv}"], env=env)
    print(f"make install into a fresh virtualenv: {time.monotonic() - started:.0f} s")
    assert "requirements/dev.txt: complete (" in done.stdout
    assert (venv / ".installed").exists()

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {"PATH": "/usr/bin:/bin", "KILN_DATA_DIR": str(tmp_path / "data")}
    kiln = str(venv / "bin" / "kiln")
    assert _run([kiln, "--help"], cwd=elsewhere, env=env).stdout.startswith("usage: kiln [-h] [--version] SUB ...")
    assert "usage: kiln run [-h] [--nodes NODES]" in _run([kiln, "run", "--help"], cwd=elsewhere, env=env).stdout
    assert _run([kiln, "--version"], cwd=elsewhere, env=env).stdout.strip() == "kiln 0.1.0"

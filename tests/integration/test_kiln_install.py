"""A virtualenv made as a new user makes one (`python3 -m venv`, with the pip the interpreter
bundles), installed by `make install` itself: the lock without resolving, Kiln without build isolation,
then the lock's completeness check. Its `kiln` script answers from any directory without the
virtualenv activated.

`make install` records in the virtualenv's `.installed` which pip installed it and the digests of
the files it installed from. In a clean clone (CI) the suite runs in exactly such an install, made
minutes before by the bundled pip from today's lock, and the test checks that one rather than install
a second (about 100 s of CPU). Otherwise (a developer's virtualenv, installed again by its own newer
pip, or from an older lock) it makes a fresh virtualenv: about 1.5 min with pip's cache."""

from __future__ import annotations

import ensurepip
import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.integration

LOCK = "requirements/dev.txt"


def _run(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900, **kwargs)  # type: ignore[call-overload]
    assert done.returncode == 0, f"{argv}: exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def _digest_line(name: str) -> str:
    """A line of `sha256sum` for a file of the checkout, as `make install` records it."""
    return f"{hashlib.sha256((REPO / name).read_bytes()).hexdigest()}  {name}"


def installed_by_bundled_pip(venv: Path) -> bool:
    """Whether `venv` was installed by `make install` from today's lock and pyproject.toml, by the
    pip its interpreter bundles (what a new virtualenv starts with)."""
    try:
        record = (venv / ".installed").read_text().splitlines()
    except OSError:
        return False
    today = {_digest_line(LOCK), _digest_line("pyproject.toml")}
    return bool(record) and record[0] == f"pip {ensurepip.version()}" and today <= set(record)


def _make_fresh_virtualenv(tmp_path: Path) -> Path:
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
    assert f"{LOCK}: complete (" in done.stdout
    return venv


@pytest.mark.timeout(1200)
def test_a_fresh_virtualenv_with_the_bundled_pip_installs_by_make_and_runs_kiln(tmp_path: Path) -> None:
    this = Path(sys.prefix)
    if sys.prefix != sys.base_prefix and installed_by_bundled_pip(this):
        venv = this
        print(f"this suite's virtualenv {venv} is a fresh install by the bundled pip {ensurepip.version()}")
    else:
        venv = _make_fresh_virtualenv(tmp_path)
    assert installed_by_bundled_pip(venv), (venv / ".installed").read_text()
    assert f"{LOCK}: complete (" in (venv / ".installed").read_text()

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {"PATH": "/usr/bin:/bin", "KILN_DATA_DIR": str(tmp_path / "data")}
    kiln = str(venv / "bin" / "kiln")
    assert _run([kiln, "--help"], cwd=elsewhere, env=env).stdout.startswith("usage: kiln [-h] [--version] SUB ...")
    assert "usage: kiln run [-h] [--nodes NODES]" in _run([kiln, "run", "--help"], cwd=elsewhere, env=env).stdout
    assert _run([kiln, "--version"], cwd=elsewhere, env=env).stdout.strip() == "kiln 0.1.0"


def test_a_record_from_another_pip_or_lock_is_not_a_fresh_install(tmp_path: Path) -> None:
    lock, project = _digest_line(LOCK), _digest_line("pyproject.toml")
    record = tmp_path / ".installed"
    assert not installed_by_bundled_pip(tmp_path)  # no record
    record.write_text(f"pip {ensurepip.version()}\n{LOCK}: complete (1 packages)\n{lock}\n{project}\n")
    assert installed_by_bundled_pip(tmp_path)
    record.write_text(f"pip 99.0\n{LOCK}: complete (1 packages)\n{lock}\n{project}\n")
    assert not installed_by_bundled_pip(tmp_path), "installed again by the virtualenv's own upgraded pip"
    record.write_text(f"pip {ensurepip.version()}\n{LOCK}: complete (1 packages)\n{'0' * 64}  {LOCK}\n{project}\n")
    assert not installed_by_bundled_pip(tmp_path), "installed from another lock"

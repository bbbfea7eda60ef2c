"""Stopping `make up` with Ctrl-C is clean (issue 16: make printed `*** [Makefile:30: up] Error 143`).

The real scripts/up.sh runs under a real make, in a folder where its programs (python, celery,
gunicorn) are stand-ins that only wait: starting the real portal, worker and demo takes minutes.
The terminal's Ctrl-C is a SIGINT to the whole foreground process group."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from tests.conftest import REPO

PYTHON_STAND_IN = """#!/bin/bash
case "$1" in
  -c) echo "{data}" ;;  # the data directory, as the settings see it
  -m) exec sleep 60 ;;  # the demo's facility service
  -) exit 0 ;;  # the port check: the web server is up
  *) echo "python $*" ;;  # manage.py kiln_demo --soak, kiln_admin
esac
"""


def sandbox(tmp_path: Path) -> Path:
    (tmp_path / "scripts").mkdir()
    shutil.copy(REPO / "scripts" / "up.sh", tmp_path / "scripts" / "up.sh")
    (tmp_path / "scripts" / "metrics_hint.sh").write_text("echo metrics\n")
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").write_text(PYTHON_STAND_IN.format(data=tmp_path / "data"))
    for name in ("celery", "gunicorn"):
        (bin_dir / name).write_text("#!/bin/bash\nexec sleep 60\n")
    for program in bin_dir.iterdir():
        program.chmod(0o755)
    (tmp_path / "Makefile").write_text(up_target())
    return tmp_path


def up_target() -> str:
    """The project Makefile's shell and the recipe line of `up` that starts scripts/up.sh (the
    lines before it set the data folder up). Which shell runs the recipe, and whether it execs,
    decides what make prints when the group is interrupted."""
    lines = (REPO / "Makefile").read_text().splitlines()
    shell = [line for line in lines if line.startswith("SHELL :=")]
    start = [line for line in lines if line.startswith("\t") and "scripts/up.sh" in line]
    assert len(shell) == 1 and len(start) == 1, "the Makefile's up target changed: update this test"
    return f"{shell[0]}\nHOST ?= 127.0.0.1\nPORT ?= 8000\nup:\n{start[0]}\n"


def _as_a_terminal_job() -> None:
    """A shell's foreground job starts with the default signal handlers (this test runner's may not)."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGQUIT, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)


def _wait_for(path: Path, text: str, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = path.read_text()
        if text in out:
            return out
        time.sleep(0.1)
    raise AssertionError(f"{text!r} never printed:\n{path.read_text()}")


def _group_gone(pgid: int, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


def start(argv: list[str], folder: Path, log: Path) -> subprocess.Popen[bytes]:
    with log.open("w") as out:
        return subprocess.Popen(
            argv, cwd=folder, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=_as_a_terminal_job,
        )  # fmt: skip


def stop(process: subprocess.Popen[bytes], log: Path, sig: signal.Signals) -> str:
    """Once up.sh says how to stop it, `sig` to the whole process group; what was printed."""
    try:
        _wait_for(log, "Press Ctrl-C to stop.", timeout=30)
        os.killpg(process.pid, sig)
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    return log.read_text()


def test_ctrl_c_stops_make_up_without_an_error_and_leaves_nothing_running(tmp_path: Path) -> None:
    log = tmp_path / "make.out"
    make = start(["make", "up"], sandbox(tmp_path), log)
    printed = stop(make, log, signal.SIGINT)  # the terminal's Ctrl-C: SIGINT to the foreground group
    assert "Error" not in printed and "***" not in printed, printed
    assert _group_gone(make.pid), "up.sh left its children running"


def test_a_term_stops_up_sh_with_status_0_and_leaves_nothing_running(tmp_path: Path) -> None:
    """A service manager's stop. (A TERM to make as well races in make itself, which then may
    report its own "wait: No child processes": not this script's to fix.)"""
    log = tmp_path / "up.out"
    up = start(["bash", "scripts/up.sh"], sandbox(tmp_path), log)
    stop(up, log, signal.SIGTERM)
    assert up.returncode == 0, log.read_text()
    assert _group_gone(up.pid), "up.sh left its children running"

"""`make up` (portal/demo/up.py): Ctrl-C and TERM stop it cleanly (make once printed
`*** [Makefile:30: up] Error 143`), a program of it that dies is named and restarted, and a port
already in use is named before anything starts.

The stop tests run the real supervisor under a real make, in a folder where the programs it starts
(celery, gunicorn, the facility service, manage.py) are stand-ins that only wait: starting the real
portal, worker and demo takes minutes. The terminal's Ctrl-C is a SIGINT to the whole foreground
process group. The restart test runs the real Celery worker and gunicorn on the embedded default."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO

PYTHON_STAND_IN = """#!/bin/bash
case "$1 $2" in
  "-m portal.demo.up") exec {python} "$@" ;;  # the supervisor itself, the checkout's (PYTHONPATH)
  "-m testbed.sim.redfish_facility") exec sleep 60 ;;  # the demo's facility service
  *) echo "python $*" ;;  # manage.py kiln_demo --soak, kiln_admin
esac
"""
# Listens on --bind (its third argument) and waits, as gunicorn would once up.
GUNICORN_STAND_IN = """#!/bin/bash
exec {python} -c 'import socket, sys, time
host, port = sys.argv[1].rsplit(":", 1)
server = socket.create_server((host, int(port)))
time.sleep(60)' "$3"
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def sandbox(tmp_path: Path) -> Path:
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "metrics_hint.sh").write_text("echo metrics\n")
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").write_text(PYTHON_STAND_IN.format(python=sys.executable))
    (bin_dir / "gunicorn").write_text(GUNICORN_STAND_IN.format(python=sys.executable))
    (bin_dir / "celery").write_text("#!/bin/bash\nexec sleep 60\n")
    for program in bin_dir.iterdir():
        program.chmod(0o755)
    (tmp_path / "Makefile").write_text(up_target())
    return tmp_path


def sandbox_env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(REPO), KILN_ENV_FILE="", KILN_DATA_DIR=str(tmp_path / "data"))
    # Not the default 8470: a demo elsewhere on this machine may hold it, and make up then refuses to start.
    env["KILN_DEMO_FACILITY_PORT"] = str(free_port())
    env.pop("MAKEFLAGS", None)
    return env


def up_target() -> str:
    """The project Makefile's shell and the recipe line of `up` that starts the supervisor (the
    lines before it set the data folder up). Which shell runs the recipe, and whether it execs,
    decides what make prints when the group is interrupted."""
    lines = (REPO / "Makefile").read_text().splitlines()
    shell = [line for line in lines if line.startswith("SHELL :=")]
    start = [line for line in lines if line.startswith("\t") and "portal.demo.up" in line]
    assert len(shell) == 1 and len(start) == 1, "the Makefile's up target changed: update this test"
    return f"{shell[0]}\nBIN := .venv/bin\nHOST ?= 127.0.0.1\nPORT ?= 8000\nup:\n{start[0]}\n"


def _as_a_terminal_job() -> None:
    """A shell's foreground job starts with the default signal handlers (this test runner's may not)."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGQUIT, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)


def _wait_for(path: Path, text: str, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = path.read_text() if path.exists() else ""
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


def start(argv: list[str], folder: Path, log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with log.open("w") as out:
        return subprocess.Popen(
            argv, cwd=folder, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=_as_a_terminal_job,
        )  # fmt: skip


def started_pids(printed: str) -> dict[str, int]:
    """The supervisor's 'started NAME (pid N)' and 'NAME started again (pid N)' lines, the last of each name."""
    found = re.findall(r"^up: (?:started (\w+)|(\w+) started again) \(pid (\d+)\)", printed, flags=re.MULTILINE)
    return {first or again: int(pid) for first, again, pid in found}


def stop(process: subprocess.Popen[bytes], log: Path, sig: signal.Signals) -> str:
    """Once the supervisor says how to stop it, `sig` to the whole process group; what was printed."""
    try:
        _wait_for(log, "Press Ctrl-C to stop.", timeout=60)
        os.killpg(process.pid, sig)
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    return log.read_text()


def assert_all_gone(process: subprocess.Popen[bytes], printed: str) -> None:
    """Nothing left of make's group, nor of the programs' own groups (each runs in a session of its own)."""
    programs = started_pids(printed)
    assert set(programs) == {"facility", "worker", "beat", "web"}, printed
    assert _group_gone(process.pid), "the supervisor's group is still running"
    for name, pid in programs.items():
        assert _group_gone(pid), f"{name} (pid {pid}) is still running"


def test_ctrl_c_stops_make_up_without_an_error_and_leaves_nothing_running(tmp_path: Path) -> None:
    log = tmp_path / "make.out"
    folder = sandbox(tmp_path)
    make = start(["make", "up", f"PORT={free_port()}"], folder, log, sandbox_env(tmp_path))
    printed = stop(make, log, signal.SIGINT)  # the terminal's Ctrl-C: SIGINT to the foreground group
    assert "Error" not in printed and "***" not in printed, printed
    assert "up: stopping facility, worker, beat, web" in printed, printed
    assert_all_gone(make, printed)


def test_a_term_stops_the_supervisor_with_status_0_and_leaves_nothing_running(tmp_path: Path) -> None:
    """A service manager's stop. (A TERM to make as well races in make itself, which then may
    report its own "wait: No child processes": not the supervisor's to fix.)"""
    log = tmp_path / "up.out"
    folder = sandbox(tmp_path)
    argv = [".venv/bin/python", "-m", "portal.demo.up", "127.0.0.1", str(free_port())]
    up = start(argv, folder, log, sandbox_env(tmp_path))
    printed = stop(up, log, signal.SIGTERM)
    assert up.returncode == 0, printed
    assert_all_gone(up, printed)
    for name in ("facility", "worker", "beat", "web"):  # each program's log says when it started and stopped
        text = (tmp_path / "data" / "logs" / f"{name}.log").read_text()
        assert f"up: starting {name}: " in text and f"up: {name} (pid {started_pids(printed)[name]}) stopped" in text


# The real programs, as portal/demo/up.py defines them, but only the worker and the web server: the
# facility service needs kiln_demo's config and beat a migrated database, neither of which this needs.
RESTART_DRIVER = """import sys
from pathlib import Path
from portal.demo import up
from portal.cli.supervise import Supervisor
data, port = Path(sys.argv[1]), int(sys.argv[2])
everything = up.programs(data_dir=data, host="127.0.0.1", port=port, facility_port=0)
supervisor = Supervisor([program for program in everything if program.name in ("worker", "web")])
with supervisor.signals_stop():
    supervisor.start()
    sys.exit(supervisor.serve())
"""


def embedded_default_env(data_dir: Path) -> dict[str, str]:
    """`make up`'s settings: SQLite and the filesystem broker in the data folder, no .env."""
    env = dict(os.environ, KILN_ENV_FILE="", KILN_DATA_DIR=str(data_dir))
    for name in ("DATABASE_URL", "CELERY_BROKER_URL"):
        env.pop(name, None)
    return env


def test_a_killed_worker_is_named_with_its_last_log_lines_restarted_and_its_log_kept(tmp_path: Path) -> None:
    data = tmp_path / "data"
    env = embedded_default_env(data)
    init = [sys.executable, "manage.py", "kiln_init", "-v0"]  # the data folder, keys and broker folders
    subprocess.run(init, cwd=REPO, env=env, check=True, capture_output=True)
    port = free_port()
    log = tmp_path / "up.out"
    worker_log = data / "logs" / "worker.log"
    driver = start([sys.executable, "-c", RESTART_DRIVER, str(data), str(port)], REPO, log, env)
    try:
        _wait_for(worker_log, "ready.", timeout=90)
        printed = _wait_for(log, "started web", timeout=5)
        first = started_pids(printed)
        before = worker_log.read_bytes()
        os.killpg(first["worker"], signal.SIGKILL)  # the worker and its pool, as the OOM killer or a crash would

        printed = _wait_for(log, "worker started again", timeout=30)
        named = f"up: worker (pid {first['worker']}) was killed by SIGKILL; the last 20 lines it wrote to {worker_log}:"
        assert named in printed
        # The console shows the log's last 20 lines as they were at the death (before the supervisor's mark).
        at_death = worker_log.read_text().split(f"up: worker (pid {first['worker']}) was killed")[0]
        shown = [line.removeprefix("    | ") for line in printed.splitlines() if line.startswith("    | ")]
        assert shown == at_death.rsplit("\n", 1)[0].split("\n")[-20:], printed  # the mark's own line cut off
        assert any(line.endswith(" ready.") for line in shown), shown
        assert "restarting worker in 1 s (restart 1 of at most 5 within 300 s)" in printed
        again = started_pids(printed)
        assert again["worker"] != first["worker"] and again["web"] == first["web"]  # only the dead one restarted

        # Serving again: the new worker is ready, in the same log, after everything it held before.
        deadline = time.monotonic() + 90
        while worker_log.read_bytes()[len(before) :].count(b" ready.") < 1 and time.monotonic() < deadline:
            time.sleep(0.2)
        after = worker_log.read_bytes()
        assert after.startswith(before), "the worker's log was cut on restart"
        assert b"up: worker (pid %d) was killed by SIGKILL" % first["worker"] in after[len(before) :]
        assert b" ready." in after[len(before) :], after[len(before) :].decode()
        assert socket.create_connection(("127.0.0.1", port), timeout=5)  # the web server never stopped

        os.killpg(driver.pid, signal.SIGTERM)
        assert driver.wait(timeout=30) == 0, log.read_text()
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()
        for pid in started_pids(log.read_text()).values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
    for name, pid in started_pids(log.read_text()).items():
        assert _group_gone(pid), f"{name} (pid {pid}) is still running"


def test_a_port_in_use_is_named_before_anything_starts(
    settings: object, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from portal.demo import up

    with socket.create_server(("127.0.0.1", 0)) as busy:
        taken = busy.getsockname()[1]
        settings.KILN_DEMO_FACILITY_PORT = free_port()  # type: ignore[attr-defined]
        assert up.main(["127.0.0.1", str(taken)]) == 1
        assert f"port {taken} on 127.0.0.1 is in use by another program: start with `make up PORT=" in (
            capsys.readouterr().err
        )
        settings.KILN_DEMO_FACILITY_PORT = taken  # type: ignore[attr-defined]
        assert up.main(["127.0.0.1", str(free_port())]) == 1
        err = capsys.readouterr().err
        assert f"port {taken} (the demo's facility service) is in use" in err and "KILN_DEMO_FACILITY_PORT" in err

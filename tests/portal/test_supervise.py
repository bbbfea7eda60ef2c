"""The supervisor behind `make up` (portal/cli/supervise.py) with tiny stand-in programs: giving up on
one that keeps dying, KILL after the grace period, logs appended and rotated. The real programs
(a SIGKILLed Celery worker restarted) are in tests/portal/test_up_script.py."""

from __future__ import annotations

import io
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from portal.cli.supervise import Policy, Program, Supervisor, describe_exit, rotate, tail
from tests.conftest import REPO

# Short enough that the give-up path takes a fraction of a second, long enough to see each delay.
QUICK = Policy(first_delay_s=0.05, max_delay_s=0.2, max_restarts=3, window_s=60, stop_grace_s=5)


def gone(pid: int, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_it_gives_up_on_a_program_that_keeps_dying_and_stops_the_others_with_status_1(tmp_path: Path) -> None:
    crashing = Program("crashing", ["sh", "-c", "echo 'Traceback: boom'; exit 3"], tmp_path / "crashing.log")
    steady = Program("steady", ["sleep", "60"], tmp_path / "steady.log")
    out = io.StringIO()
    supervisor = Supervisor([crashing, steady], policy=QUICK, out=out)
    supervisor.start()
    steady_pid = supervisor.pids()["steady"]

    started = time.monotonic()
    assert supervisor.serve() == 1
    elapsed = time.monotonic() - started

    printed = out.getvalue()
    # 1 start + 3 restarts, after 0.05, 0.1 and 0.2 s (the doubling, then the cap).
    assert len(re.findall(r"crashing \(pid \d+\) exited with status 3", printed)) == 4, printed
    delays = re.findall(r"restarting crashing in ([\d.]+) s \(restart (\d) of at most 3", printed)
    assert delays == [("0.05", "1"), ("0.1", "2"), ("0.2", "3")], printed
    assert f"crashing died 4 times within 60 s; giving up and stopping everything (its log: {crashing.log})" in printed
    assert "stopping steady" in printed
    assert elapsed < 5, elapsed
    assert gone(steady_pid), "the steady program outlived the give-up"
    # Each death shows the lines of that run only, not the earlier runs' (which stay in the log).
    assert printed.count("    | Traceback: boom") == 4
    assert re.findall(r"last (\d+) lines it wrote", printed) == ["1"] * 4
    assert crashing.log.read_text().splitlines().count("Traceback: boom") == 4  # appended, never cut


def test_it_kills_a_program_that_ignores_term_after_the_grace_period(tmp_path: Path) -> None:
    stubborn = Program("stubborn", ["sh", "-c", "trap '' TERM; echo up; sleep 60"], tmp_path / "stubborn.log")
    out = io.StringIO()
    supervisor = Supervisor([stubborn], policy=Policy(stop_grace_s=0.5), out=out)
    supervisor.start()
    pid = supervisor.pids()["stubborn"]
    deadline = time.monotonic() + 5
    while "up" not in stubborn.log.read_text().splitlines() and time.monotonic() < deadline:
        time.sleep(0.05)  # TERM ignored from here on

    started = time.monotonic()
    supervisor.stop_requested = True  # what SIGINT or SIGTERM sets
    assert supervisor.serve() == 0
    assert time.monotonic() - started < 3
    assert f"stubborn (pid {pid}) did not stop on TERM in time: killing it" in out.getvalue()
    assert gone(pid), "the group (sh and its sleep) survived the KILL"
    assert stubborn.log.read_text().endswith(f"stubborn (pid {pid}) stopped: was killed by SIGKILL\n")


def test_a_signal_stops_the_loop_and_a_second_one_skips_the_grace(tmp_path: Path) -> None:
    stubborn = Program("stubborn", ["sh", "-c", "trap '' TERM; sleep 60"], tmp_path / "stubborn.log")
    supervisor = Supervisor([stubborn], policy=Policy(stop_grace_s=30), out=io.StringIO())
    before = signal.getsignal(signal.SIGINT)
    with supervisor.signals_stop():
        supervisor.start()
        time.sleep(0.3)  # the trap is set
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGINT)  # the impatient second Ctrl-C
        started = time.monotonic()
        assert supervisor.serve() == 0
    assert time.monotonic() - started < 3, "the second signal did not cut the 30 s grace short"
    assert signal.getsignal(signal.SIGINT) is before  # the process's own handler is back


def test_logs_are_appended_across_runs_and_rotated_only_when_large(tmp_path: Path) -> None:
    log = tmp_path / "logs" / "once.log"  # the folder does not exist yet
    once = Program("once", ["sh", "-c", "echo run-$$; sleep 60"], log)
    for _ in range(2):  # two `make up`s
        supervisor = Supervisor([once], policy=QUICK, out=io.StringIO())
        supervisor.start()
        pid = supervisor.pids()["once"]
        deadline = time.monotonic() + 5
        while f"run-{pid}" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        supervisor.stop_requested = True
        supervisor.serve()
    runs = re.findall(r"^run-\d+$", log.read_text(), flags=re.MULTILINE)
    assert len(runs) == 2, log.read_text()

    small = Policy(rotate_bytes=log.stat().st_size, rotate_keep=2)
    out = io.StringIO()
    supervisor = Supervisor([once], policy=small, out=out)
    supervisor.start()
    supervisor.stop_requested = True
    supervisor.serve()
    assert f"{log} reached {small.rotate_bytes} bytes: the older lines are in {log}.1" in out.getvalue()
    assert re.findall(r"^run-\d+$", (tmp_path / "logs" / "once.log.1").read_text(), flags=re.MULTILINE) == runs
    assert "up: starting once" in log.read_text().splitlines()[0]


def test_rotate_keeps_the_newest_files_and_drops_the_oldest(tmp_path: Path) -> None:
    log = tmp_path / "w.log"
    for generation in ("first", "second", "third"):
        log.write_text(generation * 10)
        assert rotate(log, max_bytes=10, keep=2)
    assert (tmp_path / "w.log.1").read_text().startswith("third")
    assert (tmp_path / "w.log.2").read_text().startswith("second")
    assert not (tmp_path / "w.log.3").exists() and not log.exists()
    log.write_text("tiny")
    assert not rotate(log, max_bytes=10, keep=2) and log.read_text() == "tiny"
    assert not rotate(tmp_path / "missing.log", max_bytes=10, keep=2)


def test_describe_exit_says_how_a_program_ended() -> None:
    assert describe_exit(1) == "exited with status 1"
    assert describe_exit(-signal.SIGKILL) == "was killed by SIGKILL"
    assert describe_exit(0) == "exited with status 0"


def test_tail_reads_the_last_lines_after_an_offset(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    assert tail(log, 3) == []
    log.write_bytes(b"old\n" + b"".join(f"line {i}\n".encode() for i in range(50)) + b"\xff bad utf-8\n")
    assert tail(log, 3) == ["line 48", "line 49", "\ufffd bad utf-8"]
    assert tail(log, 100, start=4)[0] == "line 0"
    assert tail(log, 3, start=log.stat().st_size) == []


def test_program_names_must_differ(tmp_path: Path) -> None:
    program = Program("same", ["true"], tmp_path / "a.log")
    with pytest.raises(ValueError, match="program names must differ"):
        Supervisor([program, program])


def test_a_program_that_cannot_start_counts_as_a_death_and_is_given_up(tmp_path: Path) -> None:
    missing = Program("missing", [str(tmp_path / "no-such-program")], tmp_path / "missing.log")
    out = io.StringIO()
    supervisor = Supervisor([missing], policy=QUICK, out=out)
    supervisor.start()
    assert supervisor.serve() == 1
    printed = out.getvalue()
    assert printed.count("cannot start missing: [Errno 2] No such file or directory") == 4, printed
    assert "missing died 4 times within 60 s; giving up" in printed
    assert "cannot start missing" in missing.log.read_text()


# The supervisor with one program, in a process of its own that the test can SIGKILL.
LONE_SUPERVISOR = """import sys
from pathlib import Path
from portal.cli.supervise import Program, Supervisor
supervisor = Supervisor([Program("sleeper", ["sleep", "60"], Path(sys.argv[1]))])
supervisor.start()
supervisor.serve()
"""


@pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux's")
def test_a_supervisor_killed_outright_takes_its_programs_with_it(tmp_path: Path) -> None:
    supervisor = subprocess.Popen(
        [sys.executable, "-c", LONE_SUPERVISOR, str(tmp_path / "sleeper.log")],
        cwd=REPO, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert supervisor.stdout is not None
    line = supervisor.stdout.readline()
    pid = int(re.findall(r"started sleeper \(pid (\d+)\)", line)[0])
    supervisor.kill()  # no chance to stop anything itself
    supervisor.wait()
    assert gone(pid), "the program outlived its supervisor"

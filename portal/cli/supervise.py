"""Run long-lived programs side by side and keep them running (what `make up` starts: portal/demo/up.py).

Each program runs in a session of its own (its own process group: its children, gunicorn's workers
or a Celery pool, go with it) with stdout and stderr appended to its log file. When one dies the
console names it, how it ended and the last lines of its log, and it is started again after a delay
that doubles with each death in the recent window; a program that keeps dying makes the supervisor
give up, stop everything and exit 1. SIGINT (Ctrl-C) or SIGTERM stops everything: TERM to each
program's group, KILL to what is left after a grace period (at once on a second signal), exit 0.

Logs are appended, never truncated: the lines before a crash are still there after the restart and
after the next `make up`. A log that has grown past `Policy.rotate_bytes` is renamed `NAME.log.1`
(older ones shift to `.2`, `.3`) when its program (re)starts; a running program's file is never cut.
No Django here: the programs are argv lists.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from types import FrameType
from typing import IO

# How often the loop looks at its programs and at a stop request: a death is noticed, and Ctrl-C
# answered, within this; 5 looks a second cost nothing on the 2-CPU machines the demo runs on.
POLL_S = 0.2
# Bytes read from a log's end to find its last lines: a few hundred lines of Celery's or gunicorn's
# output, plenty for the default tail; a longer line is shown cut.
TAIL_BYTES = 64 * 1024
# prctl(PR_SET_PDEATHSIG) from <linux/prctl.h>.
PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class Program:
    name: str
    argv: Sequence[str]
    log: Path


@dataclass(frozen=True)
class Policy:
    # The first restart waits 1 s: a one-off crash (the broker's, a killed process) is back at once.
    first_delay_s: float = 1.0
    # Each death within the window doubles the wait (1, 2, 4, 8, 16 s), never past 30 s, so that a
    # crash loop does not spin the CPUs and the console stays readable.
    max_delay_s: float = 30.0
    # More than 5 deaths of one program within 5 minutes is not a hiccup but a program that cannot
    # run (a port taken, a broken config): say so and stop. A program that dies immediately every
    # time is given up after ~31 s (1 + 2 + 4 + 8 + 16); two worker crashes in 25 minutes are ridden out.
    max_restarts: int = 5
    window_s: float = 300.0
    # TERM, then KILL after 10 s: gunicorn and beat stop in about a second; a Celery worker's warm
    # shutdown would otherwise wait for a running burn-in, and Ctrl-C must not hang for minutes
    # (acks_late: the broker hands an unfinished task out again).
    stop_grace_s: float = 10.0
    # A Python traceback of usual depth and the lines before it; the console names the whole log.
    tail_lines: int = 20
    # Rotate a log of 10 MB or more when its program starts, keeping 3 older files: a day of the
    # demo worker at INFO fits in one, and a program's logs never take more than 40 MB.
    rotate_bytes: int = 10 * 1024 * 1024
    rotate_keep: int = 3


@dataclass
class _Slot:
    program: Program
    process: subprocess.Popen[bytes] | None = None
    # Monotonic times of this program's deaths within the policy's window.
    deaths: deque[float] = field(default_factory=deque)
    restart_at: float | None = None
    # Where the current run's output starts in the log: the tail shows this run's lines, not the last's.
    log_offset: int = 0


def describe_exit(code: int) -> str:
    """Popen's returncode as people read it: 'exited with status 1', 'was killed by SIGKILL'."""
    if code >= 0:
        return f"exited with status {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    return f"was killed by {name}"


def tail(path: Path, lines: int, *, start: int = 0) -> list[str]:
    """The last `lines` lines of a log after byte `start` (read from its end, not the whole file)."""
    try:
        with path.open("rb") as log:
            size = log.seek(0, os.SEEK_END)
            log.seek(max(start, size - TAIL_BYTES))
            data = log.read()
    except FileNotFoundError:
        return []
    text = data.decode("utf-8", errors="replace").rstrip("\n")
    return text.split("\n")[-lines:] if text else []


def rotate(path: Path, *, max_bytes: int, keep: int) -> bool:
    """Rename a log of `max_bytes` or more to NAME.1 (NAME.1 to NAME.2 ..., the oldest beyond
    `keep` dropped). Only ever called before its program starts: nobody writes to it then."""
    try:
        if path.stat().st_size < max_bytes:
            return False
    except FileNotFoundError:
        return False
    for index in range(keep - 1, 0, -1):
        older = path.with_name(f"{path.name}.{index}")
        if older.exists():
            older.replace(path.with_name(f"{path.name}.{index + 1}"))
    path.replace(path.with_name(f"{path.name}.1"))
    return True


def _die_with_parent(parent: int) -> Callable[[], None] | None:
    """For the child before exec: a TERM when the supervisor dies, even of a KILL, so that no program
    outlives it in its own session (Linux; elsewhere only a clean stop stops them)."""
    if sys.platform != "linux":
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here: the child only calls it

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # the supervisor died before prctl: nobody will send the TERM
            os._exit(1)

    return preexec


class Supervisor:
    def __init__(self, programs: Sequence[Program], *, policy: Policy | None = None, out: IO[str] | None = None,
                 prefix: str = "up") -> None:  # fmt: skip
        names = [program.name for program in programs]
        if len(set(names)) != len(names):
            raise ValueError(f"program names must differ: {names}")
        self.slots = [_Slot(program) for program in programs]
        self.policy = policy or Policy()
        self.out = out or sys.stdout
        self.prefix = prefix
        self.stop_requested = False
        self.kill_now = False
        self.gave_up: str | None = None

    # --- the console and the logs -------------------------------------------------------------

    def say(self, text: str) -> None:
        self.out.write(f"{self.prefix}: {text}\n")
        self.out.flush()

    def _mark(self, program: Program, text: str) -> None:
        """A line of the supervisor's own in the program's log, so the appended log shows each start."""
        stamp = datetime.now().astimezone().isoformat(timespec="seconds")
        with program.log.open("a", encoding="utf-8") as log:
            log.write(f"==> {stamp} {self.prefix}: {text}\n")

    # --- starting and watching ----------------------------------------------------------------

    def _start(self, slot: _Slot) -> bool:
        """Start a program; a program that cannot start (no such file, not executable) counts as a death."""
        program = slot.program
        program.log.parent.mkdir(parents=True, exist_ok=True)
        if rotate(program.log, max_bytes=self.policy.rotate_bytes, keep=self.policy.rotate_keep):
            self.say(f"{program.log} reached {self.policy.rotate_bytes} bytes: the older lines are in {program.log}.1")
        self._mark(program, f"starting {program.name}: {' '.join(program.argv)}")
        slot.restart_at = None
        with program.log.open("ab") as log:
            slot.log_offset = log.seek(0, os.SEEK_END)
            try:
                slot.process = subprocess.Popen(
                    list(program.argv), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                    start_new_session=True, preexec_fn=_die_with_parent(os.getpid()),
                )  # fmt: skip
            except OSError as exc:
                self.say(f"cannot start {program.name}: {exc}")
                self._mark(program, f"cannot start {program.name}: {exc}")
                self._count_death(slot, time.monotonic())
                return False
        return True

    def start(self) -> None:
        for slot in self.slots:
            if self._start(slot):
                assert slot.process is not None
                self.say(f"started {slot.program.name} (pid {slot.process.pid}), log {slot.program.log}")

    def pids(self) -> dict[str, int]:
        return {slot.program.name: slot.process.pid for slot in self.slots if slot.process is not None}

    def check(self) -> None:
        """Notice deaths, start what is due; after a give-up, `gave_up` says why."""
        now = time.monotonic()
        for slot in self.slots:
            if slot.process is not None:
                code = slot.process.poll()
                if code is not None:
                    self._died(slot, code, now)
            elif slot.restart_at is not None and now >= slot.restart_at and not self.gave_up:
                if self._start(slot):
                    assert slot.process is not None
                    self.say(f"{slot.program.name} started again (pid {slot.process.pid})")

    def _died(self, slot: _Slot, code: int, now: float) -> None:
        program, process = slot.program, slot.process
        assert process is not None
        slot.process = None
        _kill_group(process.pid, signal.SIGKILL)  # its orphans (a pool, web workers) must not linger
        how = describe_exit(code)
        lines = tail(program.log, self.policy.tail_lines, start=slot.log_offset)
        told = f"the last {len(lines)} lines it wrote to {program.log}:" if lines else f"nothing in {program.log}"
        self.say(f"{program.name} (pid {process.pid}) {how}; {told}")
        for line in lines:
            self.out.write(f"    | {line}\n")
        self._mark(program, f"{program.name} (pid {process.pid}) {how}")
        self._count_death(slot, now)

    def _count_death(self, slot: _Slot, now: float) -> None:
        """Restart after the policy's delay, or give up when the window holds too many deaths."""
        program = slot.program
        window = self.policy.window_s
        while slot.deaths and now - slot.deaths[0] >= window:
            slot.deaths.popleft()
        slot.deaths.append(now)
        restarts = len(slot.deaths) - 1
        if restarts >= self.policy.max_restarts:
            self.gave_up = (
                f"{program.name} died {len(slot.deaths)} times within {window:g} s; giving up and stopping "
                f"everything (its log: {program.log})"
            )
            self.say(self.gave_up)
            return
        delay = min(self.policy.first_delay_s * 2**restarts, self.policy.max_delay_s)
        slot.restart_at = now + delay
        self.say(
            f"restarting {program.name} in {delay:g} s "
            f"(restart {restarts + 1} of at most {self.policy.max_restarts} within {window:g} s)"
        )

    def wait_until(self, ready: Callable[[], bool], timeout_s: float) -> bool:
        """Supervise while waiting for `ready()`; False on timeout, a stop request or a give-up."""
        deadline = time.monotonic() + timeout_s
        while not (self.stop_requested or self.gave_up):
            self.check()
            if ready():
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(POLL_S)
        return False

    def run_step(self, argv: Sequence[str]) -> int | None:
        """A one-off command on the console (in the terminal's process group, so Ctrl-C reaches it
        too), supervising meanwhile; its exit status, or None when a stop or a give-up came first."""
        if self.stop_requested or self.gave_up:
            return None
        step = subprocess.Popen(list(argv))
        if self.wait_until(lambda: step.poll() is not None, timeout_s=float("inf")):
            return step.returncode
        if step.poll() is None:
            step.terminate()
            try:
                step.wait(timeout=self.policy.stop_grace_s)
            except subprocess.TimeoutExpired:
                step.kill()
                step.wait()
        return None

    def serve(self) -> int:
        """Supervise until a stop request (exit 0) or a give-up (exit 1); everything is stopped then."""
        while not (self.stop_requested or self.gave_up):
            self.check()
            time.sleep(POLL_S)
        self.stop()
        return 1 if self.gave_up else 0

    # --- stopping -----------------------------------------------------------------------------

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.stop_requested:
            self.kill_now = True  # a second Ctrl-C: no more grace
        self.stop_requested = True

    @contextmanager
    def signals_stop(self) -> Iterator[None]:
        """SIGINT and SIGTERM request a stop (checked by the loops) while inside; the old handlers after."""
        old = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in old.items():
                signal.signal(sig, handler)

    def stop(self) -> None:
        """TERM to every program's group, KILL to what is left after the grace period."""
        running = [slot for slot in self.slots if slot.process is not None]
        for slot in self.slots:
            slot.restart_at = None
        if not running:
            return
        self.say(f"stopping {', '.join(slot.program.name for slot in running)}")
        for slot in running:
            assert slot.process is not None
            _kill_group(slot.process.pid, signal.SIGTERM)
        deadline = time.monotonic() + self.policy.stop_grace_s
        while time.monotonic() < deadline and not self.kill_now:
            if all(slot.process is None or slot.process.poll() is not None for slot in running):
                break
            time.sleep(POLL_S / 4)
        for slot in running:
            self._finish(slot)

    def _finish(self, slot: _Slot) -> None:
        process = slot.process
        assert process is not None
        if process.poll() is None:
            self.say(f"{slot.program.name} (pid {process.pid}) did not stop on TERM in time: killing it")
        _kill_group(process.pid, signal.SIGKILL)  # the leader and whatever of its group is left
        code = process.wait()
        self._mark(slot.program, f"{slot.program.name} (pid {process.pid}) stopped: {describe_exit(code)}")
        slot.process = None


def _kill_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass

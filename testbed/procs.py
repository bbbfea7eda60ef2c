"""Command and process helpers of the testbed: run ip/ssh-keygen, find, signal and wait for
processes (by pid, by network namespace)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path


class TestbedError(RuntimeError):
    """The testbed could not be brought up, changed or torn down; the message says why."""

    __test__ = False  # not a pytest test class


def run_cmd(argv: list[str], *, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, input=stdin, capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise TestbedError(f"command failed ({proc.returncode}): {' '.join(argv)}\n{proc.stderr.strip()}")
    return proc


def run_parallel(argvs: list[list[str]], *, what: str) -> None:
    """Start every command at once, then wait for all; raise with the first failure's stderr."""
    procs = [
        (
            argv,
            subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True),
        )
        for argv in argvs
    ]
    failures: list[str] = []
    for argv, proc in procs:
        out, err = proc.communicate()
        if proc.returncode != 0:
            failures.append(f"{' '.join(argv)} -> {proc.returncode}: {(err or out).strip()}")
    if failures:
        raise TestbedError(f"{what} failed for {len(failures)} command(s):\n" + "\n".join(failures[:5]))


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie counts as gone.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def kill_and_wait(pids: list[int], timeout: float = 5.0) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)  # a frozen (SIGSTOPped) sshd acts on SIGTERM only once continued
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    remaining = [p for p in pids if pid_alive(p)]
    while remaining and time.monotonic() < deadline:
        time.sleep(0.02)
        remaining = [p for p in remaining if pid_alive(p)]
    for pid in remaining:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def port_open(address: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((address, port), timeout=timeout):
            return True
    except OSError:
        return False


def venv_bin() -> Path:
    """The bin folder of the running interpreter's environment (its python3 has pynvml)."""
    return Path(sys.prefix) / "bin" if sys.prefix != sys.base_prefix else Path(sys.executable).parent


def pids_in_netns(names: list[str]) -> list[int]:
    """PIDs of processes inside these named network namespaces (what `ip netns pids` does, in one pass)."""
    inodes = set()
    for name in names:
        with contextlib.suppress(OSError):
            inodes.add(f"net:[{os.stat(f'/run/netns/{name}').st_ino}]")
    if not inodes:
        return []
    me = os.getpid()
    pids = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and int(entry.name) != me:
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{entry.name}/ns/net") in inodes:
                    pids.append(int(entry.name))
    return pids

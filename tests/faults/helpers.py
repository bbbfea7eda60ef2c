"""Helpers of the fault-matrix suite: waiting with a deadline, and finding a node's processes.

The testbed's nodes are network namespaces on this machine (one PID namespace), so a node's
processes are found by the node's simulator state file in their environment."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, *, every: float = 0.1) -> float:
    """Poll `predicate` until it is truthy; returns the seconds it took. Fails after `timeout`."""
    started = time.monotonic()
    while True:
        if predicate():
            return time.monotonic() - started
        if time.monotonic() - started > timeout:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(every)


def sim_processes(state_file: str | Path, name: str) -> list[int]:
    """Live (non-zombie) processes of the tool `name` (the program, or the script an interpreter
    runs: not a wrapper naming it as an argument) whose environment holds KILN_SIM_STATE=state_file:
    a tool the node simulator is running for that node."""
    wanted = f"KILN_SIM_STATE={Path(state_file).resolve()}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            if stat[stat.rindex(")") + 2] in "ZX":
                continue
            argv = (entry / "cmdline").read_bytes().split(b"\0")[:2]
            if name.encode() not in {Path(a.decode(errors="replace")).name.encode() for a in argv}:
                continue
            if wanted not in (entry / "environ").read_bytes().split(b"\0"):
                continue
        except (OSError, ValueError):
            continue
        found.append(int(entry.name))
    return found

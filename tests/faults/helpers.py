"""Helpers of the fault-matrix suite: waiting with a deadline, a plan built from catalog slugs, a
worker's memory, and finding a node's processes.

The testbed's nodes are network namespaces on this machine (one PID namespace), so a node's
processes are found by the node's simulator state file in their environment."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from portal.catalog.models import CheckDefinition, TestPlan, TestPlanItem

# Liveness at test scale, for the workers and beat a fault test starts (WorkerProcess.env copies
# os.environ, and BeatProcess takes that environment): the production ratio of 10 heartbeats per
# lease (3 s / 30 s), so a live worker keeps its lease through 9 s of stalled beats; the reaper
# interval at the floor portal/execution/reaper.py allows (5 s).
HEARTBEAT_S, LEASE_TTL_S, REAPER_INTERVAL_S = 1, 10, 5
LIVENESS = {
    "KILN_HEARTBEAT_S": HEARTBEAT_S,
    "KILN_LEASE_TTL_S": LEASE_TTL_S,
    "KILN_REAPER_INTERVAL_S": REAPER_INTERVAL_S,
}
# The bound a reaper must keep after a worker dies, derived from the settings above as production's
# two minutes are from its own (lease 30 s + interval 30 s = 60 s expected): lease + interval = 15 s
# expected here, and 30 s of margin for a loaded machine (starting another worker overlaps the
# lease's lapse; the reaping itself takes a second or two). A reaper that waited out production's
# pace (60 s) would miss it.
REAP_BOUND_S = LEASE_TTL_S + REAPER_INTERVAL_S + 30


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, *, every: float = 0.1) -> float:
    """Poll `predicate` until it is truthy; returns the seconds it took. Fails after `timeout`."""
    started = time.monotonic()
    while True:
        if predicate():
            return time.monotonic() - started
        if time.monotonic() - started > timeout:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(every)


def plan_of(slug: str, *checks: str, **params: dict) -> TestPlan:
    """A plan of catalog checks in this order; `params` maps a check slug to its param overrides."""
    plan = TestPlan.objects.create(slug=slug, name=slug)
    for order, check in enumerate(checks):
        TestPlanItem.objects.create(
            plan=plan,
            check_definition=CheckDefinition.objects.get(slug=check),
            order=order,
            param_overrides=params.get(check.replace("-", "_"), {}),
        )
    return plan


def process_tree(root: int) -> list[int]:
    """`root` and its descendants (a Celery worker and its pool processes)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo += children.get(pid, [])
    return tree


def peak_rss(pid: int) -> int:
    """The process's peak resident set so far (VmHWM), in bytes; 0 when it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


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

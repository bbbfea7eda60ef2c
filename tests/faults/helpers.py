"""Helpers of the fault tests: waiting for a state, a plan built from catalog slugs, a worker's memory."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from portal.catalog.models import CheckDefinition, TestPlan, TestPlanItem


def wait_for(predicate: Callable[[], object], timeout: float, what: str, every: float = 0.2) -> float:
    """Seconds it took `predicate` to become true; AssertionError after `timeout`."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if predicate():
            return time.monotonic() - started
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


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

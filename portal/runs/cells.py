"""What the run grid's cells say: a claimed check that has not started yet, the counts beside the
grid, and the "Why" column. Reads only (the grid's own rows, or one aggregate query).

A node task claims all of its node's checks at once (services.results_claim marks them `running`
under one lease, which the reaper and cancel rely on), then runs them one after another. The
lease keeper writes `command_started_at` before a check's first command (portal/runs/leases.py),
so a `running` check without it is claimed but waiting its turn: the grid says "waiting", and
only the check actually on the node says "running".
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ClusterShell.NodeSet import NodeSet
from django.db.models import Count, Q

from portal.runs.models import STATUS_COLOURS, CheckResult, Run, Scope, Status

WAITING = "waiting"
# The order the count badges come in: the result statuses, with "waiting" beside "running".
SHOWN_ORDER = [Status.QUEUED.value, WAITING, *(s.value for s in Status if s != Status.QUEUED)]
SHOWN_COLOURS = {**STATUS_COLOURS, WAITING: "grey"}
ACTIVE_SHOWN = (Status.QUEUED.value, WAITING, Status.RUNNING.value)  # not done yet


def shown(status: str, started: bool) -> str:
    """The state a cell shows: `running` only for the check whose commands have started."""
    return WAITING if status == Status.RUNNING and not started else status


def count_items(counts: dict[str, int]) -> list[tuple[str, int, str]]:
    """(state, count, colour) for the badges, in SHOWN_ORDER, without the zeros."""
    return [(s, counts[s], SHOWN_COLOURS.get(s, "grey")) for s in SHOWN_ORDER if counts.get(s)]


def count_cells(states: Iterable[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for state in states:
        counts[state] = counts.get(state, 0) + 1
    return counts


def run_cell_counts(*, run: Run) -> dict[str, int]:
    """The grid's cells of the whole run by the state they show, from the database (the live poll
    sends only some rows). A multi-node result fills one cell per member, as the grid places it."""
    results = CheckResult.objects.filter(run=run)
    counts: dict[str, int] = {}
    node_rows = (
        results.filter(scope=Scope.NODE)
        .values("status")
        .annotate(n=Count("id"), waiting=Count("id", filter=Q(command_started_at__isnull=True)))
        .order_by()
    )
    for row in node_rows:
        waiting = row["waiting"] if row["status"] == Status.RUNNING else 0
        _add(counts, WAITING, waiting)
        _add(counts, row["status"], row["n"] - waiting)
    groups = list(results.filter(scope=Scope.GROUP).values_list("status", "node_set", "attribution"))
    if not groups:
        return counts
    hostnames = set(results.filter(scope=Scope.NODE).values_list("node__hostname", flat=True).distinct())
    for status, node_set, attribution in groups:
        for state in group_cells(hostnames, status, node_set, attribution):
            _add(counts, state, 1)
    return counts


def group_cells(hostnames: set[str], status: str, node_set: str, attribution: dict[str, Any] | None) -> list[str]:
    """The states one multi-node result shows in the rows of `hostnames` (runs.selectors places it
    the same way: the node's attributed verdict, else the group's status for a member)."""
    members = set(NodeSet(node_set)) if node_set else set()
    out = []
    for hostname in hostnames:
        attributed = (attribution or {}).get(hostname)
        if attributed:
            out.append(attributed["status"])
        elif hostname in members:
            out.append(status)
    return out


def _add(counts: dict[str, int], state: str, n: int) -> None:
    if n:
        counts[state] = counts.get(state, 0) + n


def why(problems: Iterable[Any]) -> list[tuple[list[str], str]]:
    """The "Why" column of one row: each distinct reason once, with the checks that gave it, in
    the order they first appear ("gpu-inventory, ecc-health: unreachable: ..." rather than the same
    connection error once per check)."""
    grouped: dict[str, list[str]] = {}
    for cell in problems:
        keys = grouped.setdefault(cell.reason, [])
        if cell.item_key not in keys:
            keys.append(cell.item_key)
    return [(keys, reason) for reason, keys in grouped.items()]

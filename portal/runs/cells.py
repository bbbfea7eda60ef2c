"""What the run grid's cells say: a claimed check that has not started yet, the counts beside the
grid (RunCounts: the one way a run's checks are counted), and the "Why" column. Reads only.

A node task claims all of its node's checks at once (services.results_claim marks them `running`
under one lease, which the reaper and cancel rely on), then runs them one after another. The
lease keeper writes `command_started_at` before a check's first command (portal/runs/leases.py),
so a `running` check without it is claimed but waiting its turn: the grid says "waiting", and
only the check actually on the node says "running".
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
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


@dataclass(frozen=True)
class RunCounts:
    """What a run did, counted one way everywhere (the run page's badges and progress, the triage
    box, the runs list and the API): per grid cell, one per node × check. A multi-node result
    counts once in each node it spans (its attributed verdict there, else the group's status), as
    the grid shows it; a claimed check that has not started counts as `waiting`."""

    cells: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.cells.values())

    @property
    def done(self) -> int:
        return self.total - sum(self.cells.get(s, 0) for s in ACTIVE_SHOWN)

    @property
    def percent(self) -> int:
        return int(100 * self.done / self.total) if self.total else 100

    @property
    def count_items(self) -> list[tuple[str, int, str]]:
        return count_items(self.cells)

    @property
    def by_status(self) -> dict[str, int]:
        """By result status: a waiting cell is `running` (claimed), as the API has always said."""
        out = {s: n for s, n in self.cells.items() if s != WAITING}
        if self.cells.get(WAITING):
            out[Status.RUNNING.value] = out.get(Status.RUNNING.value, 0) + self.cells[WAITING]
        return out

    def of(self, status: str) -> int:
        return self.cells.get(status, 0)

    @property
    def problems(self) -> int:
        """The cells the triage reads: failed or errored."""
        return self.of(Status.FAIL) + self.of(Status.ERROR)


def run_counts(*, run: Run) -> RunCounts:
    """The run's cells by the state they show (RunCounts), from the database: two queries."""
    return runs_counts(run_ids=[run.pk])[run.pk]


def runs_counts(*, run_ids: list[int]) -> dict[int, RunCounts]:
    """RunCounts of several runs (a page of the runs list) in two queries, whatever their number."""
    counts: dict[int, dict[str, int]] = {pk: {} for pk in run_ids}
    node_rows = (
        CheckResult.objects.filter(run_id__in=run_ids, scope=Scope.NODE)
        .values("run_id", "status")
        .annotate(n=Count("id"), waiting=Count("id", filter=Q(command_started_at__isnull=True)))
        .order_by()
    )
    for row in node_rows:
        add_node_cells(counts[row["run_id"]], row["status"], row["n"], row["waiting"])
    groups = CheckResult.objects.filter(run_id__in=run_ids, scope=Scope.GROUP).values_list(
        "run_id", "status", "node_set", "attribution"
    )
    for run_id, status, node_set, attribution in groups:
        for state in group_cells(status, node_set, attribution).values():
            _add(counts[run_id], state, 1)
    return {pk: RunCounts(cells=c) for pk, c in counts.items()}


def add_node_cells(counts: dict[str, int], status: str, n: int, not_started: int) -> None:
    """Adds `n` per-node results of `status` to `counts`, `not_started` of them without a command
    started yet (a `running` one of those shows `waiting`)."""
    waiting = not_started if status == Status.RUNNING else 0
    _add(counts, WAITING, waiting)
    _add(counts, status, n - waiting)


def add_cell(counts: dict[str, int], state: str) -> None:
    """Adds one cell in `state` (a multi-node result's share of a node: group_shares)."""
    _add(counts, state, 1)


def group_cells(status: str, node_set: str, attribution: dict[str, Any] | None) -> dict[str, str]:
    """hostname -> the state one multi-node result gives that node's cell (group_shares)."""
    return {host: share[0] for host, share in group_shares(status, "", node_set, attribution).items()}


def group_shares(
    status: str, reason: str, node_set: str, attribution: dict[str, Any] | None
) -> dict[str, tuple[str, str]]:
    """hostname -> (status, reason) one multi-node result gives that node's cell: the node's
    attributed verdict when the output named it, else the group's own for each member of the set
    it spans. The grid places it (runs.selectors) and the counts count it from this one mapping."""
    try:
        members = list(NodeSet(node_set)) if node_set else []
    except Exception:  # a node set that does not parse names no member; attributed nodes still count
        members = []
    out = dict.fromkeys(members, (status, reason))
    for hostname, verdict in (attribution or {}).items():
        if isinstance(verdict, dict) and verdict.get("status"):
            out[hostname] = (str(verdict["status"]), str(verdict.get("reason", "")))
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

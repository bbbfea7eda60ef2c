"""The run grid a page at a time: which nodes a filter keeps, which page a node is on, and the rows of
one page (PAGE_ROWS nodes in hostname order) with their cells. Reads only.

A row is a node of the run: one with results of its own, or a member of a multi-node result's set (a
plan of multi-node checks only, such as the heat soak, has no per-node result). The filters are
answered by the database (an EXISTS over the node's results of the run), except for the multi-node
results' shares, which are a few rows read whole and placed in Python (cells.group_shares). So a
page costs the same number of queries at 16 nodes and at 100,000, and never reads a result (nor a
measurement) of a node that is not on it; the counts beside the grid are always the whole run's.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import Count, Exists, OuterRef, Q, QuerySet, Sum, Window

from checks.core.base import worst_status
from portal.inventory import nodesets
from portal.inventory.models import Node
from portal.runs import cells, selectors
from portal.runs.cells import RunCounts
from portal.runs.models import CheckResult, Run, Scope, Status
from portal.runs.selectors import RunProgress

# Rows per page: 100 nodes x 8 checks is about 90 KB of HTML, rendered in ~15 ms
# (bench/bench_history.py "run page"); the cluster page shows its nodes 100 at a time too.
PAGE_ROWS = 100
# The slowest nodes the summary names: enough to see a straggler pattern, short enough for one line.
SLOWEST = 5
# "Only problems": the states the grid's problem filter has always kept (a warning is worth a look).
PROBLEM_STATES = (Status.FAIL.value, Status.ERROR.value, Status.WARN.value, Status.CANCELLED.value)
# Characters of a node set the filter reads: the forms' and the API's bound on node set text.
NODES_TEXT = nodesets.MAX_TEXT
# Characters that make the search text a node set (brackets, ClusterShell's operators); plain text
# is part of a hostname.
_NODESET_SYNTAX = frozenset("[],!&^ ")


@dataclass(slots=True)
class GridCell:
    """One cell of the run grid: a node's result, or its share of a multi-node result (`pk` is then
    the group result's)."""

    pk: int
    status: str
    reason: str
    item_key: str
    started: bool = True  # its commands have started (cells.py: a claimed check waits its turn)

    @property
    def shown(self) -> str:
        return cells.shown(self.status, self.started)


@dataclass(slots=True)
class NodeRef:
    id: int
    hostname: str


@dataclass(slots=True)
class GridRow:
    node: NodeRef
    cells: list[GridCell | None]
    worst: str = ""

    @property
    def problems(self) -> list[GridCell]:
        """The cells worth reading in the "Why" column."""
        return [c for c in self.cells if c is not None and c.status != Status.PASS and c.reason]


@dataclass(frozen=True)
class GridFilter:
    """Which rows the grid shows. `problems`: a row with a cell in PROBLEM_STATES; `state`: a row
    with a cell in that state (cells.SHOWN_ORDER: "waiting" included); `nodes`: a node set
    ("gpu[001-128]", every name exactly) or part of a hostname ("rack3"). They combine (and)."""

    problems: bool = False
    state: str = ""
    nodes: str = ""

    @classmethod
    def from_params(cls, params: Mapping[str, str]) -> GridFilter:
        state = params.get("state", "")
        return cls(
            problems=params.get("problems") == "1",
            state=state if state in cells.SHOWN_ORDER else "",
            nodes=(params.get("nodes") or "").strip()[:NODES_TEXT],
        )

    def params(self) -> dict[str, str]:
        """The filter as query parameters (links and the live poll keep it)."""
        out = {"problems": "1"} if self.problems else {}
        if self.state:
            out["state"] = self.state
        if self.nodes:
            out["nodes"] = self.nodes
        return out

    @property
    def narrows(self) -> bool:
        return bool(self.params())

    @property
    def follows_results(self) -> bool:
        """Rows enter and leave this filter as results change (a state, or problems): a live poll
        re-reads its whole page rather than the rows that changed."""
        return self.problems or bool(self.state)


@dataclass(frozen=True)
class GridPage:
    """Where a page sits: its number (from 1), how many pages, and how many rows the filter keeps."""

    number: int
    pages: int
    count: int

    @property
    def has_previous(self) -> bool:
        return self.number > 1

    @property
    def has_next(self) -> bool:
        return self.number < self.pages

    @property
    def first_row(self) -> int:
        return (self.number - 1) * PAGE_ROWS + 1 if self.count else 0

    @property
    def last_row(self) -> int:
        return min(self.count, self.number * PAGE_ROWS)


@dataclass
class RunGrid:
    """One page of the run grid, with the whole run's counts and progress beside it."""

    run: Run
    columns: list[dict[str, Any]]
    rows: list[GridRow]
    counted: RunCounts
    progress: RunProgress
    filter: GridFilter = field(default_factory=GridFilter)
    page: GridPage = field(default_factory=lambda: GridPage(1, 1, 0))
    partial: bool = False  # only the rows of the page that changed (the live poll)
    focus: int | None = None  # the node id asked for (?node=), marked in its row
    note: str = ""  # why the filter or the node asked for shows nothing ("" when it does)

    @property
    def cells(self) -> dict[str, int]:
        return self.counted.cells

    @property
    def counts(self) -> dict[str, int]:
        return self.progress.counts

    @property
    def total(self) -> int:
        return self.counted.total

    @property
    def done(self) -> int:
        return self.counted.done

    @property
    def percent(self) -> int:
        return self.counted.percent

    @property
    def count_items(self) -> list[tuple[str, int, str]]:
        return self.counted.count_items

    @property
    def problems_only(self) -> bool:
        return self.filter.problems

    @property
    def triage_key(self) -> str:
        """Changes whenever the triage box would: a check failed or errored (results never leave
        those states), or the run finished."""
        return f"{self.counted.of(Status.FAIL)}-{self.counted.of(Status.ERROR)}-{int(self.run.is_active)}"


def hostname_q(text: str) -> Q:
    """The filter's node search: a node set names hosts exactly, plain text is part of a hostname.
    Raises nodesets.NodeSetError for a node set that does not parse or is too large."""
    if not text:
        return Q()
    if _NODESET_SYNTAX & set(text):
        return Q(hostname__in=nodesets.expand(text))
    return Q(hostname__icontains=text)


def _state_q(state: str) -> Q:
    """The node results whose cell shows `state` (cells.shown: a claimed check that has not started
    shows "waiting")."""
    if state == cells.WAITING:
        return Q(status=Status.RUNNING, command_started_at__isnull=True)
    if state == Status.RUNNING:
        return Q(status=Status.RUNNING, command_started_at__isnull=False)
    return Q(status=state)


# A multi-node result as the grid reads it; started_at and finished_at at 6 and 7 (the live poll).
_GROUP_FIELDS = (
    "id", "item_key", "status", "reason", "node_set", "attribution", "started_at", "finished_at", "kind", "duration_s",
)  # fmt: skip
# (pk, item key, hostname -> (status, reason)) of one multi-node result
Shares = tuple[int, str, dict[str, tuple[str, str]]]


def _shares(groups: list[tuple[Any, ...]]) -> list[Shares]:
    """(pk, item key, hostname -> (status, reason)) of each multi-node result."""
    return [
        (pk, key, cells.group_shares(status, reason, node_set, attribution))
        for pk, key, status, reason, node_set, attribution, *_ in groups
    ]


def _rows_q(run: Run, grid_filter: GridFilter, shares: list[Shares]) -> Q:
    """The nodes of `run` the filter keeps, as a condition on Node."""
    node_results = CheckResult.objects.filter(run_id=run.pk, scope=Scope.NODE, node_id=OuterRef("pk"))
    # Every node of a run gets its per-node results when it starts: with a per-node item in the
    # plan, a multi-node result's members have results of their own, and need not be named.
    per_node = any(item.get("scope", Scope.NODE) == Scope.NODE for item in run.plan_snapshot.get("items", []))

    def having(condition: Q | None, states: Iterable[str] | None) -> Q:
        """A node result matching `condition`, or a multi-node share in one of `states`."""
        found = Q(Exists(node_results.filter(condition) if condition is not None else node_results))
        if condition is None and per_node:
            return found
        wanted = set(states) if states is not None else None
        hosts = {
            host
            for *_, by_host in shares
            for host, (status, _) in by_host.items()
            if wanted is None or status in wanted
        }
        return found | Q(hostname__in=sorted(hosts)) if hosts else found

    wheres = []
    if grid_filter.problems:
        wheres.append(having(Q(status__in=PROBLEM_STATES), PROBLEM_STATES))
    if grid_filter.state:
        # A multi-node share has no "waiting": it shows its result's status (cells.group_shares).
        wheres.append(having(_state_q(grid_filter.state), [grid_filter.state]))
    where = Q()
    for condition in wheres or [having(None, None)]:  # a node with a cell is a node of the run
        where &= condition
    return where & hostname_q(grid_filter.nodes)


def run_grid(
    *,
    run: Run,
    grid_filter: GridFilter | None = None,
    page: int | str | None = 1,
    node: str = "",
    changed_since: datetime | None = None,
) -> RunGrid:
    """One page of the grid in a constant number of queries (rows as tuples, never instances): the
    multi-node results (a few rows), the page's nodes with the filter's row count (one query; a
    node's page first costs one aggregate), their per-node results, and the whole run's counts:
    stored at close, else (while the run is active) one aggregate, and the ETA.

    `page`: 1 for the first; past the last goes to the last. `node`: a hostname, whose page is
    shown (its row marked) when the filter keeps it. `changed_since`: only the page's rows with a
    result that started or finished since then (the live poll swaps just those), unless a
    multi-node result moved (it shows in every member's row: all of the page's rows come back)."""
    grid_filter = grid_filter or GridFilter()
    columns = run.plan_snapshot["items"]
    positions = {item["key"]: i for i, item in enumerate(columns)}
    groups = list(CheckResult.objects.filter(run_id=run.pk, scope=Scope.GROUP).order_by().values_list(*_GROUP_FIELDS))
    shares = _shares(groups)
    note = ""
    try:
        nodes = Node.objects.filter(cluster_id=run.cluster_id).filter(_rows_q(run, grid_filter, shares))
    except nodesets.NodeSetError as exc:
        nodes = Node.objects.none()
        note = f"Not a node set: {exc}."
    number, page_nodes, count, jump_note = _page(nodes, page=page, node=node)
    focus = next((pk for pk, hostname in page_nodes if node and hostname == node), None)
    if changed_since is not None and any((t or changed_since) > changed_since for g in groups for t in g[6:8]):
        changed_since = None  # a multi-node result shows in every member's row: send the page whole
    rows = _page_rows(run, page_nodes, positions, len(columns), changed_since)
    _place_shares(rows, shares, positions)
    for row in rows:
        row.worst = worst_status([c.status for c in row.cells if c is not None])
    counted, progress = _whole_run(run, groups, shares)
    return RunGrid(
        run=run,
        columns=columns,
        rows=rows,
        counted=counted,
        progress=progress,
        filter=grid_filter,
        page=GridPage(number, max(1, math.ceil(count / PAGE_ROWS)), count),
        partial=changed_since is not None,
        focus=focus,
        note=note or jump_note,
    )


def _page(nodes: QuerySet[Node], *, page: int | str | None, node: str) -> tuple[int, list[tuple[int, str]], int, str]:
    """(page number, its nodes as (id, hostname), rows the filter keeps, a note). The count rides
    on the page's query (a window count); with `node`, one aggregate first finds its page (the rows
    before it over PAGE_ROWS)."""
    number, note = _page_number(page), ""
    if node:
        found = nodes.order_by().aggregate(
            before=Count("id", filter=Q(hostname__lt=node)), here=Count("id", filter=Q(hostname=node))
        )
        if found["here"]:
            number = found["before"] // PAGE_ROWS + 1
        else:
            note = f"No node {node} among the rows shown here."
    listed = nodes.annotate(rows=Window(Count("id"))).order_by("hostname").values_list("id", "hostname", "rows")
    got = list(listed[(number - 1) * PAGE_ROWS : number * PAGE_ROWS])
    if not got and number > 1:  # past the last page: the last one
        number = max(1, math.ceil(nodes.count() / PAGE_ROWS))
        got = list(listed[(number - 1) * PAGE_ROWS : number * PAGE_ROWS])
    return number, [(pk, hostname) for pk, hostname, _ in got], got[0][2] if got else 0, note


# A page number past any run's last page: a larger one asked for is read as this one (the pager then
# shows the last page), so its row offset stays inside PostgreSQL's bigint.
MAX_PAGE = 10**9


def _page_number(page: int | str | None) -> int:
    try:
        return min(MAX_PAGE, max(1, int(page or 1)))
    except (TypeError, ValueError):
        return 1


def _page_rows(
    run: Run, page_nodes: list[tuple[int, str]], positions: dict[str, int], width: int, since: datetime | None
) -> list[GridRow]:
    """The page's rows (hostname order) with their per-node results in place; with `since`, only
    the rows of nodes with a result that started or finished since then."""
    results = CheckResult.objects.filter(run_id=run.pk, scope=Scope.NODE, node_id__in=[pk for pk, _ in page_nodes])
    if since is not None:
        changed = results.filter(Q(started_at__gte=since) | Q(finished_at__gte=since)).values("node_id")
        results = results.filter(node_id__in=changed)
    # Tuples, not instances, and no JSON columns.
    values = results.order_by().values_list("id", "node_id", "item_key", "status", "reason", "command_started_at")
    rows = {pk: GridRow(node=NodeRef(pk, hostname), cells=[None] * width) for pk, hostname in page_nodes}
    touched: set[int] = set()
    for pk, node_id, item_key, status, reason, command_started in values:
        rows[node_id].cells[positions.get(item_key, 0)] = GridCell(
            pk, status, reason, item_key, command_started is not None
        )
        touched.add(node_id)
    if since is not None:
        return [row for pk, row in rows.items() if pk in touched]
    return list(rows.values())


def _place_shares(rows: list[GridRow], shares: list[Shares], positions: dict[str, int]) -> None:
    """A multi-node check shows in the row of every node it spans (cells.group_shares)."""
    by_hostname = {row.node.hostname: row for row in rows}
    for pk, item_key, by_host in shares:
        column = positions.get(item_key)
        if column is None:
            continue  # not an item of this run's snapshot
        for hostname, (status, reason) in by_host.items():
            row = by_hostname.get(hostname)
            if row is not None:
                row.cells[column] = GridCell(pk, status, reason, item_key)


def _whole_run(run: Run, groups: list[tuple[Any, ...]], shares: list[Shares]) -> tuple[RunCounts, RunProgress]:
    """The whole run's cells (cells.RunCounts) and its progress by result status: as closing the run
    stored them, else (while it runs, or a run closed before they were stored) from one aggregate
    over its per-node results and the multi-node results already read, with the ETA."""
    summary = run.summary or {}
    stored_cells, stored_counts = summary.get("cells"), summary.get("counts")
    if not run.is_active and isinstance(stored_cells, dict) and isinstance(stored_counts, dict):
        counts = {str(k): int(v) for k, v in stored_counts.items()}
        total = sum(counts.values())
        return RunCounts(cells={str(k): int(v) for k, v in stored_cells.items()}), RunProgress(counts, total, total)
    node_rows = (
        CheckResult.objects.filter(run_id=run.pk, scope=Scope.NODE)
        .order_by()
        .values("kind", "status")
        .annotate(
            n=Count("id"),
            not_started=Count("id", filter=Q(command_started_at__isnull=True)),
            seconds=Sum("duration_s"),
            timed=Count("duration_s"),
        )
    )
    shown: dict[str, int] = {}
    rows: list[dict[str, Any]] = []
    for row in node_rows:
        cells.add_node_cells(shown, row["status"], row["n"], row["not_started"])
        rows.append({**row, "scope": Scope.NODE})
    for *_, by_host in shares:
        for state, _ in by_host.values():
            cells.add_cell(shown, state)
    etas = []
    for _, key, status, _, _, _, started, _, kind, seconds in groups:
        rows.append({"kind": kind, "scope": Scope.GROUP, "status": status, "n": 1, "seconds": seconds})
        rows[-1]["timed"] = int(seconds is not None)
        etas.append((key, kind, status, started))
    return RunCounts(cells=shown), selectors.progress_of(run, rows, selectors.group_etas(run, etas))


def slowest_nodes(*, run: Run, limit: int = SLOWEST) -> list[tuple[str, float]]:
    """(hostname, seconds) of the nodes whose checks took longest in all (a node runs its checks
    one after another, so this is its time on the run), slowest first: as closing the run stored
    them, else one aggregate over the run's finished per-node results."""
    stored = (run.summary or {}).get("slowest") if not run.is_active else None
    if isinstance(stored, list):
        return [(str(host), float(seconds)) for host, seconds in stored[:limit]]
    return slowest_read(run_id=run.pk, limit=limit)


def slowest_read(*, run_id: int, limit: int = SLOWEST) -> list[tuple[str, float]]:
    rows = (
        CheckResult.objects.filter(run_id=run_id, scope=Scope.NODE, duration_s__isnull=False)
        .order_by()
        .values("node__hostname")
        .annotate(seconds=Sum("duration_s"))
        .order_by("-seconds", "node__hostname")[:limit]
    )
    return [(row["node__hostname"], float(row["seconds"])) for row in rows]

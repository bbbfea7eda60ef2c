"""Reads for runs and results. Query counts do not grow with the number of nodes."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import Count, Max, Prefetch, QuerySet, Sum
from django.utils import timezone

from checks import presentation_of
from checks.core.base import ParamsError, worst_status
from portal.inventory.models import Cluster, Node
from portal.runs import estimates
from portal.runs.models import ACTIVE_STATUSES, STATUS_COLOURS, CheckResult, Measurement, Run, RunEvent, Scope, Status


@dataclass
class RunProgress:
    """Counts by status, done/total and an ETA for one run (one aggregate query)."""

    counts: dict[str, int]
    total: int
    done: int
    eta_s: float | None = None
    # Seconds a running multi-node check has run past what it was expected to take (0: not late).
    overdue_s: float = 0.0

    @property
    def percent(self) -> int:
        return int(100 * self.done / self.total) if self.total else 100

    @property
    def count_items(self) -> list[tuple[str, int, str]]:
        return [(s.value, self.counts[s], STATUS_COLOURS[s]) for s in Status if self.counts.get(s)]

    @property
    def problem_count(self) -> int:
        return self.counts.get(Status.FAIL, 0) + self.counts.get(Status.ERROR, 0)

    @property
    def eta_text(self) -> str:
        if self.overdue_s > 0 and not self.eta_s:
            return f"ETA: any moment ({duration_words(self.overdue_s)} over the estimate)"
        return eta_text(self.eta_s)


def run_progress(*, run: Run) -> RunProgress:
    """Counts by status and an ETA, from one aggregate query (grouped by kind, scope and status)."""
    rows = list(
        CheckResult.objects.filter(run=run)
        .values("kind", "scope", "status")
        .annotate(n=Count("id"), seconds=Sum("duration_s"), timed=Count("duration_s"))
        .order_by()
    )
    return progress_of(run, rows)


def progress_of(run: Run, rows: Sequence[Mapping[str, Any]], groups: Sequence[GroupEta] | None = None) -> RunProgress:
    """RunProgress from rows of (kind, scope, status, n, seconds, timed); `groups`: the run's active
    multi-node results when the caller has them (else one query reads them)."""
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["status"]] = counts.get(row["status"], 0) + row["n"]
    total = sum(counts.values())
    done = total - sum(counts.get(s, 0) for s in ACTIVE_STATUSES)
    if not run.is_active:
        return RunProgress(counts=counts, total=total, done=done)
    groups = _active_groups(run) if groups is None else groups
    eta = estimate_eta(elapsed_s=run.elapsed_s, rows=rows, groups=groups)
    late = [g.running_s - g.expected_s for g in groups if g.running_s is not None and g.expected_s is not None]
    return RunProgress(counts=counts, total=total, done=done, eta_s=eta, overdue_s=max([0.0, *late]))


@dataclass(frozen=True)
class GroupEta:
    """A multi-node check still to finish: its kind, what it is expected to take (the check's own
    `expected_s` for the run's params), and how long it has run (None: not started yet)."""

    kind: str
    expected_s: float | None
    running_s: float | None = None


def _active_groups(run: Run) -> list[GroupEta]:
    """The run's queued and running multi-node results (a few rows, on their own partial index)."""
    return group_etas(
        run,
        CheckResult.objects.filter(run=run, scope=Scope.GROUP, status__in=ACTIVE_STATUSES)
        .order_by()
        .values_list("item_key", "kind", "status", "started_at"),
    )


def group_etas(run: Run, groups: Iterable[tuple[str, str, str, datetime | None]]) -> list[GroupEta]:
    """GroupEta of the active ones of (item key, kind, status, started_at) of multi-node results."""
    items = {item["key"]: item for item in run.plan_snapshot.get("items", [])}
    now = timezone.now()
    out = []
    for key, kind, status, started in groups:
        if status not in ACTIVE_STATUSES:
            continue
        running = (now - started).total_seconds() if status == Status.RUNNING and started else None
        out.append(GroupEta(kind, _declared_s(items.get(key)), None if running is None else max(0.0, running)))
    return out


def _declared_s(item: dict[str, Any] | None) -> float | None:
    """How long the snapshot's item is expected to take (checks/core/base.py Check.expected_s)."""
    if item is None:
        return None
    try:
        return estimates.items_estimate_s([item])
    except (KeyError, TypeError, ValueError, ParamsError):
        return None  # a kind no longer registered, or params it no longer reads: averages instead


def estimate_eta(
    *, elapsed_s: float | None, rows: Sequence[Mapping[str, Any]], groups: Sequence[GroupEta] | None = None
) -> float | None:
    """Seconds left, from rows of (kind, scope, status, n, seconds, timed).

    Node checks run in parallel (a task per node), so the run's throughput so far is what it did
    per second of wall time: weighting each check by its kind's average duration in this run (a
    burn-in weighs more than an inventory) gives ETA = elapsed × work left / work done. Multi-node
    checks run one after another once the node checks are in: each adds what it is expected to take
    (this run's average wall time of its kind, else its declared `expected_s`), less what a running
    one has already run, so the ETA counts down while it runs instead of standing still. Without
    `groups`, the active group rows of `rows` add their kind's average. Kinds with no finished
    result yet count at the average of the kinds seen; with no duration at all, each node check
    counts the same. None while nothing has finished yet.
    """
    if not elapsed_s or elapsed_s <= 0:
        return None
    avg = _average_seconds_by_kind(rows)
    default = sum(avg.values()) / len(avg) if avg else 1.0
    if avg and default <= 0:
        default = 1.0
    done_work, left_work = _node_work(rows, avg, default)
    if left_work > 0 and done_work <= 0:
        return None
    parallel_left = elapsed_s * left_work / done_work if left_work > 0 else 0.0
    return parallel_left + _group_seconds_left(rows, groups, avg, default)


def _average_seconds_by_kind(rows: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """This run's average duration of each check kind over its timed results."""
    seconds: dict[str, float] = {}
    timed: dict[str, int] = {}
    for row in rows:
        if row["timed"]:
            seconds[row["kind"]] = seconds.get(row["kind"], 0.0) + (row["seconds"] or 0.0)
            timed[row["kind"]] = timed.get(row["kind"], 0) + row["timed"]
    return {kind: seconds[kind] / timed[kind] for kind in timed}


def _node_work(rows: Sequence[Mapping[str, Any]], avg: dict[str, float], default: float) -> tuple[float, float]:
    """(done, left) node-check work, each check weighted by its kind's average (1 with none yet)."""
    done_work = left_work = 0.0
    for row in rows:
        if row["scope"] == Scope.GROUP:
            continue
        weight = avg.get(row["kind"], default) if avg else 1.0
        if row["status"] in ACTIVE_STATUSES:
            left_work += row["n"] * weight
        else:
            done_work += row["n"] * weight
    return done_work, left_work


def _group_seconds_left(
    rows: Sequence[Mapping[str, Any]], groups: Sequence[GroupEta] | None, avg: dict[str, float], default: float
) -> float:
    """What the multi-node checks still take, one after another: each one's expected wall time less
    what a running one has already run (without `groups`, the active group rows at their average)."""
    if groups is None:
        return sum(
            row["n"] * avg.get(row["kind"], default if avg else 0.0)
            for row in rows
            if row["scope"] == Scope.GROUP and row["status"] in ACTIVE_STATUSES
        )
    left = 0.0
    for group in groups:
        expected = avg.get(group.kind, group.expected_s if group.expected_s is not None else default)
        left += max(0.0, expected - (group.running_s or 0.0))
    return left


def duration_words(seconds: float) -> str:
    """ "40 s", "3 min": how far past its estimate a check has run."""
    return f"{int(round(seconds))} s" if seconds < 90 else f"{int(round(seconds / 60.0))} min"


def eta_text(seconds: float | None) -> str:
    """ "ETA ~3 min" style, rounded the way a person would say it."""
    if seconds is None:
        return ""
    if seconds < 60:
        return f"ETA ~{max(5, int(round(seconds / 5.0)) * 5)} s"
    minutes = int(round(seconds / 60.0))
    if minutes < 60:
        return f"ETA ~{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"ETA ~{hours} h {minutes} min" if minutes else f"ETA ~{hours} h"


def run_events(*, run: Run, limit: int = 200) -> list[RunEvent]:
    """The run's log, oldest first (the last `limit` lines)."""
    newest = list(RunEvent.objects.filter(run=run).order_by("-at", "-id")[:limit])
    return newest[::-1]


def cluster_list() -> QuerySet[Cluster]:
    return Cluster.objects.annotate(node_count=Count("nodes", distinct=True), last_run=Max("runs__created_at"))


@dataclass(frozen=True)
class Judgement:
    """What one finished result says about one node: its own result, or its share of a multi-node
    result whose output named it. Node health and the cluster page's "Last status" read these."""

    pk: int  # the result's (a group result's for a share of it)
    node_id: int
    run_id: int
    item_key: str
    kind: str
    status: str
    reason: str


_JUDGED_FIELDS = ("id", "node_id", "run_id", "item_key", "kind", "status", "reason", "scope", "attribution")


def judgements(*, results: QuerySet[CheckResult], cluster_id: int, node_ids: set[int] | None = None) -> list[Judgement]:
    """The judgements of these results (finished ones; not Kiln's own faults, which say nothing
    about a node), node results first in plan order, then the multi-node shares, for the nodes of
    `node_ids` (None: every node). A multi-node result judges the nodes its output named (its
    attribution), each with its own verdict; one that named none cannot be pinned on a node and
    judges none. Two queries at most."""
    rows = list(
        results.exclude(status__in=ACTIVE_STATUSES)
        .filter(portal_fault=False)
        .order_by("position", "id")
        .values_list(*_JUDGED_FIELDS)
    )
    out: list[Judgement] = []
    groups = []
    for pk, node_id, run_id, key, kind, status, reason, scope, attribution in rows:
        if scope == Scope.GROUP:
            groups.append((pk, run_id, key, kind, attribution))
        elif node_ids is None or node_id in node_ids:
            out.append(Judgement(pk, node_id, run_id, key, kind, status, reason))
    if not any(attribution for *_, attribution in groups):
        return out
    by_host = dict(Node.objects.filter(cluster_id=cluster_id).values_list("hostname", "id"))
    for pk, run_id, key, kind, attribution in groups:
        for host, verdict in (attribution or {}).items():
            node_id = by_host.get(host)
            if node_id is None or not isinstance(verdict, dict) or (node_ids is not None and node_id not in node_ids):
                continue
            status, reason = str(verdict.get("status", "")), str(verdict.get("reason", ""))
            out.append(Judgement(pk, node_id, run_id, key, kind, status, reason))
    return out


def cluster_nodes_with_last_status(*, cluster: Cluster, nodes: list[Node] | None = None) -> list[dict[str, Any]]:
    """Each node (of `nodes`, default all of the cluster) with the verdicts of its latest finished
    result per check kind: its own, or its share of a multi-node result that named it (judgements,
    which node health reads too: a node health calls healthy was checked). Pass one page of nodes:
    the aggregates then read only their results, and the latest multi-node result of each kind and
    node set."""
    if nodes is None:
        nodes = list(cluster.nodes.order_by("hostname"))
    finished = CheckResult.objects.exclude(status__in=ACTIVE_STATUSES).filter(portal_fault=False).order_by()
    latest_ids = list(
        finished.filter(node__in=[n.pk for n in nodes], scope=Scope.NODE)
        .values("node_id", "kind")
        .annotate(last_id=Max("id"))
        .values_list("last_id", flat=True)
    )
    # A later multi-node run over the same nodes judges them again: its latest result per node set.
    latest_ids += list(
        finished.filter(run__cluster=cluster, scope=Scope.GROUP)
        .values("kind", "node_set")
        .annotate(last_id=Max("id"))
        .values_list("last_id", flat=True)
    )
    found = judgements(
        results=CheckResult.objects.filter(id__in=latest_ids), cluster_id=cluster.pk, node_ids={n.pk for n in nodes}
    )
    latest: dict[tuple[int, str], Judgement] = {}
    for judged in found:
        kept = latest.get((judged.node_id, judged.kind))
        if kept is None or judged.pk > kept.pk:
            latest[(judged.node_id, judged.kind)] = judged
    by_node: dict[int, list[Judgement]] = {}
    for judged in latest.values():
        by_node.setdefault(judged.node_id, []).append(judged)
    out = []
    for node in nodes:
        last = sorted(by_node.get(node.pk, []), key=lambda r: r.kind)
        out.append({"node": node, "last": last, "worst": worst_status([r.status for r in last]) if last else ""})
    return out


def cluster_runs(*, cluster: Cluster, limit: int = 50) -> QuerySet[Run]:
    return cluster.runs.select_related("requested_by").order_by("-created_at")[:limit]


def result_detail(*, result_id: int) -> CheckResult:
    return CheckResult.objects.select_related("run", "run__cluster", "node").get(pk=result_id)


RAW_STREAMS = ("stdout", "stderr")


@dataclass(frozen=True)
class StoredOutput:
    """One raw output stream of a result as stored: zlib-compressed bytes (None: none was stored,
    the result was recorded before Kiln kept raw bytes or nothing ran) and the SHA-256 of the bytes."""

    result_id: int
    stream: str
    compressed: bytes | None
    sha256: str


def result_raw_output(*, result_id: int, stream: str) -> StoredOutput:
    """The stored raw bytes of a result's stdout or stderr (CheckResult.DoesNotExist when no such
    result; ValueError for another stream name)."""
    if stream not in RAW_STREAMS:
        raise ValueError(f"no output stream {stream!r}: {' or '.join(RAW_STREAMS)}")
    row = CheckResult.objects.filter(pk=result_id).values_list(f"{stream}_raw", f"{stream}_sha256").first()
    if row is None:
        raise CheckResult.DoesNotExist(f"no result {result_id}")
    compressed, sha256 = row
    return StoredOutput(result_id, stream, None if compressed is None else bytes(compressed), sha256)


RUN_JSON_CHUNK = 500  # results per query (and per measurements query): memory stays flat with the run's size
_RESULT_JSON_FIELDS = ("id", "scope", "node_set", "item_key", "status", "reason", "attribution", "node__hostname")


def run_json_results(*, run: Run) -> Iterator[dict[str, Any]]:
    """The results of `kiln_run --json`, one at a time, in chunks: never the raw outputs, never the
    whole run in memory."""
    results = (
        CheckResult.objects.filter(run=run)
        .select_related("node")
        .only(*_RESULT_JSON_FIELDS)
        .prefetch_related(
            Prefetch(
                "measurements",
                queryset=Measurement.objects.only("result_id", "name", "value", "text", "unit", "gpu", "labels"),
            )
        )
        .order_by("node__hostname", "position", "id")
    )
    for result in results.iterator(chunk_size=RUN_JSON_CHUNK):
        yield _result_json(result)


def run_table_rows(*, run: Run) -> Iterator[tuple[str, str, str, str]]:
    """(node, check, status, reason) of each result, in `run_json_results`' order: what `kiln run
    --wait` prints without --json. No measurements: a 256-node quick run has 130,000 of them."""
    results = (
        CheckResult.objects.filter(run=run)
        .select_related("node")
        .only("scope", "node_set", "item_key", "status", "reason", "node__hostname")
        .order_by("node__hostname", "position", "id")
    )
    for r in results.iterator(chunk_size=RUN_JSON_CHUNK):
        yield (r.node.hostname if r.scope == Scope.NODE else r.node_set, r.item_key, r.status, r.reason)


def run_json(*, run: Run) -> dict[str, Any]:
    """The stable `kiln_run --json` shape."""
    return {"run": run.pk, "status": run.status, "results": list(run_json_results(run=run))}


def run_json_text(*, run: Run) -> Iterator[str]:
    """`json.dumps(run_json(run=run), indent=2)`, in pieces, one result at a time."""
    head = json.dumps({"run": run.pk, "status": run.status}, indent=2)[:-2]  # without the closing "\n}"
    first = True
    for row in run_json_results(run=run):
        body = json.dumps(row, indent=2).replace("\n", "\n    ")
        yield (f'{head},\n  "results": [\n    ' if first else ",\n    ") + body
        first = False
    yield f'{head},\n  "results": []\n}}' if first else "\n  ]\n}"


@dataclass
class MeasurementTable:
    """A result's measurements for reading: node-level facts, and a GPU × metric pivot."""

    node_level: list[Any]
    gpu_columns: list[str]
    gpu_rows: list[tuple[int, list[Any]]]
    column_thresholds: list[str] = field(default_factory=list)
    left_out: int = 0  # shown by the chart family's own table instead


def measurement_table(*, result: CheckResult) -> MeasurementTable:
    """Leaves out the measurements the counter table its kind declares shows (the ECC table)."""
    every = list(result.measurements.all())
    counters = presentation_of(result.kind).counters
    measurements = [m for m in every if counters is None or not counters.shows(m.name, m.gpu)]
    left_out = len(every) - len(measurements)
    listed = _listed_names(measurements)
    node_level = [m for m in measurements if m.gpu is None or m.name in listed]
    per_gpu = [m for m in measurements if m.gpu is not None and m.name not in listed]
    columns: list[str] = []
    for m in per_gpu:
        if m.name not in columns:
            columns.append(m.name)
    cells: dict[int, dict[str, Any]] = {}
    for m in per_gpu:
        if m.gpu is None:
            continue
        cells.setdefault(m.gpu, {})[m.name] = m
    rows = [(gpu, [cells[gpu].get(name) for name in columns]) for gpu in sorted(cells)]
    thresholds = [next((m.threshold for m in per_gpu if m.name == name and m.threshold), "") for name in columns]
    return MeasurementTable(
        node_level=node_level,
        gpu_columns=columns,
        gpu_rows=rows,
        column_thresholds=thresholds,
        left_out=left_out,
    )


def _listed_names(measurements: list[Any]) -> set[str]:
    """A name measured several times on one GPU (a GPU's link to each NIC, one row per label) has
    no single cell in the GPU pivot: it is listed with its labels instead of showing one of them."""
    seen: set[tuple[int, str]] = set()
    listed: set[str] = set()
    for m in measurements:
        if m.gpu is None:
            continue
        if (m.gpu, m.name) in seen:
            listed.add(m.name)
        seen.add((m.gpu, m.name))
    return listed


def _result_json(r: CheckResult) -> dict[str, Any]:
    row: dict[str, Any] = {
        "node": r.node.hostname if r.scope == Scope.NODE else r.node_set,
        "check": r.item_key,
        "status": r.status,
        "reason": r.reason,
        "measurements": [
            {
                "name": m.name,
                "value": m.value if m.value is not None else m.text,
                "unit": m.unit,
                "gpu": m.gpu,
                **({"labels": m.labels} if m.labels else {}),
            }
            for m in r.measurements.all()
        ],
    }
    if r.scope == Scope.GROUP:
        row["scope"] = Scope.GROUP
        row["launcher"] = r.node.hostname
        row["nodes"] = r.attribution or {}
    return row

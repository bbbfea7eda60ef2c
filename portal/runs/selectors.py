"""Reads for runs and results. Query counts do not grow with the number of nodes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ClusterShell.NodeSet import NodeSet
from django.db.models import Count, Max, QuerySet

from portal.inventory.models import Cluster, Node
from portal.runs.models import ACTIVE_STATUSES, STATUS_COLOURS, CheckResult, Run, Status


@dataclass
class GroupCell:
    """A node's view of a multi-node result (links to the group result)."""

    pk: int
    status: str
    reason: str


@dataclass
class GridRow:
    node: Node
    cells: list[CheckResult | GroupCell | None]
    worst: str = ""


@dataclass
class RunGrid:
    run: Run
    columns: list[dict[str, Any]]
    rows: list[GridRow]
    counts: dict[str, int]
    total: int
    done: int
    problems_only: bool = False
    colours: dict[str, str] = field(default_factory=lambda: STATUS_COLOURS)

    @property
    def percent(self) -> int:
        return int(100 * self.done / self.total) if self.total else 100

    @property
    def count_items(self) -> list[tuple[str, int, str]]:
        order = [s.value for s in Status]
        return [(s, self.counts[s], STATUS_COLOURS[s]) for s in order if self.counts.get(s)]


_PROBLEMS = {Status.FAIL, Status.ERROR, Status.WARN, Status.CANCELLED}


def run_grid(*, run: Run, problems_only: bool = False) -> RunGrid:
    """Nodes × checks for one run: two queries whatever the node count."""
    columns = run.plan_snapshot["items"]
    positions = {item["key"]: i for i, item in enumerate(columns)}
    results = (
        CheckResult.objects.filter(run=run)
        .select_related("node")
        .only(
            "id",
            "status",
            "reason",
            "item_key",
            "scope",
            "node_set",
            "attribution",
            "node__id",
            "node__hostname",
            "node__rack",
            "run_id",
        )  # fmt: skip
        .order_by("node__hostname", "position")
    )
    rows: dict[int, GridRow] = {}
    counts: dict[str, int] = {}
    groups: list[CheckResult] = []
    for result in results:
        row = rows.get(result.node_id)
        if row is None:
            row = rows[result.node_id] = GridRow(node=result.node, cells=[None] * len(columns))
        counts[result.status] = counts.get(result.status, 0) + 1
        if result.scope == "group":
            groups.append(result)
            continue
        row.cells[positions.get(result.item_key, 0)] = result
    for group in groups:
        # A multi-node check shows in every member's row: the node's own attribution when the
        # output named it, else the group's status.
        members = set(NodeSet(group.node_set)) if group.node_set else set()
        for row in rows.values():
            hostname = row.node.hostname
            attributed = (group.attribution or {}).get(hostname)
            if attributed:
                row.cells[positions[group.item_key]] = GroupCell(group.pk, attributed["status"], attributed["reason"])
            elif hostname in members:
                row.cells[positions[group.item_key]] = GroupCell(group.pk, group.status, group.reason)
    from checks.base import worst_status

    for row in rows.values():
        row.worst = worst_status([c.status for c in row.cells if c is not None])
    row_list = list(rows.values())
    if problems_only:
        row_list = [r for r in row_list if any(c is not None and c.status in _PROBLEMS for c in r.cells)]
    total = sum(counts.values())
    done = total - sum(counts.get(s, 0) for s in ACTIVE_STATUSES)
    return RunGrid(
        run=run, columns=columns, rows=row_list, counts=counts, total=total, done=done, problems_only=problems_only
    )


def cluster_list() -> QuerySet[Cluster]:
    return Cluster.objects.annotate(node_count=Count("nodes", distinct=True), last_run=Max("runs__created_at"))


def cluster_nodes_with_last_status(*, cluster: Cluster) -> list[dict[str, Any]]:
    """Each node with the verdicts of its latest finished result per check kind."""
    nodes = list(cluster.nodes.order_by("hostname"))
    latest_ids = (
        CheckResult.objects.filter(node__cluster=cluster)
        .exclude(status__in=ACTIVE_STATUSES)
        .values("node_id", "kind")
        .annotate(last_id=Max("id"))
        .values_list("last_id", flat=True)
    )
    latest = CheckResult.objects.filter(id__in=list(latest_ids)).only("id", "node_id", "kind", "status", "reason")
    by_node: dict[int, list[CheckResult]] = {}
    for result in latest:
        by_node.setdefault(result.node_id, []).append(result)
    from checks.base import worst_status

    out = []
    for node in nodes:
        last = sorted(by_node.get(node.pk, []), key=lambda r: r.kind)
        out.append({"node": node, "last": last, "worst": worst_status([r.status for r in last]) if last else ""})
    return out


def cluster_runs(*, cluster: Cluster, limit: int = 50) -> QuerySet[Run]:
    return cluster.runs.select_related("requested_by").order_by("-created_at")[:limit]


def result_detail(*, result_id: int) -> CheckResult:
    return CheckResult.objects.select_related("run", "run__cluster", "node").get(pk=result_id)


def run_json(*, run: Run) -> dict[str, Any]:
    """The stable `kiln_run --json` shape."""
    results = (
        CheckResult.objects.filter(run=run)
        .select_related("node")
        .prefetch_related("measurements")
        .order_by("node__hostname", "position")
    )
    return {
        "run": run.pk,
        "status": run.status,
        "results": [_result_json(r) for r in results],
    }


@dataclass
class MeasurementTable:
    """A result's measurements for reading: node-level facts, and a GPU × metric pivot."""

    node_level: list[Any]
    gpu_columns: list[str]
    gpu_rows: list[tuple[int, list[Any]]]
    column_thresholds: list[str] = field(default_factory=list)


def measurement_table(*, result: CheckResult) -> MeasurementTable:
    measurements = list(result.measurements.all())
    node_level = [m for m in measurements if m.gpu is None]
    per_gpu = [m for m in measurements if m.gpu is not None]
    columns: list[str] = []
    for m in per_gpu:
        if m.name not in columns:
            columns.append(m.name)
    cells: dict[int, dict[str, Any]] = {}
    for m in per_gpu:
        cells.setdefault(m.gpu, {})[m.name] = m
    rows = [(gpu, [cells[gpu].get(name) for name in columns]) for gpu in sorted(cells)]
    thresholds = [next((m.threshold for m in per_gpu if m.name == name and m.threshold), "") for name in columns]
    return MeasurementTable(node_level=node_level, gpu_columns=columns, gpu_rows=rows, column_thresholds=thresholds)


def _result_json(r: CheckResult) -> dict[str, Any]:
    row: dict[str, Any] = {
        "node": r.node.hostname if r.scope == "node" else r.node_set,
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
    if r.scope == "group":
        row["scope"] = "group"
        row["launcher"] = r.node.hostname
        row["nodes"] = r.attribution or {}
    return row

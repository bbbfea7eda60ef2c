"""Rack heatmap of a run: each node by rack and position, by worst status or by a metric."""

from __future__ import annotations

from dataclasses import dataclass

from ClusterShell.NodeSet import NodeSet

from portal.charts.selectors.fleet import run_distribution
from portal.inventory.models import Node
from portal.runs.models import CheckResult, Run, Scope


@dataclass
class RackCell:
    node: str
    rack: str
    position: str
    status: str
    value: float | None
    url: str


@dataclass
class RackData:
    title: str
    metric: str  # "status" or "check:metric"
    unit: str
    cells: list[RackCell]


UNRACKED = "unracked"


def node_statuses(*, run: Run) -> dict[int, tuple[str, int]]:
    """Each node's worst status in the run and the result that carries it (node id -> (status,
    result pk)). Group results count for a node through its attribution, else as members. One query."""
    from checks.base import worst_status

    rows = CheckResult.objects.filter(run=run).values_list(
        "pk", "node_id", "node__hostname", "status", "scope", "node_set", "attribution"
    )
    per_node: dict[int, list[tuple[str, int]]] = {}
    by_host: dict[str, int] = {}
    groups = []
    for pk, node_id, hostname, status, scope, node_set, attribution in rows:
        by_host[hostname] = node_id
        if scope == Scope.GROUP:
            groups.append((pk, status, node_set, attribution or {}))
        else:
            per_node.setdefault(node_id, []).append((status, pk))
    for pk, status, node_set, attribution in groups:
        members = set(NodeSet(node_set)) if node_set else set()
        for hostname, node_id in by_host.items():
            if hostname in attribution:
                per_node.setdefault(node_id, []).append((attribution[hostname].get("status", status), pk))
            elif hostname in members:
                per_node.setdefault(node_id, []).append((status, pk))
    out = {}
    for node_id, cells in per_node.items():
        worst = worst_status([s for s, _ in cells])
        out[node_id] = (worst, next(pk for s, pk in cells if s == worst))
    return out


def run_rack(*, run: Run, metric: str = "status") -> RackData:
    """Each node of the run with its rack, position, worst status, and (for a metric) its value.
    Three queries at most, whatever the node count."""
    from django.urls import reverse

    statuses = node_statuses(run=run)
    values: dict[str, float] = {}
    unit = ""
    if metric != "status":
        item_key, _, rest = metric.partition(":")
        name, _, phase = rest.partition("@")
        dist = run_distribution(run=run, item_key=item_key, metric=name, phase=phase)
        values = {p.node: p.value for p in dist.points}
        unit = dist.unit
    nodes = Node.objects.filter(pk__in=list(statuses)).values_list("pk", "hostname", "rack", "position")
    cluster_name = run.cluster.name
    cells = []
    for pk, hostname, rack, position in nodes:
        status, result_pk = statuses[pk]
        cells.append(
            RackCell(
                node=hostname,
                rack=rack or UNRACKED,
                position=position or "",
                status=status,
                value=values.get(hostname),
                url=node_results_url(
                    cluster=cluster_name, hostname=hostname, fallback=reverse("runs:result_detail", args=[result_pk])
                ),
            )
        )
    title = "worst status" if metric == "status" else metric.replace("@", " ")
    return RackData(title=f"Racks by {title}, run #{run.pk}", metric=metric, unit=unit, cells=cells)


def node_results_url(*, cluster: str, hostname: str, fallback: str) -> str:
    """The node's history page (portal/history) when it is there, else `fallback` (the node's
    worst result in this run)."""
    from django.urls import NoReverseMatch, reverse

    try:
        return reverse("history:node_detail", args=[cluster, hostname])
    except NoReverseMatch:
        return fallback

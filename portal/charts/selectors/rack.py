"""Rack heatmap of a run: each node by rack and position, by worst status or by a metric."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import quote

from ClusterShell.NodeSet import NodeSet
from django.db.models import Min
from django.utils.http import RFC3986_SUBDELIMS

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
    higher_is_better: bool = True  # the metric's declared direction (the colours' sense)


UNRACKED = "unracked"


def node_statuses(*, run: Run, by_host: dict[str, int] | None = None) -> dict[int, tuple[str, int]]:
    """Each node's worst status in the run and the result that carries it (node id -> (status,
    result pk)). Group results count for a node through its attribution, else as members. Three
    queries (nodes, the distinct statuses of each node's own results counted in SQL, group results):
    a row or two per node, not one per result (16k at 1,250 nodes)."""
    from checks.core.base import worst_status

    if by_host is None:  # hostname -> node id of the run's cluster
        by_host = dict(Node.objects.filter(cluster_id=run.cluster_id).values_list("hostname", "id"))
    mine = CheckResult.objects.filter(run=run).order_by()
    per_node: dict[int, list[tuple[str, int]]] = {}
    own = mine.exclude(scope=Scope.GROUP).values("node_id", "status").annotate(first=Min("pk"))
    for node_id, status, pk in own.values_list("node_id", "status", "first"):
        per_node.setdefault(node_id, []).append((status, pk))
    groups = mine.filter(scope=Scope.GROUP).order_by("pk").values_list("pk", "status", "node_set", "attribution")
    expanded: dict[str, set[str]] = {}  # a node set once, however many group results span it
    for pk, status, node_set, attribution in groups:
        attribution = attribution or {}
        if node_set not in expanded:
            expanded[node_set] = (set(NodeSet(node_set)) if node_set else set()) & by_host.keys()
        for hostname in expanded[node_set] | (attribution.keys() & by_host.keys()):
            named = attribution.get(hostname)
            per_node.setdefault(by_host[hostname], []).append((named.get("status", status) if named else status, pk))
    out = {}
    for node_id, cells in per_node.items():
        worst = worst_status([s for s, _ in cells])
        out[node_id] = (worst, min(pk for s, pk in cells if s == worst))
    return out


def run_rack(*, run: Run, metric: str = "status") -> RackData:
    """Each node of the run with its rack, position, worst status, and (for a metric) its value.
    Five queries at most, whatever the node count."""

    # The cluster's nodes once (not `pk__in` 1,250 ids, whose parameters alone took psycopg 145 ms).
    nodes = list(Node.objects.filter(cluster_id=run.cluster_id).values_list("pk", "hostname", "rack", "position"))
    statuses = node_statuses(run=run, by_host={hostname: pk for pk, hostname, _, _ in nodes})
    values: dict[str, float] = {}
    unit = ""
    better = True
    if metric != "status":
        item_key, _, rest = metric.partition(":")
        name, _, phase = rest.partition("@")
        dist = run_distribution(run=run, item_key=item_key, metric=name, phase=phase)
        values = {p.node: p.value for p in dist.points}
        unit, better = dist.unit, dist.better == "higher"
    url = node_results_url_maker(cluster=run.cluster.name)
    cells = []
    for pk, hostname, rack, position in nodes:
        if pk not in statuses:
            continue
        status, result_pk = statuses[pk]
        cells.append(
            RackCell(
                node=hostname,
                rack=rack or UNRACKED,
                position=position or "",
                status=status,
                value=values.get(hostname),
                url=url(hostname, result_pk),
            )
        )
    title = "worst status" if metric == "status" else metric.replace("@", " ")
    return RackData(
        title=f"Racks by {title}, run #{run.pk}", metric=metric, unit=unit, cells=cells, higher_is_better=better
    )


def node_results_url(*, cluster: str, hostname: str, result_pk: int) -> str:
    """The node's history page (portal/history) when it is there, else the node's worst result in
    this run (`result_pk`)."""
    return node_results_url_maker(cluster=cluster)(hostname, result_pk)


def node_results_url_maker(*, cluster: str) -> Callable[[str, int], str]:
    """node_results_url for many nodes of one cluster: the URL resolver runs once, not once a node
    (1,250 reverse() calls were a third of the heatmap's time); each hostname is quoted as reverse()
    quotes it."""
    from django.urls import NoReverseMatch, reverse

    marker = "kiln-node-marker"  # a hostname reverse() leaves as it is, replaced below
    try:
        pattern = reverse("history:node_detail", args=[cluster, marker])
    except NoReverseMatch:
        return lambda hostname, result_pk: reverse("runs:result_detail", args=[result_pk])
    head, _, tail = pattern.rpartition(marker)
    return lambda hostname, result_pk: head + quote(hostname, safe=RFC3986_SUBDELIMS + "/~:@") + tail

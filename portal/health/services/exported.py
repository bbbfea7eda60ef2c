"""What /metrics exports (portal/health/metrics.py), rendered when a run that judged nodes finishes:
each node's families (NodeMetrics), then its cluster's aggregates over every node's stored values
(ClusterMetrics), so that a scrape streams stored rows instead of reading the fleet's measurements."""

from __future__ import annotations

from django.db import transaction

from portal.health.metrics import FAILING, JUDGED, ROWS_PER_FETCH, cluster_samples, node_samples
from portal.health.models import ClusterMetrics, NodeMetrics
from portal.inventory.models import Cluster, Node
from portal.runs.models import CheckResult, Scope

NODES_PER_STEP = 250  # nodes whose latest measurements are read at once: memory stays flat at any fleet size


def node_metrics_refresh(*, node_ids: list[int]) -> int:
    """Render the /metrics families of these nodes from their latest results, in steps of
    NODES_PER_STEP nodes, each step one transaction, then the aggregates of their clusters.
    Idempotent. Returns the node rows written."""
    written = 0
    clusters: set[int] = set()
    for start in range(0, len(node_ids), NODES_PER_STEP):
        step = node_ids[start : start + NODES_PER_STEP]
        rows = [
            NodeMetrics(node_id=node, family=family, samples=text, values=values)
            for (node, family), (text, values) in node_samples(step).items()
        ]
        with transaction.atomic():
            NodeMetrics.objects.filter(node_id__in=step).delete()
            NodeMetrics.objects.bulk_create(rows)
        written += len(rows)
        clusters.update(Node.objects.filter(id__in=step).values_list("cluster_id", flat=True))
    for cluster_id in sorted(clusters):
        cluster_metrics_refresh(cluster_id=cluster_id)
    return written


def cluster_metrics_refresh(*, cluster_id: int) -> int:
    """Render a cluster's /metrics families from its nodes' stored rows (their values, not their
    text; the failing-checks lines of the nodes that have one). Idempotent. Returns the rows written."""
    name = Cluster.objects.values_list("name", flat=True).get(pk=cluster_id)
    stored = NodeMetrics.objects.filter(node__cluster_id=cluster_id)
    values = stored.values_list("family", "values").iterator(chunk_size=ROWS_PER_FETCH)
    failing = stored.filter(family=FAILING).exclude(samples="").order_by("node_id").values_list("samples", flat=True)
    rows = [
        ClusterMetrics(cluster_id=cluster_id, family=family, samples=text)
        for family, text in cluster_samples(name, values, failing.iterator(chunk_size=ROWS_PER_FETCH)).items()
    ]
    with transaction.atomic():
        ClusterMetrics.objects.filter(cluster_id=cluster_id).delete()
        ClusterMetrics.objects.bulk_create(rows)
    return len(rows)


def run_metrics_refresh(*, run_id: int) -> int:
    """The nodes a run judged: their latest values may be this run's."""
    node_ids = CheckResult.objects.filter(run_id=run_id, node__isnull=False).values_list("node_id", flat=True)
    return node_metrics_refresh(node_ids=sorted(set(node_ids)))


def node_metrics_backfill() -> int:
    """After migrate: render every node that has a verdict of some check but no stored
    kiln_node_check_failing family with its values, which every such node gets: a database whose
    runs finished before /metrics was stored, or before that family or the values existed; then the
    aggregates of clusters that have stored nodes but none. Nothing to do otherwise. Returns the
    node rows written."""
    judged = CheckResult.objects.filter(node__isnull=False, scope=Scope.NODE, status__in=JUDGED).values("node_id")
    rendered = NodeMetrics.objects.filter(family=FAILING, values__isnull=False).values("node_id")
    missing = Node.objects.filter(id__in=judged).exclude(id__in=rendered).values_list("id", flat=True)
    written = node_metrics_refresh(node_ids=list(missing))
    with_nodes = NodeMetrics.objects.filter(family=FAILING).values("node__cluster_id")
    aggregated = ClusterMetrics.objects.values("cluster_id")
    for cluster_id in Cluster.objects.filter(id__in=with_nodes).exclude(id__in=aggregated).values_list("id", flat=True):
        cluster_metrics_refresh(cluster_id=cluster_id)
    return written

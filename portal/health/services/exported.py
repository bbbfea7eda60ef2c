"""What /metrics exports of each node (portal/health/metrics.py), rendered when a run that judged the
node finishes, so that a scrape streams stored rows instead of reading the fleet's measurements."""

from __future__ import annotations

from django.db import transaction

from portal.health.metrics import node_samples
from portal.health.models import NodeMetrics
from portal.inventory.models import Node
from portal.runs.models import CheckResult

NODES_PER_STEP = 250  # nodes whose latest measurements are read at once: memory stays flat at any fleet size


def node_metrics_refresh(*, node_ids: list[int]) -> int:
    """Render the /metrics families of these nodes from their latest results, in steps of
    NODES_PER_STEP nodes, each step one transaction. Idempotent. Returns the rows written."""
    written = 0
    for start in range(0, len(node_ids), NODES_PER_STEP):
        step = node_ids[start : start + NODES_PER_STEP]
        rows = [NodeMetrics(node_id=n, family=f, samples=text) for (n, f), text in node_samples(step).items()]
        with transaction.atomic():
            NodeMetrics.objects.filter(node_id__in=step).delete()
            NodeMetrics.objects.bulk_create(rows)
        written += len(rows)
    return written


def run_metrics_refresh(*, run_id: int) -> int:
    """The nodes a run judged: their latest values may be this run's."""
    node_ids = CheckResult.objects.filter(run_id=run_id, node__isnull=False).values_list("node_id", flat=True)
    return node_metrics_refresh(node_ids=sorted(set(node_ids)))


def node_metrics_backfill() -> int:
    """Once, for a database whose runs finished before /metrics was stored (after migrate): every
    node that has finished results. Does nothing when some node's rows are stored already."""
    if NodeMetrics.objects.exists():
        return 0
    with_results = CheckResult.objects.filter(node__isnull=False).values("node_id")
    return node_metrics_refresh(node_ids=list(Node.objects.filter(id__in=with_results).values_list("id", flat=True)))

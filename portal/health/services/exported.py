"""What /metrics exports of each node (portal/health/metrics.py), rendered when a run that judged the
node finishes, so that a scrape streams stored rows instead of reading the fleet's measurements."""

from __future__ import annotations

from django.db import transaction

from portal.health.metrics import FAILING, JUDGED, node_samples
from portal.health.models import NodeMetrics
from portal.inventory.models import Node
from portal.runs.models import CheckResult, Scope

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
    """After migrate: render every node that has a verdict of some check but no stored
    kiln_node_check_failing family, which every such node gets: a database whose runs finished
    before /metrics was stored, or before that family existed. Nothing to do otherwise."""
    judged = CheckResult.objects.filter(node__isnull=False, scope=Scope.NODE, status__in=JUDGED).values("node_id")
    rendered = NodeMetrics.objects.filter(family=FAILING).values("node_id")
    missing = Node.objects.filter(id__in=judged).exclude(id__in=rendered).values_list("id", flat=True)
    return node_metrics_refresh(node_ids=list(missing))

"""What /metrics exports of each node (portal/health/metrics.py), rendered when a run that judged the
node finishes, so that a scrape streams stored rows instead of reading the fleet's measurements."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models import QuerySet

from portal.health.metrics import FAILING, JUDGED, node_samples
from portal.health.models import NodeMetrics
from portal.inventory.models import Node
from portal.runs.models import CheckResult, Scope

NODES_PER_STEP = 250  # nodes whose rendered families are written at once: memory stays flat at any fleet size


def node_metrics_refresh(*, node_ids: list[int] | QuerySet[Any]) -> int:
    """Render the /metrics families of these nodes from their latest results (node_samples: two
    streamed reads whatever their number) and store them in one transaction: one DELETE, then an
    INSERT per NODES_PER_STEP nodes (what is rendered is never held for more). Idempotent. Returns
    the rows written."""
    written = 0
    with transaction.atomic():
        NodeMetrics.objects.filter(node_id__in=node_ids).delete()
        rows: list[NodeMetrics] = []
        for count, (node_id, families) in enumerate(node_samples(node_ids), start=1):
            rows += [NodeMetrics(node_id=node_id, family=f, samples=text) for f, text in families.items()]
            if count % NODES_PER_STEP == 0:
                written += len(NodeMetrics.objects.bulk_create(rows))
                rows = []
        written += len(NodeMetrics.objects.bulk_create(rows))
    return written


def run_metrics_refresh(*, run_id: int) -> int:
    """The nodes a run judged: their latest values may be this run's."""
    return node_metrics_refresh(node_ids=CheckResult.objects.filter(run_id=run_id).values("node_id"))


def node_metrics_backfill() -> int:
    """After migrate: render every node that has a verdict of some check but no stored
    kiln_node_check_failing family, which every such node gets: a database whose runs finished
    before /metrics was stored, or before that family existed. Nothing to do otherwise."""
    judged = CheckResult.objects.filter(node__isnull=False, scope=Scope.NODE, status__in=JUDGED).values("node_id")
    rendered = NodeMetrics.objects.filter(family=FAILING).values("node_id")
    missing = Node.objects.filter(id__in=judged).exclude(id__in=rendered).values_list("id", flat=True)
    return node_metrics_refresh(node_ids=list(missing))

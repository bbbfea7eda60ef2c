"""Nodes at risk, computed when a run finishes (portal/health/trends.py's rule), so that the health
page reads a few NodeRisk rows instead of every measurement of the cluster's last sweeps."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from portal.health import conf, trends
from portal.health.models import NodeHealth, NodeRisk
from portal.health.selectors import trend_rows_by_node, trend_run_ids
from portal.runs.models import CheckResult, Run


def risks_refresh(*, run_id: int) -> int:
    """Recompute the risks of the nodes `run_id` judged: their trend rows are read in one streamed
    query and judged a node at a time (memory stays flat at any fleet size), then stored in one
    transaction of three statements. Idempotent. Returns how many risks those nodes have now."""
    run = Run.objects.filter(pk=run_id).values("cluster_id").first()
    if run is None:
        return 0
    keep = conf.trend_sweeps()
    run_ids = trend_run_ids(cluster_id=run["cluster_id"], keep=keep)
    risks = [
        risk
        for rows in trend_rows_by_node(run_id=run_id, run_ids=run_ids, keep=keep)
        for risk in trends.at_risk(rows, keep=keep)
    ]
    judged = CheckResult.objects.filter(run_id=run_id).values("node_id")
    with transaction.atomic():
        NodeRisk.objects.filter(node_id__in=judged).delete()
        NodeRisk.objects.bulk_create(
            NodeRisk(node_id=r.node_id, kind=r.rule.kind, name=r.rule.name, gpu=r.gpu, phase=r.phase, values=r.values)
            for r in risks
        )
        NodeHealth.objects.filter(node_id__in=judged).update(risks_at=timezone.now())
    return len(risks)

"""Nodes at risk, computed when a run finishes (portal/health/trends.py's rule), so that the health
page reads a few NodeRisk rows instead of every measurement of the cluster's last sweeps."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from portal.health import conf, trends
from portal.health.models import NodeHealth, NodeRisk
from portal.health.selectors import trend_rows, trend_run_ids
from portal.runs.models import CheckResult, Run

NODES_PER_STEP = 250  # nodes whose measurements are read at once: memory stays flat at any fleet size


def risks_refresh(*, run_id: int) -> int:
    """Recompute the risks of the nodes `run_id` judged, in steps of NODES_PER_STEP nodes, each
    step one transaction. Idempotent. Returns how many risks those nodes have now."""
    run = Run.objects.filter(pk=run_id).values("cluster_id").first()
    if run is None:
        return 0
    node_ids = sorted(set(CheckResult.objects.filter(run_id=run_id).values_list("node_id", flat=True)))
    keep = conf.trend_sweeps()
    run_ids = trend_run_ids(cluster_id=run["cluster_id"], keep=keep)
    found = 0
    for start in range(0, len(node_ids), NODES_PER_STEP):
        step = node_ids[start : start + NODES_PER_STEP]
        risks = trends.at_risk(trend_rows(run_ids=run_ids, node_ids=step, keep=keep), keep=keep)
        with transaction.atomic():
            NodeRisk.objects.filter(node_id__in=step).delete()
            NodeRisk.objects.bulk_create(
                NodeRisk(
                    node_id=r.node_id, kind=r.rule.kind, name=r.rule.name, gpu=r.gpu, phase=r.phase, values=r.values
                )
                for r in risks
            )
            NodeHealth.objects.filter(node_id__in=step).update(risks_at=timezone.now())
        found += len(risks)
    return found

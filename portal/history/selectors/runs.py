"""Reads for a cluster's runs page: its runs with their result counts by status."""

from __future__ import annotations

from typing import Any

from django.db.models import Count, Q, QuerySet
from django.db.models.functions import Coalesce

from portal.inventory.models import Cluster
from portal.runs.models import Run, Status

_COUNTED = (Status.PASS, Status.WARN, Status.FAIL, Status.ERROR)


def cluster_runs(*, cluster: Cluster) -> QuerySet[Run]:
    """The cluster's runs, newest first, with their result counts by status (one aggregate query)."""
    counts = {f"n_{s.value}": Count("results", filter=Q(results__status=s)) for s in _COUNTED}
    return (
        Run.objects.filter(cluster=cluster)
        .select_related("requested_by")
        .annotate(n_results=Count("results"), n_nodes=Count("results__node", distinct=True), **counts)
        .order_by("-created_at", "-id")
    )


def cluster_run_counts(*, cluster: Cluster, limit: int = 100) -> list[dict[str, Any]]:
    """Pass/warn/fail/error counts of the latest `limit` runs, oldest first, for the chart."""
    counts = {f"n_{s.value}": Count("results", filter=Q(results__status=s)) for s in _COUNTED}
    rows = (
        Run.objects.filter(cluster=cluster)
        .annotate(at=Coalesce("started_at", "created_at"), **counts)
        .values("id", "at", *counts)
        .order_by("-created_at", "-id")[:limit]
    )
    return list(reversed(rows))

"""Reads for a cluster's runs page: its runs with their result counts by status."""

from __future__ import annotations

from typing import Any

from django.db.models import Count, Q, QuerySet

from portal.inventory.models import Cluster
from portal.runs.models import Run, Status

_COUNTED = (Status.PASS, Status.WARN, Status.FAIL, Status.ERROR)


def cluster_runs(*, cluster: Cluster) -> QuerySet[Run]:
    """The cluster's runs, newest first; `with_counts` adds the result counts of a page of them."""
    return Run.objects.filter(cluster=cluster).select_related("requested_by").order_by("-created_at", "-id")


def with_counts(runs: list[Run]) -> list[Run]:
    """Sets n_results, n_nodes and n_<status> on each run: from the summary written when it closed,
    else (an active run, or one closed before summaries) from one aggregate query over those runs."""
    missing = [r.pk for r in runs if not r.summary]
    live = _live_summaries(missing) if missing else {}
    for run in runs:
        summary = run.summary or live.get(run.pk, {})
        counts = summary.get("counts", {})
        run.n_results, run.n_nodes = summary.get("results", 0), summary.get("nodes", 0)  # type: ignore[attr-defined]
        for status in _COUNTED:
            setattr(run, f"n_{status.value}", counts.get(status.value, 0))
    return runs


def _live_summaries(run_ids: list[int]) -> dict[int, dict[str, Any]]:
    """Run summaries counted now (the shape finalize writes)."""
    counts = {f"n_{s.value}": Count("results", filter=Q(results__status=s)) for s in _COUNTED}
    rows = (
        Run.objects.filter(pk__in=run_ids)
        .annotate(n_results=Count("results"), n_nodes=Count("results__node", distinct=True), **counts)
        .values("pk", "n_results", "n_nodes", *counts)
    )
    return {
        row["pk"]: {
            "results": row["n_results"],
            "nodes": row["n_nodes"],
            "counts": {s.value: row[f"n_{s.value}"] for s in _COUNTED},
        }
        for row in rows
    }


def cluster_run_counts(*, cluster: Cluster, limit: int = 100) -> list[dict[str, Any]]:
    """Pass/warn/fail/error counts of the latest `limit` runs, oldest first, for the chart."""
    runs = with_counts(list(Run.objects.filter(cluster=cluster).order_by("-created_at", "-id")[:limit]))
    rows = [
        {
            "id": r.pk,
            "at": r.started_at or r.created_at,
            **{f"n_{s.value}": getattr(r, f"n_{s.value}") for s in _COUNTED},
        }
        for r in runs
    ]
    return list(reversed(rows))

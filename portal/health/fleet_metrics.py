"""The fleet-wide /metrics families, read live at each scrape (portal/health/metrics.py streams them
after the per-node ones). Each is a handful of grouped queries, and its series are bounded by
clusters x states, clusters, or workers, never by history:

    kiln_cluster_nodes{cluster,state}                         nodes in each health state
    kiln_cluster_last_sweep_duration_seconds{cluster}         the latest finished sweep run: started to finished
    kiln_cluster_next_sweep_due_timestamp_seconds{cluster}    when the next sweep should have started a run
    kiln_worker_last_heartbeat_timestamp_seconds{worker}      each Celery worker's last liveness beat
"""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime, timedelta
from typing import Any

from celery.schedules import crontab
from django.db.models import Count, Max, Q
from django.db.models.functions import Coalesce
from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily, Metric

from portal.health.crontab import crontab_parse
from portal.health.models import HealthState, Schedule, WorkerBeat
from portal.inventory.models import Cluster, Node
from portal.runs.models import Run

# A worker whose beats stopped a week ago (crashed, never restarted, never replaced) leaves /metrics:
# its "worker down" alert has by then fired for 7 days; a worker that stops cleanly deletes its row.
WORKER_FORGET = timedelta(days=7)


def cluster_nodes(cluster: str | None) -> Metric:
    """Every cluster x every state, zeros included: a panel or alert sees "0 failed", not no data."""
    family = GaugeMetricFamily("kiln_cluster_nodes", "Nodes in each health state", labels=["cluster", "state"])
    clusters = Cluster.objects.all() if cluster is None else Cluster.objects.filter(name=cluster)
    nodes = Node.objects.filter(cluster__in=clusters)
    counts: dict[str, dict[str, int]] = defaultdict(dict)
    rows: Any = nodes.values("cluster__name", "health__state").annotate(n=Count("id"))
    for row in rows:
        state = row["health__state"] or HealthState.UNKNOWN  # no health row yet: never judged
        by_state = counts[row["cluster__name"]]
        by_state[state] = by_state.get(state, 0) + row["n"]
    for name in clusters.order_by("name").values_list("name", flat=True):
        for state in HealthState.values:
            family.add_metric([name, state], float(counts[name].get(state, 0)))
    return family


def sweep_durations(cluster: str | None) -> Metric:
    """Of each cluster's newest finished sweep (a run a schedule started): finished minus started
    (created when it never started). Queue time before the first check counts: the operator waits it."""
    family = GaugeMetricFamily(
        "kiln_cluster_last_sweep_duration_seconds",
        "Duration of the latest finished scheduled sweep",
        labels=["cluster"],
    )
    runs = Run.objects.filter(sweep_fire__isnull=False, finished_at__isnull=False)
    if cluster is not None:
        runs = runs.filter(cluster__name=cluster)
    last = runs.values("cluster_id").annotate(last=Max("id")).values_list("last", flat=True)
    rows = (
        Run.objects.filter(id__in=list(last))
        .annotate(began=Coalesce("started_at", "created_at"))
        .values_list("cluster__name", "began", "finished_at")
        .order_by("cluster__name")
    )
    for name, began, finished in rows:
        family.add_metric([name], max(0.0, (finished - began).total_seconds()))
    return family


def next_fire(expression: str, after: datetime) -> datetime:
    """The first time a 5-field UTC crontab fires after `after`, by celery's own crontab (what beat runs)."""
    schedule = crontab(**crontab_parse(expression), nowfun=lambda: after)
    start, delta, _ = schedule.remaining_delta(after.astimezone(UTC), tz=UTC)
    return start + delta  # type: ignore[no-any-return]  # celery's ffwd adds to a datetime


def sweeps_due(cluster: str | None) -> Metric:
    """Per cluster, the earliest of its enabled schedules' next firings after the last firing that
    started a run (or after the schedule was made). Past it by more than a sweep's slack: missed."""
    family = GaugeMetricFamily(
        "kiln_cluster_next_sweep_due_timestamp_seconds",
        "When the next scheduled sweep is due to start a run (past: it has not)",
        labels=["cluster"],
    )
    schedules = Schedule.objects.filter(enabled=True)
    if cluster is not None:
        schedules = schedules.filter(cluster__name=cluster)
    rows = schedules.annotate(last=Max("fires__fire_time", filter=Q(fires__run__isnull=False))).values_list(
        "cluster__name", "crontab", "last", "created_at"
    )
    due: dict[str, datetime] = {}
    for name, expression, last, created in rows:
        when = next_fire(expression, last or created)
        due[name] = min(when, due.get(name, when))
    for name in sorted(due):
        family.add_metric([name], due[name].timestamp())
    return family


def workers(now: datetime | None = None) -> Metric:
    """Workers are not a cluster's: every scrape (per-cluster jobs too) carries them; the alert takes max by worker."""
    family = GaugeMetricFamily(
        "kiln_worker_last_heartbeat_timestamp_seconds", "Last liveness beat of each Celery worker", labels=["worker"]
    )
    since = (now or timezone.now()) - WORKER_FORGET
    for name, seen in WorkerBeat.objects.filter(seen_at__gte=since).order_by("name").values_list("name", "seen_at"):
        family.add_metric([name], seen.timestamp())
    return family


def fleet_families(cluster: str | None) -> list[Metric]:
    return [cluster_nodes(cluster), sweep_durations(cluster), sweeps_due(cluster), workers()]

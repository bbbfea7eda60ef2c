"""Reads of the health app. Query counts do not grow with the number of nodes."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import groupby
from operator import itemgetter
from typing import Any

from django.db.models import Count, F, Max, Q, QuerySet, Window
from django.db.models.functions import RowNumber

from portal.health import conf, trends
from portal.health.models import (
    HEALTH_COLOURS,
    AlertDelivery,
    HealthState,
    HealthTransition,
    NodeHealth,
    NodeRisk,
    Schedule,
    ScheduledFire,
    SchedulerAction,
)
from portal.inventory.models import Cluster, Node
from portal.runs.models import ACTIVE_STATUSES, CheckResult, Measurement, Run, Scope, Status

OUT_OF_TRENDS = [HealthState.FAILED, HealthState.UNREACHABLE]  # already news: no trend shown
# Trend rows per round trip of a streamed read (a node has ~300 at 5 sweeps: a few dozen nodes).
TREND_ROWS_PER_FETCH = 10000
STATE_ORDER = [
    HealthState.FAILED,
    HealthState.UNREACHABLE,
    HealthState.DEGRADED,
    HealthState.HEALTHY,
    HealthState.UNKNOWN,
]


def _cells(counts: dict[str, int]) -> list[tuple[str, int, str]]:
    return [(s.value, counts.get(s.value, 0), HEALTH_COLOURS[s.value]) for s in STATE_ORDER]


def state_counts(*, cluster: Cluster | None = None) -> dict[str, dict[str, int]]:
    """cluster name -> {state: node count} (nodes never judged count as unknown). One query."""
    nodes = Node.objects.all() if cluster is None else Node.objects.filter(cluster=cluster)
    out: dict[str, dict[str, int]] = {}
    for row in nodes.values("cluster__name", "health__state").annotate(n=Count("id")):
        counts = out.setdefault(row["cluster__name"], {s.value: 0 for s in STATE_ORDER})
        counts[row["health__state"] or HealthState.UNKNOWN] += row["n"]
    return out


def problem_nodes(*, cluster: Cluster) -> QuerySet[NodeHealth]:
    """Nodes that are not healthy (failed first), with why and since when."""
    bad = [HealthState.FAILED, HealthState.UNREACHABLE, HealthState.DEGRADED]
    return (
        NodeHealth.objects.filter(node__cluster=cluster, state__in=bad)
        .select_related("node", "last_run")
        .order_by("state", "node__hostname")
    )


def transitions(*, cluster: Cluster) -> QuerySet[HealthTransition]:
    return HealthTransition.objects.filter(node__cluster=cluster).select_related("node").order_by("-created_at", "-id")


def deliveries(*, cluster: Cluster) -> QuerySet[AlertDelivery]:
    return AlertDelivery.objects.filter(cluster=cluster).select_related("transition", "transition__node")


def scheduler_actions(*, cluster: Cluster) -> QuerySet[SchedulerAction]:
    return SchedulerAction.objects.filter(node__cluster=cluster).select_related("node")


@dataclass
class NodeHealthHistory:
    health: NodeHealth | None
    transitions: list[HealthTransition]
    actions: list[SchedulerAction]


def node_health_history(*, node: Node, limit: int = 20) -> NodeHealthHistory:
    """One node's current health, its latest transitions and scheduler actions. Three queries."""
    return NodeHealthHistory(
        health=NodeHealth.objects.filter(node=node).first(),
        transitions=list(HealthTransition.objects.filter(node=node).order_by("-created_at", "-id")[:limit]),
        actions=list(SchedulerAction.objects.filter(node=node).select_related("node").order_by("-id")[:limit]),
    )


def schedules(*, cluster: Cluster | None = None) -> QuerySet[Schedule]:
    qs = (
        Schedule.objects.select_related("cluster", "plan", "periodic_task", "created_by")
        .annotate(last_fire=Max("fires__fire_time"))
        .order_by("cluster__name", "name", "id")
    )
    return qs if cluster is None else qs.filter(cluster=cluster)


@dataclass
class LastSweep:
    run: Run | None
    fire_time: Any = None
    last_run: Run | None = None


def last_sweep(*, cluster: Cluster) -> LastSweep:
    fire = (
        ScheduledFire.objects.filter(schedule__cluster=cluster, run__isnull=False)
        .select_related("run")
        .order_by("-fire_time")
        .first()
    )
    last_run = Run.objects.filter(cluster=cluster).exclude(status__in=ACTIVE_STATUSES).order_by("-finished_at").first()
    return LastSweep(run=fire.run if fire else None, fire_time=fire.fire_time if fire else None, last_run=last_run)


def trend_run_ids(*, cluster_id: int, keep: int) -> list[int]:
    """The cluster's recent finished runs that trends look at (enough for `keep` results a node)."""
    runs = Run.objects.filter(cluster_id=cluster_id).exclude(status__in=ACTIVE_STATUSES).order_by("-id")
    return list(runs.values_list("id", flat=True)[: keep * 4])


def _latest_results(*, run_ids: list[int], node_ids: list[int], keep: int) -> list[int]:
    """Each node's `keep` latest passed or warned results of each trended check, among those runs:
    one narrow query, so the measurements read next do not grow with the history kept."""
    rows = (
        CheckResult.objects.filter(
            run_id__in=run_ids,
            node_id__in=node_ids,
            scope=Scope.NODE,
            kind__in={r.kind for r in trends.RULES},
            status__in=[Status.PASS, Status.WARN],
        )
        .order_by("-id")
        .values_list("id", "node_id", "kind")
    )
    taken: dict[tuple[int, str], int] = {}
    picked = []
    for result_id, node_id, kind in rows:
        if taken.get((node_id, kind), 0) < keep:
            taken[(node_id, kind)] = taken.get((node_id, kind), 0) + 1
            picked.append(result_id)
    return picked


def trend_rows_by_node(*, run_id: int, run_ids: list[int], keep: int) -> Iterator[list[dict[str, Any]]]:
    """trend_rows(run_ids=..., node_ids=<the nodes `run_id` judged>, keep=...), a node's rows at a time
    in node order, from one streamed query whatever the fleet's size: each node's `keep` latest
    results of each trended check are ranked in SQL (as _latest_results picks them), so neither a
    list of ids nor more than one node's rows is ever held."""
    judged = CheckResult.objects.filter(run_id=run_id).values("node_id")
    latest = (
        CheckResult.objects.filter(
            run_id__in=run_ids,
            node_id__in=judged,
            scope=Scope.NODE,
            kind__in={r.kind for r in trends.RULES},
            status__in=[Status.PASS, Status.WARN],
        )
        .annotate(rank=Window(RowNumber(), partition_by=[F("node_id"), F("kind")], order_by=F("id").desc()))
        .filter(rank__lte=keep)
        .values("id")
    )
    rows = (
        Measurement.objects.filter(result_id__in=latest, name__in={r.name for r in trends.RULES})
        .order_by("result__node_id")
        .values_list(
            "result__node_id", "result__node__hostname", "result__kind", "name", "gpu", "labels", "value", "result_id"
        )
    )
    for _, found in groupby(rows.iterator(chunk_size=TREND_ROWS_PER_FETCH), key=itemgetter(0)):
        node = [
            {"node_id": node_id, "hostname": hostname, "kind": kind, "name": name, "gpu": gpu,
             "phase": (labels or {}).get("phase", ""), "value": value, "result_id": result_id}
            for node_id, hostname, kind, name, gpu, labels, value, result_id in found
            if (kind, name) in trends.RULE_BY_KEY
        ]  # fmt: skip
        if node:
            yield node


def trend_rows(*, run_ids: list[int], node_ids: list[int] | None = None, keep: int = 0) -> list[dict[str, Any]]:
    """The trend rules' measurements (trends.at_risk's rows) of those runs, passed or warned
    results only; of the given nodes (with `keep`: of their latest `keep` results of each check
    only), or of every node that is neither failed nor unreachable."""
    measurements = Measurement.objects.filter(
        result__run_id__in=run_ids,
        result__scope=Scope.NODE,
        result__kind__in={r.kind for r in trends.RULES},
        result__status__in=[Status.PASS, Status.WARN],
        name__in={r.name for r in trends.RULES},
    )
    if node_ids is None:
        measurements = measurements.exclude(result__node__health__state__in=OUT_OF_TRENDS)
    elif keep:
        measurements = measurements.filter(result_id__in=_latest_results(run_ids=run_ids, node_ids=node_ids, keep=keep))
    else:
        measurements = measurements.filter(result__node_id__in=node_ids)
    fields = (
        "result__node_id",
        "result__node__hostname",
        "result__kind",
        "name",
        "gpu",
        "labels",
        "value",
        "result_id",
    )
    return [
        {
            "node_id": r["result__node_id"],
            "hostname": r["result__node__hostname"],
            "kind": r["result__kind"],
            "name": r["name"],
            "gpu": r["gpu"],
            "phase": (r["labels"] or {}).get("phase", ""),
            "value": r["value"],
            "result_id": r["result_id"],
        }
        for r in measurements.values(*fields)
        if (r["result__kind"], r["name"]) in trends.RULE_BY_KEY
    ]


def nodes_at_risk(*, cluster: Cluster, keep: int | None = None) -> list[trends.Risk]:
    """Trend rule of portal/health/trends.py for the cluster's nodes that are neither failed nor
    unreachable. The page (no `keep`) reads what was computed when runs finished (NodeRisk); a node
    never computed, or another `keep`, is computed here from the measurements."""
    if keep is not None:
        return trends.at_risk(trend_rows(run_ids=trend_run_ids(cluster_id=cluster.pk, keep=keep)), keep=keep)
    in_scope = Node.objects.filter(cluster=cluster).exclude(health__state__in=OUT_OF_TRENDS)
    stored = [
        trends.Risk(r.node.hostname, r.node_id, trends.RULE_BY_KEY[(r.kind, r.name)], r.gpu, r.phase, list(r.values))
        for r in NodeRisk.objects.filter(node__in=in_scope).select_related("node")
        if (r.kind, r.name) in trends.RULE_BY_KEY  # a rule since removed shows nothing
    ]
    never = list(
        in_scope.filter(Q(health__isnull=True) | Q(health__risks_at__isnull=True)).values_list("pk", flat=True)
    )
    if not never:
        return trends.sorted_risks(stored)
    keep = conf.trend_sweeps()
    live = trends.at_risk(
        trend_rows(run_ids=trend_run_ids(cluster_id=cluster.pk, keep=keep), node_ids=never, keep=keep), keep=keep
    )
    return trends.sorted_risks(stored + live)


@dataclass
class Dashboard:
    cluster: Cluster
    counts: dict[str, int]
    last_sweep: LastSweep
    at_risk: list[trends.Risk] = field(default_factory=list)

    @property
    def cells(self) -> list[tuple[str, int, str]]:
        return _cells(self.counts)


def dashboard(*, cluster: Cluster) -> Dashboard:
    counts = state_counts(cluster=cluster).get(cluster.name, {s.value: 0 for s in STATE_ORDER})
    return Dashboard(
        cluster=cluster, counts=counts, last_sweep=last_sweep(cluster=cluster), at_risk=nodes_at_risk(cluster=cluster)
    )


def clusters_overview() -> list[dict[str, Any]]:
    counts = state_counts()
    problems = dict(
        Cluster.objects.annotate(
            n=Count("nodes", filter=Q(nodes__health__state__in=[HealthState.FAILED, HealthState.UNREACHABLE]))
        ).values_list("name", "n")
    )
    return [
        {"name": name, "cells": _cells(counts.get(name, {})), "problems": problems.get(name, 0)}
        for name in Cluster.objects.order_by("name").values_list("name", flat=True)
    ]

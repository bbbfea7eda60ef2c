"""Reads for the node page: the node's timeline (its own and its group results) and the trends of
its key metrics across runs."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Q, QuerySet
from django.db.models.functions import Coalesce

from portal.history.selectors.metrics import _KEY_KINDS, _KEY_NAMES, KEY_METRICS, Metric, group_result_ids, metric_for
from portal.inventory.models import Node
from portal.ordering import natural_key
from portal.runs.models import CheckResult, Measurement, Scope


def node_get(*, cluster_name: str, hostname: str) -> Node:
    return Node.objects.select_related("cluster").get(cluster__name=cluster_name, hostname=hostname)


def node_results(*, node: Node) -> QuerySet[CheckResult]:
    """Every result of the node, its own and the group results that include it, newest first."""
    in_cluster = CheckResult.objects.filter(run__cluster_id=node.cluster_id)
    group_ids = group_result_ids(hostnames=[node.hostname], groups=in_cluster)
    return (
        CheckResult.objects.filter(Q(node=node) | Q(id__in=group_ids))
        .select_related("run")
        .only(
            "id",
            "item_key",
            "kind",
            "scope",
            "node_set",
            "attribution",
            "status",
            "reason",
            "position",
            "started_at",
            "finished_at",
            "duration_s",
            "node_id",
            "run__id",
            "run__created_at",
            "run__started_at",
            "run__plan_snapshot",
            "run__status",
        )  # fmt: skip
        .order_by("-run__created_at", "-run_id", "position", "id")
    )


@dataclass
class TimelineEntry:
    """A result as the node saw it: group results carry the node's attributed status when named."""

    result: CheckResult
    status: str
    reason: str
    is_group: bool


def timeline_entries(*, results: Iterable[CheckResult], hostname: str) -> list[TimelineEntry]:
    out = []
    for r in results:
        mine = (r.attribution or {}).get(hostname) if r.scope == Scope.GROUP else None
        if mine:
            out.append(TimelineEntry(r, mine.get("status", r.status), mine.get("reason", ""), True))
        else:
            out.append(TimelineEntry(r, r.status, r.reason, r.scope == Scope.GROUP))
    return out


@dataclass
class TrendPoint:
    run_id: int
    result_id: int
    at: dt.datetime
    value: float
    ok: bool | None
    status: str
    threshold: str


@dataclass
class Trend:
    """One metric of one node across runs: lines keyed by their label (a GPU, a check, a group),
    each point with the threshold it was judged against."""

    metric: Metric
    lines: dict[str, list[TrendPoint]] = field(default_factory=dict)


TREND_RUNS = 100


_RESULT_FIELDS = ("id", "run_id", "kind", "item_key", "scope", "status", "node_set", "at")


def _trend_rows(node: Node, runs: int) -> list[tuple[Any, ...]]:
    """The node's key values (its own and its group results') over its latest `runs` runs, oldest
    first, as (name, value, gpu, labels, ok, threshold, at, result id, run id, kind, item key, scope,
    status, node set): the group-membership read, the node's key results, then their values by
    (result, name) with no join (a join lets the planner scan every result of the cluster)."""
    cluster_results = CheckResult.objects.filter(run__cluster_id=node.cluster_id)
    group_ids = group_result_ids(hostnames=[node.hostname], groups=cluster_results.filter(kind__in=_KEY_KINDS))
    results = (
        CheckResult.objects.filter(Q(node=node, kind__in=_KEY_KINDS) | Q(id__in=group_ids))
        .annotate(at=Coalesce("run__started_at", "run__created_at"))
        .order_by()
        .values_list(*_RESULT_FIELDS)
    )
    by_id = {row[0]: row for row in results}
    window = set(sorted({row[1] for row in by_id.values()}, reverse=True)[:runs])
    values = (
        Measurement.objects.filter(
            result_id__in=[pk for pk, row in by_id.items() if row[1] in window], name__in=_KEY_NAMES
        )
        .order_by()
        .values_list("name", "value", "gpu", "labels", "ok", "threshold", "result_id", "id")
    )
    rows = []
    for name, value, gpu, labels, ok, threshold, result_id, pk in values:
        _, run_id, kind, item_key, scope, status, node_set, at = by_id[result_id]
        rows.append((at, run_id, gpu if gpu is not None else 1 << 30, pk, (  # NULL gpu last, as PostgreSQL sorts
            name, value, gpu, labels, ok, threshold, at, result_id, run_id, kind, item_key, scope, status, node_set
        )))  # fmt: skip
    rows.sort(key=lambda r: r[:4])
    return [r[4] for r in rows]


def _trend_line(
    *, metric: Metric, hostname: str, labels: dict[str, Any], scope: str, item_key: str, gpu: int | None, ns: str
) -> str | None:
    """The chart line a value belongs to, or None when it is not this node's: another host's value of
    a group result, or a group's own value of a metric not drawn on nodes."""
    if scope != Scope.GROUP:
        return item_key if gpu is None else f"{item_key} · GPU {gpu}"
    host = labels.get("host")
    if host is not None and host != hostname:
        return None
    if host is None and not metric.group_value_on_node:
        return None
    return f"{item_key} (group {ns})" if host is None else item_key


def _tidy_lines(trends: dict[str, Trend], item_keys: dict[str, set[str]]) -> None:
    """Drop the check name from per-GPU lines when one check draws the chart, and sort the lines."""
    for key, trend in trends.items():
        if len(item_keys.get(key, ())) == 1:  # one check: "GPU 3" says it all
            trend.lines = {k.split(" · ", 1)[-1]: v for k, v in trend.lines.items()}
        trend.lines = dict(sorted(trend.lines.items(), key=lambda kv: natural_key(kv[0])))


def node_trends(*, node: Node, runs: int = TREND_RUNS) -> list[Trend]:
    """The key metrics of the node over its latest `runs` runs: two queries (run window, values)."""
    trends: dict[str, Trend] = {}
    item_keys: dict[str, set[str]] = {}
    for (
        name,
        value,
        gpu,
        labels,
        ok,
        threshold,
        at,
        result_id,
        run_id,
        kind,
        item_key,
        scope,
        status,
        ns,
    ) in _trend_rows(node, runs):
        labels = labels or {}
        metric = metric_for(kind=kind, name=name, labels=labels)
        if metric is None or value is None:
            continue
        line = _trend_line(
            metric=metric, hostname=node.hostname, labels=labels, scope=scope, item_key=item_key, gpu=gpu, ns=ns
        )
        if line is None:
            continue
        if scope != Scope.GROUP and gpu is not None:
            item_keys.setdefault(metric.key, set()).add(item_key)
        trend = trends.setdefault(metric.key, Trend(metric=metric))
        point = TrendPoint(run_id, result_id, at, value * metric.scale, ok, status, threshold)
        # Each point keeps the threshold it was judged against: a line is drawn against its own
        # (a multi-node busbw's floor is not the node's), portal/history/figures.py.
        trend.lines.setdefault(line, []).append(point)
    _tidy_lines(trends, item_keys)
    return [trends[m.key] for m in KEY_METRICS if m.key in trends]

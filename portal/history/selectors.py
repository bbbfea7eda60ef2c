"""Reads for the history pages: a node's timeline and trends, a cluster's runs, run comparison and
result search. Every read is a fixed number of queries, whatever the number of nodes or results."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ClusterShell.NodeSet import NodeSet
from django.db.models import Count, Q, QuerySet
from django.db.models.functions import Coalesce

from checks.presentation import KeyMetric, presented
from portal.inventory.models import Cluster, Node
from portal.ordering import natural_key
from portal.runs.models import CheckResult, Measurement, Run, Scope, Status


@dataclass(frozen=True)
class Metric:
    """A key measurement followed across runs, as declared by the checks that store it
    (checks/presentation.py KeyMetric), with the kinds that declare it."""

    key: str
    label: str
    name: str
    kinds: tuple[str, ...]
    unit: str
    better: str = "higher"
    scale: float = 1.0
    per_gpu: bool = False
    gpu_agg: str = "min"
    labels: tuple[tuple[str, str], ...] = ()
    tolerance_pct: float = 2.0
    group_value_on_node: bool = False

    def matches(self, kind: str, labels: dict[str, Any]) -> bool:
        return kind in self.kinds and all(str(labels.get(k)) == v for k, v in self.labels)


def _key_metrics() -> tuple[Metric, ...]:
    """Every declared key metric once, with every kind that declares it, in the kinds' rank order."""
    declared: dict[str, KeyMetric] = {}
    kinds: dict[str, list[str]] = {}
    for kind, shown in presented():
        for km in shown.key_metrics:
            if declared.setdefault(km.key, km) != km:
                raise ValueError(f"key metric {km.key!r} is declared differently by {kind} and {kinds[km.key]}")
            kinds.setdefault(km.key, []).append(kind)
    return tuple(
        Metric(
            key=km.key,
            label=km.label,
            name=km.name,
            kinds=tuple(kinds[km.key]),
            unit=km.unit,
            better=km.better,
            scale=km.scale,
            per_gpu=km.per_gpu,
            gpu_agg=km.gpu_agg,
            labels=km.labels,
            tolerance_pct=km.tolerance_pct,
            group_value_on_node=km.group_value_on_node,
        )  # fmt: skip
        for km in declared.values()
    )


KEY_METRICS: tuple[Metric, ...] = _key_metrics()
METRICS_BY_KEY = {m.key: m for m in KEY_METRICS}
_KEY_KINDS = sorted({k for m in KEY_METRICS for k in m.kinds})
_KEY_NAMES = sorted({m.name for m in KEY_METRICS})
_STATUS_RANK: dict[str, int] = {Status.PASS: 0, Status.WARN: 1, Status.FAIL: 2, Status.ERROR: 2}


def metric_for(*, kind: str, name: str, labels: dict[str, Any]) -> Metric | None:
    for metric in KEY_METRICS:
        if metric.name == name and metric.matches(kind, labels):
            return metric
    return None


def _members(node_set: str, cache: dict[str, frozenset[str]]) -> frozenset[str]:
    if node_set not in cache:
        try:
            cache[node_set] = frozenset(NodeSet(node_set)) if node_set else frozenset()
        except Exception:  # a malformed stored node set names no one, it does not break the page
            cache[node_set] = frozenset()
    return cache[node_set]


def group_result_ids(*, hostnames: Iterable[str], groups: QuerySet[CheckResult]) -> list[int]:
    """Ids of the group results that span any of `hostnames`. A folded node set cannot be searched in
    SQL, so this reads (id, node_set, attribution) of the candidate group results once and tests
    membership here: one query, bounded by the number of group results, not of nodes."""
    wanted = set(hostnames)
    cache: dict[str, frozenset[str]] = {}
    ids = []
    for pk, node_set, attribution in groups.filter(scope=Scope.GROUP).values_list("id", "node_set", "attribution"):
        if wanted & _members(node_set, cache) or wanted & set(attribution or {}):
            ids.append(pk)
    return ids


# --- node page --------------------------------------------------------------------------------


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
    """One metric of one node across runs: lines keyed by their label (a GPU, a check, a group)."""

    metric: Metric
    lines: dict[str, list[TrendPoint]] = field(default_factory=dict)
    threshold: str = ""
    node_threshold: bool = False  # whether `threshold` comes from a node-scope check


TREND_RUNS = 100


def node_trends(*, node: Node, runs: int = TREND_RUNS) -> list[Trend]:
    """The key metrics of the node over its latest `runs` runs: two queries (run window, values)."""
    cluster_results = CheckResult.objects.filter(run__cluster_id=node.cluster_id)
    group_ids = group_result_ids(hostnames=[node.hostname], groups=cluster_results.filter(kind__in=_KEY_KINDS))
    mine = Q(result__node=node) | Q(result_id__in=group_ids)
    run_ids = list(
        CheckResult.objects.filter(Q(node=node) | Q(id__in=group_ids))
        .values_list("run_id", flat=True)
        .distinct()
        .order_by("-run_id")[:runs]
    )
    rows = (
        Measurement.objects.filter(mine, result__run_id__in=run_ids, result__kind__in=_KEY_KINDS, name__in=_KEY_NAMES)
        .annotate(at=Coalesce("result__run__started_at", "result__run__created_at"))
        .values_list(
            "name",
            "value",
            "gpu",
            "labels",
            "ok",
            "threshold",
            "at",
            "result_id",
            "result__run_id",
            "result__kind",
            "result__item_key",
            "result__scope",
            "result__status",
            "result__node_set",
        )  # fmt: skip
        .order_by("at", "result__run_id", "gpu", "id")
    )
    trends: dict[str, Trend] = {}
    item_keys: dict[str, set[str]] = {}
    for name, value, gpu, labels, ok, threshold, at, result_id, run_id, kind, item_key, scope, status, ns in rows:
        labels = labels or {}
        metric = metric_for(kind=kind, name=name, labels=labels)
        if metric is None or value is None:
            continue
        if scope == Scope.GROUP:
            host = labels.get("host")
            if host is not None and host != node.hostname:
                continue
            if host is None and not metric.group_value_on_node:
                continue
            line = f"{item_key} (group {ns})" if host is None else item_key
        else:
            line = item_key
            if gpu is not None:
                item_keys.setdefault(metric.key, set()).add(item_key)
                line = f"{item_key} · GPU {gpu}"
        trend = trends.setdefault(metric.key, Trend(metric=metric))
        point = TrendPoint(run_id, result_id, at, value * metric.scale, ok, status, threshold)
        trend.lines.setdefault(line, []).append(point)
        if threshold and (scope == Scope.NODE or not trend.node_threshold):
            # The latest run's threshold (rows come oldest first); the node's own check wins over a
            # multi-node one drawn on the same chart (its floor is a different number).
            trend.threshold = threshold
            trend.node_threshold = trend.node_threshold or scope == Scope.NODE
    for key, trend in trends.items():
        if len(item_keys.get(key, ())) == 1:  # one check: "GPU 3" says it all
            trend.lines = {k.split(" · ", 1)[-1]: v for k, v in trend.lines.items()}
        trend.lines = dict(sorted(trend.lines.items(), key=lambda kv: natural_key(kv[0])))
    return [trends[m.key] for m in KEY_METRICS if m.key in trends]


_THRESHOLD = re.compile(r"^\s*(>=|<=|>|<)\s*(-?[\d.]+)\s*([^\s(,]*)")


def threshold_value(*, threshold: str, metric: Metric) -> float | None:
    """The first bound of a stored threshold (">= 460", ">= 2 GB/s"), in the metric's display unit.
    None when it is not a plain bound or its unit is not the one shown."""
    match = _THRESHOLD.match(threshold.split(",")[0])
    if not match:
        return None
    try:
        value = float(match.group(2))
    except ValueError:
        return None
    unit = match.group(3)
    if unit and unit != metric.unit:
        return None
    return value if unit else value * metric.scale


# --- cluster runs -----------------------------------------------------------------------------

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


# --- compare ----------------------------------------------------------------------------------


def run_previous(*, run: Run) -> Run | None:
    """The run of the same cluster started just before `run`."""
    return (
        Run.objects.filter(cluster_id=run.cluster_id)
        .filter(Q(created_at__lt=run.created_at) | Q(created_at=run.created_at, id__lt=run.pk))
        .order_by("-created_at", "-id")
        .first()
    )


def runs_recent(*, cluster: Cluster | None = None, limit: int = 50) -> list[Run]:
    runs = Run.objects.select_related("cluster").order_by("-created_at", "-id")
    if cluster is not None:
        runs = runs.filter(cluster=cluster)
    return list(runs.only("id", "created_at", "status", "node_set", "plan_snapshot", "cluster__name")[:limit])


@dataclass
class _RunFacts:
    """What one run says about each node: statuses by (subject, check) and key values."""

    statuses: dict[tuple[str, str], tuple[str, str, int]] = field(default_factory=dict)
    # (subject, metric key, check) -> [(value, gpu, result id)]
    values: dict[tuple[str, str, str], list[tuple[float, int | None, int]]] = field(default_factory=dict)


def _run_facts(run: Run) -> _RunFacts:
    """Two queries: the run's results, and its key measurements."""
    facts = _RunFacts()
    cache: dict[str, frozenset[str]] = {}
    results = CheckResult.objects.filter(run=run).values_list(
        "id", "node__hostname", "item_key", "kind", "scope", "node_set", "attribution", "status", "reason"
    )
    info: dict[int, tuple[str, str, str, str]] = {}
    for pk, hostname, item_key, kind, scope, node_set, attribution, status, reason in results:
        info[pk] = (hostname, item_key, kind, scope if scope != Scope.GROUP else node_set or hostname)
        if scope == Scope.GROUP:
            attribution = attribution or {}
            for member in _members(node_set, cache) | set(attribution):
                mine = attribution.get(member) or {}
                facts.statuses[(member, item_key)] = (mine.get("status", status), mine.get("reason", reason), pk)
        else:
            facts.statuses[(hostname, item_key)] = (status, reason, pk)
    measurements = Measurement.objects.filter(
        result__run=run, result__kind__in=_KEY_KINDS, name__in=_KEY_NAMES, value__isnull=False
    ).values_list("result_id", "name", "value", "gpu", "labels")
    for result_id, name, value, gpu, labels in measurements:
        hostname, item_key, kind, scope = info[result_id]
        labels = labels or {}
        metric = metric_for(kind=kind, name=name, labels=labels)
        if metric is None or value is None:  # never None (filtered above); the row type cannot say so
            continue
        if scope == Scope.NODE:
            subject = hostname
        else:  # group: per-host values go to that host, the group's own value to the node set
            subject = labels.get("host") or scope
        facts.values.setdefault((subject, metric.key, item_key), []).append((value * metric.scale, gpu, result_id))
    return facts


def _fold(metric: Metric, values: list[tuple[float, int | None, int]]) -> tuple[float, int | None, int]:
    """Per-GPU values to the node's number: the worst GPU (named), or the sum of counts."""
    result_id = values[0][2]
    if metric.gpu_agg == "sum":
        return sum(v for v, _, _ in values), None, result_id
    pick = min if (metric.gpu_agg == "min") else max
    value, gpu, result_id = pick(values, key=lambda v: v[0])
    return value, gpu, result_id


@dataclass
class MetricDelta:
    subject: str
    metric: Metric
    check: str
    a: float | None
    b: float | None
    a_gpu: int | None = None
    b_gpu: int | None = None
    a_result: int | None = None
    b_result: int | None = None

    @property
    def delta(self) -> float | None:
        return None if self.a is None or self.b is None else self.a - self.b

    @property
    def delta_pct(self) -> float | None:
        if self.delta is None or not self.b:
            return None
        return 100.0 * self.delta / abs(self.b)

    @property
    def direction(self) -> str:
        """worse / better / same, in the metric's own sense of good; 'new'/'gone' when one side lacks it."""
        if self.a is None:
            return "gone"
        if self.b is None:
            return "new"
        delta = self.delta or 0.0
        noise = abs(self.b) * self.metric.tolerance_pct / 100.0
        if abs(delta) <= noise or delta == 0:
            return "same"
        up_is_good = self.metric.better == "higher"
        return "better" if (delta > 0) == up_is_good else "worse"


@dataclass
class StatusChange:
    subject: str
    check: str
    a: str
    b: str
    a_reason: str
    a_result: int | None
    b_result: int | None

    @property
    def direction(self) -> str:
        ra, rb = _STATUS_RANK.get(self.a), _STATUS_RANK.get(self.b)
        if ra is None or rb is None or ra == rb:
            return "changed"
        return "worse" if ra > rb else "better"


@dataclass
class NodeComparison:
    subject: str
    deltas: list[MetricDelta]
    changes: list[StatusChange]

    @property
    def is_group(self) -> bool:
        """A node set (a group result's own value), not one hostname."""
        return any(c in self.subject for c in "[,")

    @property
    def worse(self) -> bool:
        return any(d.direction == "worse" for d in self.deltas) or any(c.direction == "worse" for c in self.changes)


@dataclass
class Comparison:
    a: Run
    b: Run
    nodes: list[NodeComparison]
    unchanged_statuses: int

    counts: dict[str, int] = field(default_factory=dict)


def _count(nodes: list[NodeComparison]) -> dict[str, int]:
    out = {"metrics_worse": 0, "metrics_better": 0, "status_worse": 0, "status_better": 0}
    for n in nodes:
        out["metrics_worse"] += sum(d.direction == "worse" for d in n.deltas)
        out["metrics_better"] += sum(d.direction == "better" for d in n.deltas)
        out["status_worse"] += sum(c.direction == "worse" for c in n.changes)
        out["status_better"] += sum(c.direction == "better" for c in n.changes)
    return out


def runs_compare(*, a: Run, b: Run, only_worse: bool = False) -> Comparison:
    """Per node and per key metric, what changed from run `b` (the baseline) to run `a`: two queries per
    run whatever the node count. Status changes are listed; unchanged statuses are only counted."""
    fa, fb = _run_facts(a), _run_facts(b)
    subjects: dict[str, NodeComparison] = {}
    unchanged = 0
    for key in sorted(set(fa.statuses) | set(fb.statuses)):
        sa, sb = fa.statuses.get(key), fb.statuses.get(key)
        if sa and sb and sa[0] == sb[0]:
            unchanged += 1
            continue
        change = StatusChange(
            subject=key[0], check=key[1], a=sa[0] if sa else "—", b=sb[0] if sb else "—",
            a_reason=sa[1] if sa else "", a_result=sa[2] if sa else None, b_result=sb[2] if sb else None,
        )  # fmt: skip
        subjects.setdefault(key[0], NodeComparison(key[0], [], [])).changes.append(change)
    for value_key in set(fa.values) | set(fb.values):
        subject, metric_key, check = value_key
        metric = METRICS_BY_KEY[metric_key]
        va = _fold(metric, fa.values[value_key]) if value_key in fa.values else None
        vb = _fold(metric, fb.values[value_key]) if value_key in fb.values else None
        delta = MetricDelta(
            subject=subject, metric=metric, check=check,
            a=va[0] if va else None, b=vb[0] if vb else None, a_gpu=va[1] if va else None,
            b_gpu=vb[1] if vb else None, a_result=va[2] if va else None, b_result=vb[2] if vb else None,
        )  # fmt: skip
        subjects.setdefault(subject, NodeComparison(subject, [], [])).deltas.append(delta)
    order = {m.key: i for i, m in enumerate(KEY_METRICS)}
    counts = _count(list(subjects.values()))  # before the "only worse" filter: the summary stays whole
    nodes = []
    for subject in sorted(subjects, key=natural_key):
        node = subjects[subject]
        node.deltas.sort(key=lambda d: (order[d.metric.key], d.check))
        if only_worse:
            node.deltas = [d for d in node.deltas if d.direction == "worse"]
            node.changes = [c for c in node.changes if c.direction == "worse"]
            if not node.deltas and not node.changes:
                continue
        nodes.append(node)
    return Comparison(a=a, b=b, nodes=nodes, unchanged_statuses=unchanged, counts=counts)


def check_names() -> list[str]:
    """Check keys and kinds, for the search form's suggestions."""
    from portal.catalog.models import CheckDefinition

    pairs = CheckDefinition.objects.values_list("slug", "kind")
    return sorted({name for pair in pairs for name in pair})


# --- search -----------------------------------------------------------------------------------


@dataclass
class ResultFilter:
    """Validated search filters (see views.ResultSearchForm); empty fields do not filter."""

    cluster: Cluster | None = None
    nodes: NodeSet | None = None
    check: str = ""
    status: str = ""
    since: dt.datetime | None = None
    until: dt.datetime | None = None
    run: Run | None = None


def results_search(*, filters: ResultFilter) -> QuerySet[CheckResult]:
    """Results matching the filters, newest first. `at` is when the result finished (its start, or its
    run's creation, while it has not). A node set also finds the group results spanning those nodes."""
    qs = CheckResult.objects.annotate(at=Coalesce("finished_at", "started_at", "run__created_at"))
    if filters.run is not None:
        qs = qs.filter(run=filters.run)
    if filters.cluster is not None:
        qs = qs.filter(run__cluster=filters.cluster)
    if filters.check:
        qs = qs.filter(Q(item_key=filters.check) | Q(kind=filters.check))
    if filters.status:
        qs = qs.filter(status=filters.status)
    if filters.since:
        qs = qs.filter(at__gte=filters.since)
    if filters.until:
        qs = qs.filter(at__lt=filters.until)
    if filters.nodes is not None:
        hostnames = list(filters.nodes)
        group_ids = group_result_ids(hostnames=hostnames, groups=qs)
        qs = qs.filter(Q(node__hostname__in=hostnames, scope=Scope.NODE) | Q(id__in=group_ids))
    return qs.select_related("run", "run__cluster", "node").order_by("-at", "-id")

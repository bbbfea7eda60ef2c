"""Run comparison: per node and per key metric, what changed from a baseline run to another."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from django.db.models import Q
from django.db.models.fields.json import KT

from portal.history.selectors.metrics import (
    _KEY_KINDS,
    _KEY_NAMES,
    KEY_METRICS,
    METRICS_BY_KEY,
    Metric,
    _members,
    metric_for,
)
from portal.inventory.models import Cluster, Node
from portal.ordering import natural_key
from portal.runs.models import ACTIVE_STATUSES, CheckResult, Measurement, Run, RunKeyValue, Scope, Status

_KEY_KIND_SET = frozenset(_KEY_KINDS)
_STATUS_RANK: dict[str, int] = {Status.PASS: 0, Status.WARN: 1, Status.FAIL: 2, Status.ERROR: 2}


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
    # The plan's name read out of the snapshot in SQL: not every recent run's whole snapshot decoded.
    runs = runs.annotate(plan_name=KT("plan_snapshot__name"))
    return list(runs.only("id", "created_at", "status", "cluster__name")[:limit])


Folded = tuple[float, int | None, int]  # (the subject's value, the GPU it came from, result id)
ValueKey = tuple[str, str, str]  # (subject, metric key, check)


@dataclass
class _RunFacts:
    """What one run says about each node: statuses by (subject, check) and key values, folded."""

    statuses: dict[tuple[str, str], tuple[str, str, int]] = field(default_factory=dict)
    values: dict[ValueKey, Folded] = field(default_factory=dict)


def run_results(run: Run) -> tuple[dict[tuple[str, str], tuple[str, str, int]], dict[int, tuple[str, str, str, str]]]:
    """Three queries: statuses by (subject, check), and (hostname, check, kind, scope or node set)
    by result id for the results of key kinds. Node results are read without their attribution,
    hostnames come from the cluster's nodes: 10k rows per run at 1,250 nodes, every column counts."""
    statuses: dict[tuple[str, str], tuple[str, str, int]] = {}
    info: dict[int, tuple[str, str, str, str]] = {}
    hostnames = dict(Node.objects.filter(cluster_id=run.cluster_id).values_list("id", "hostname"))
    mine = CheckResult.objects.filter(run=run).order_by()
    for pk, node_id, item_key, kind, status, reason in mine.exclude(scope=Scope.GROUP).values_list(
        "id", "node_id", "item_key", "kind", "status", "reason"
    ):
        hostname = hostnames.get(node_id, "")
        if kind in _KEY_KIND_SET:  # only results that can hold key values need finding by id
            info[pk] = (hostname, item_key, kind, Scope.NODE)
        statuses[(hostname, item_key)] = (status, reason, pk)
    cache: dict[str, frozenset[str]] = {}
    groups = mine.filter(scope=Scope.GROUP).values_list(
        "id", "node_id", "item_key", "kind", "node_set", "attribution", "status", "reason"
    )
    for pk, node_id, item_key, kind, node_set, attribution, status, reason in groups:
        hostname = hostnames.get(node_id, "")
        info[pk] = (hostname, item_key, kind, node_set or hostname)
        attribution = attribution or {}
        for member in _members(node_set, cache) | set(attribution):
            named = attribution.get(member) or {}
            statuses[(member, item_key)] = (named.get("status", status), named.get("reason", reason), pk)
    return statuses, info


def key_values_measured(run: Run, info: dict[int, tuple[str, str, str, str]]) -> dict[ValueKey, Folded]:
    """The run's key values folded per subject, from its measurements (one query, by result id: no
    join, which would let the planner scan the run's every result)."""
    values: dict[ValueKey, list[Folded]] = {}
    ids = [pk for pk, (_, _, kind, _) in info.items() if kind in _KEY_KIND_SET]  # group results: any kind
    measurements = (
        Measurement.objects.filter(result_id__in=ids, name__in=_KEY_NAMES, value__isnull=False)
        .order_by()
        .values_list("result_id", "name", "value", "gpu", "labels")
    )
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
        values.setdefault((subject, metric.key, item_key), []).append((value * metric.scale, gpu, result_id))
    return {key: _fold(METRICS_BY_KEY[key[1]], found) for key, found in values.items()}


def _key_values_stored(run: Run) -> dict[ValueKey, Folded] | None:
    """What was folded when the run closed (RunKeyValue); None for a run still going, or one closed
    before (or whose folding failed): read from its measurements then."""
    if run.status in ACTIVE_STATUSES:
        return None
    rows = RunKeyValue.objects.filter(run=run).values_list("subject", "metric", "item_key", "value", "gpu", "result_id")
    stored = {(subject, metric, item_key): (value, gpu, rid) for subject, metric, item_key, value, gpu, rid in rows}
    return stored or None


def _run_facts(run: Run) -> _RunFacts:
    """Two queries: the run's results, and its folded key values (stored, or from measurements)."""
    statuses, info = run_results(run)
    values = _key_values_stored(run)
    return _RunFacts(statuses=statuses, values=values if values is not None else key_values_measured(run, info))


def _fold(metric: Metric, values: list[Folded]) -> Folded:
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

    @cached_property  # read for the counts, the filter and the page: computed once per delta
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


def _status_changes(fa: _RunFacts, fb: _RunFacts, subjects: dict[str, NodeComparison]) -> int:
    """Add each changed status to its subject; return the number of unchanged ones."""
    changed = []
    for key in fa.statuses.keys() | fb.statuses.keys():
        sa, sb = fa.statuses.get(key), fb.statuses.get(key)
        if not (sa and sb and sa[0] == sb[0]):
            changed.append(key)
    for key in sorted(changed):  # sorting the few changed, not the 10k compared at 1,250 nodes
        sa, sb = fa.statuses.get(key), fb.statuses.get(key)
        change = StatusChange(
            subject=key[0], check=key[1], a=sa[0] if sa else "—", b=sb[0] if sb else "—",
            a_reason=sa[1] if sa else "", a_result=sa[2] if sa else None, b_result=sb[2] if sb else None,
        )  # fmt: skip
        subjects.setdefault(key[0], NodeComparison(key[0], [], [])).changes.append(change)
    return len(fa.statuses.keys() | fb.statuses.keys()) - len(changed)


def _metric_deltas(fa: _RunFacts, fb: _RunFacts, subjects: dict[str, NodeComparison]) -> None:
    """Add each key value found in either run, folded to the node's number, to its subject."""
    for key in set(fa.values) | set(fb.values):
        subject, metric_key, check = key
        metric = METRICS_BY_KEY.get(metric_key)
        if metric is None:  # stored for a key metric no check declares any more
            continue
        va, vb = fa.values.get(key), fb.values.get(key)
        delta = MetricDelta(
            subject=subject, metric=metric, check=check,
            a=va[0] if va else None, b=vb[0] if vb else None, a_gpu=va[1] if va else None,
            b_gpu=vb[1] if vb else None, a_result=va[2] if va else None, b_result=vb[2] if vb else None,
        )  # fmt: skip
        subjects.setdefault(subject, NodeComparison(subject, [], [])).deltas.append(delta)


def _ordered_nodes(subjects: dict[str, NodeComparison], only_worse: bool) -> list[NodeComparison]:
    """Subjects in natural order, deltas in the metrics' rank order; only the worse ones if asked."""
    order = {m.key: i for i, m in enumerate(KEY_METRICS)}
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
    return nodes


def runs_compare(*, a: Run, b: Run, only_worse: bool = False) -> Comparison:
    """Per node and per key metric, what changed from run `b` (the baseline) to run `a`: two queries per
    run whatever the node count. Status changes are listed; unchanged statuses are only counted."""
    fa, fb = _run_facts(a), _run_facts(b)
    subjects: dict[str, NodeComparison] = {}
    unchanged = _status_changes(fa, fb, subjects)
    _metric_deltas(fa, fb, subjects)
    counts = _count(list(subjects.values()))  # before the "only worse" filter: the summary stays whole
    nodes = _ordered_nodes(subjects, only_worse)
    return Comparison(a=a, b=b, nodes=nodes, unchanged_statuses=unchanged, counts=counts)

"""Run comparison: per node and per key metric, what changed from a baseline run to another."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import overload

from django.db.models import F, Q, Subquery
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
from portal.runs.lookups import AmongIds
from portal.runs.models import ACTIVE_STATUSES, CheckResult, Measurement, Run, RunKeyValue, Scope, Status

_KEY_KIND_SET = frozenset(_KEY_KINDS)
ROWS_PER_FETCH = 5000  # key measurements per round trip (about 140 a node in a demo acceptance run)
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
    return list(runs.only("id", "created_at", "status", "node_set", "cluster__name")[:limit])


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
    """The run's key values folded per subject, from its measurements: one query, streamed, through
    the (result, name) index a result at a time whatever the history (portal/runs/lookups.py)."""
    values: dict[ValueKey, list[Folded]] = {}
    # The results `info` holds of the key kinds (of any scope): the rows' results, read in SQL.
    results = CheckResult.objects.filter(run_id=run.pk, kind__in=_KEY_KINDS).order_by().values("id")
    measurements = (
        Measurement.objects.filter(
            AmongIds(F("result_id"), Subquery(results)), name__in=_KEY_NAMES, value__isnull=False
        )
        .order_by("result_id")
        .values_list("result_id", "name", "value", "gpu", "labels")
    )
    for result_id, name, value, gpu, labels in measurements.iterator(chunk_size=ROWS_PER_FETCH):
        if result_id not in info:
            continue  # a result recorded after `info` was read
        hostname, item_key, kind, scope = info[result_id]
        labels = labels or {}
        metric = metric_for(kind=kind, name=name, labels=labels)
        if metric is None or value is None or not math.isfinite(value):
            # NaN or inf is a broken tool's number, kept on its `error` result: not a value to
            # compare (min() over a NaN picks at random; inf makes every change "same").
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

    @cached_property  # read for the filter and the page: computed once per delta
    def direction(self) -> str:
        """worse / better / same, in the metric's own sense of good; 'new'/'gone' when one side lacks it."""
        return _direction(self.metric, self.a, self.b)


def _direction(metric: Metric, a: float | None, b: float | None) -> str:
    if a is None:
        return "gone"
    if b is None:
        return "new"
    delta = a - b
    noise = abs(b) * metric.tolerance_pct / 100.0
    if abs(delta) <= noise or delta == 0:
        return "same"
    up_is_good = metric.better == "higher"
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
    nodes: Sequence[NodeComparison]
    unchanged_statuses: int

    counts: dict[str, int] = field(default_factory=dict)


def _status_changes(fa: _RunFacts, fb: _RunFacts, changes: dict[str, list[StatusChange]]) -> int:
    """Add each changed status to its subject's; return the number of unchanged ones."""
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
        changes.setdefault(key[0], []).append(change)
    return len(fa.statuses.keys() | fb.statuses.keys()) - len(changed)


# (metric key, check, A's folded value, B's, direction): a delta before it is shown. At 1,250 nodes
# a comparison holds 10k of them; only a page's worth become MetricDelta objects.
RawDelta = tuple[str, str, Folded | None, Folded | None, str]


def _raw_deltas(fa: _RunFacts, fb: _RunFacts) -> dict[str, list[RawDelta]]:
    """Each key value found in either run, folded to the node's number, by subject."""
    per_subject: dict[str, list[RawDelta]] = {}
    for key in fa.values.keys() | fb.values.keys():
        subject, metric_key, check = key
        metric = METRICS_BY_KEY.get(metric_key)
        if metric is None:  # stored for a key metric no check declares any more
            continue
        va, vb = fa.values.get(key), fb.values.get(key)
        direction = _direction(metric, va[0] if va else None, vb[0] if vb else None)
        per_subject.setdefault(subject, []).append((metric_key, check, va, vb, direction))
    return per_subject


def _delta(subject: str, raw: RawDelta) -> MetricDelta:
    metric_key, check, va, vb, _ = raw
    return MetricDelta(
        subject=subject, metric=METRICS_BY_KEY[metric_key], check=check,
        a=va[0] if va else None, b=vb[0] if vb else None, a_gpu=va[1] if va else None,
        b_gpu=vb[1] if vb else None, a_result=va[2] if va else None, b_result=vb[2] if vb else None,
    )  # fmt: skip


_ORDER = {m.key: i for i, m in enumerate(KEY_METRICS)}


class ComparedNodes(Sequence[NodeComparison]):
    """The compared subjects in natural order, each built when read (a page at a time): deltas in
    the metrics' rank order, only the worse ones when asked."""

    def __init__(
        self, changes: dict[str, list[StatusChange]], deltas: dict[str, list[RawDelta]], only_worse: bool
    ) -> None:
        self.changes, self.deltas, self.only_worse = changes, deltas, only_worse
        subjects = changes.keys() | deltas.keys()
        if only_worse:
            subjects = {s for s in subjects if self._worse(s)}
        self.subjects = sorted(subjects, key=natural_key)

    def _worse(self, subject: str) -> bool:
        return any(raw[4] == "worse" for raw in self.deltas.get(subject, ())) or any(
            c.direction == "worse" for c in self.changes.get(subject, ())
        )

    def _node(self, subject: str) -> NodeComparison:
        raws = sorted(self.deltas.get(subject, ()), key=lambda raw: (_ORDER[raw[0]], raw[1]))
        changes = self.changes.get(subject, [])
        if self.only_worse:
            raws = [raw for raw in raws if raw[4] == "worse"]
            changes = [c for c in changes if c.direction == "worse"]
        return NodeComparison(subject, [_delta(subject, raw) for raw in raws], changes)

    def __len__(self) -> int:
        return len(self.subjects)

    @overload
    def __getitem__(self, index: int) -> NodeComparison: ...
    @overload
    def __getitem__(self, index: slice) -> list[NodeComparison]: ...
    def __getitem__(self, index: int | slice) -> NodeComparison | list[NodeComparison]:
        if isinstance(index, slice):
            return [self._node(subject) for subject in self.subjects[index]]
        return self._node(self.subjects[index])


def _count(changes: dict[str, list[StatusChange]], deltas: dict[str, list[RawDelta]]) -> dict[str, int]:
    directions = [raw[4] for raws in deltas.values() for raw in raws]
    statuses = [c.direction for found in changes.values() for c in found]
    return {
        "metrics_worse": directions.count("worse"),
        "metrics_better": directions.count("better"),
        "status_worse": statuses.count("worse"),
        "status_better": statuses.count("better"),
    }


def runs_compare(*, a: Run, b: Run, only_worse: bool = False) -> Comparison:
    """Per node and per key metric, what changed from run `b` (the baseline) to run `a`: two queries per
    run whatever the node count. Status changes are listed; unchanged statuses are only counted."""
    fa, fb = _run_facts(a), _run_facts(b)
    changes: dict[str, list[StatusChange]] = {}
    unchanged = _status_changes(fa, fb, changes)
    deltas = _raw_deltas(fa, fb)
    counts = _count(changes, deltas)  # before the "only worse" filter: the summary stays whole
    nodes = ComparedNodes(changes, deltas, only_worse)
    return Comparison(a=a, b=b, nodes=nodes, unchanged_statuses=unchanged, counts=counts)

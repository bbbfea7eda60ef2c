"""Run comparison: per node and per key metric, what changed from a baseline run to another."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import overload

from django.db import connection
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
from portal.runs.lookups import AmongIds, Unindexed
from portal.runs.models import ACTIVE_STATUSES, CheckResult, Measurement, Run, RunKeyValue, Scope, Status

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


StatusRow = tuple[str, str, int]  # (status, reason, result id)
StatusKey = tuple[str, str]  # (subject, check)


def _hostnames(run: Run) -> dict[int, str]:
    return dict(Node.objects.filter(cluster_id=run.cluster_id).values_list("id", "hostname"))


def key_result_info(run: Run) -> dict[int, tuple[str, str, str, str]]:
    """(hostname, check, kind, "node" or the node set) by result id, for the run's results of key
    kinds: what folding their measurements needs. One query."""
    hostnames = _hostnames(run)
    info: dict[int, tuple[str, str, str, str]] = {}
    rows = CheckResult.objects.filter(run=run, kind__in=_KEY_KINDS).order_by()
    for pk, node_id, item_key, kind, scope, node_set in rows.values_list(
        "id", "node_id", "item_key", "kind", "scope", "node_set"
    ):
        hostname = hostnames.get(node_id, "")
        info[pk] = (hostname, item_key, kind, Scope.NODE if scope != Scope.GROUP else (node_set or hostname))
    return info


def _group_statuses(run: Run) -> dict[StatusKey, StatusRow]:
    """Each member's status of each multi-node result of the run (its attributed one when named):
    a few rows, each spanning its node set."""
    statuses: dict[StatusKey, StatusRow] = {}
    cache: dict[str, frozenset[str]] = {}
    groups = CheckResult.objects.filter(run=run, scope=Scope.GROUP).order_by()
    for pk, item_key, node_set, attribution, status, reason in groups.values_list(
        "id", "item_key", "node_set", "attribution", "status", "reason"
    ):
        attribution = attribution or {}
        for member in _members(node_set, cache) | set(attribution):
            named = attribution.get(member) or {}
            statuses[(member, item_key)] = (named.get("status", status), named.get("reason", reason), pk)
    return statuses


# The node results of two runs paired by (node, check) in the database, in one statement: at 1,250
# nodes each run has 10k-16k of them and few differ, so only the differing pairs (either side
# missing included) come back, as one JSON array, and the equal ones are counted. Runs of two
# clusters pair their nodes by hostname.
_NODE_RESULTS = (
    "SELECT r.id, r.node_id, COALESCE(n.hostname, '') AS hostname, r.item_key, r.status{reason} "
    f"FROM {CheckResult._meta.db_table} r LEFT JOIN {Node._meta.db_table} n ON n.id = r.node_id "
    "WHERE r.run_id = %s AND r.scope <> 'group'"
)
_NODE_PAIRS = (
    "SELECT count(*) FILTER (WHERE a.status = b.status), "
    "COALESCE(json_agg(json_build_array(COALESCE(a.hostname, b.hostname), COALESCE(a.item_key, b.item_key), "
    "a.status, a.reason, a.id, b.status, b.id)) FILTER (WHERE a.status IS DISTINCT FROM b.status), '[]') "
    "FROM ({a}) a FULL JOIN ({b}) b ON a.{key} = b.{key} AND a.item_key = b.item_key"
)


def _node_pairs(a: Run, b: Run) -> tuple[dict[StatusKey, tuple[StatusRow | None, StatusRow | None]], int]:
    """The node results whose status differs from run `b` to run `a` (either side missing included),
    and how many are the same: one query."""
    key = "node_id" if a.cluster_id == b.cluster_id else "hostname"
    sql = _NODE_PAIRS.format(a=_NODE_RESULTS.format(reason=", r.reason"), b=_NODE_RESULTS.format(reason=""), key=key)
    with connection.cursor() as cursor:
        cursor.execute(sql, [a.pk, b.pk])
        same, rows = cursor.fetchone()
    if isinstance(rows, str):  # a driver that leaves json undecoded
        rows = json.loads(rows)
    pairs: dict[StatusKey, tuple[StatusRow | None, StatusRow | None]] = {}
    for host, item_key, sa, ra, ia, sb, ib in rows:
        pairs[(host, item_key)] = ((sa, ra, ia) if ia is not None else None, (sb, "", ib) if ib is not None else None)
    return pairs, same


def key_values_measured(run: Run, info: dict[int, tuple[str, str, str, str]]) -> dict[ValueKey, Folded]:
    """The run's key values folded per subject, from its measurements: one query, streamed, through
    the (result, name) index a result at a time whatever the history, the names tested on the rows
    each probe brings (portal/runs/lookups.py)."""
    values: dict[ValueKey, list[Folded]] = {}
    # The results `info` holds of the key kinds (of any scope): the rows' results, read in SQL.
    results = CheckResult.objects.filter(run_id=run.pk, kind__in=_KEY_KINDS).order_by().values("id")
    measurements = (
        Measurement.objects.annotate(name_tested=Unindexed("name"))
        .filter(AmongIds(F("result_id"), Subquery(results)), name_tested__in=_KEY_NAMES, value__isnull=False)
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


def _key_values(run: Run) -> dict[ValueKey, Folded]:
    """The run's folded key values: stored when it closed, else from its measurements."""
    values = _key_values_stored(run)
    return values if values is not None else key_values_measured(run, key_result_info(run))


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


def _status_changes(a: Run, b: Run, changes: dict[str, list[StatusChange]]) -> int:
    """Add each changed status to its subject's; return the number of unchanged ones. Node results
    are paired in the database; multi-node results' members here (a member's share of a group result
    in one run may meet its own node result in the other)."""
    pairs, unchanged = _node_pairs(a, b)
    ga, gb = _group_statuses(a), _group_statuses(b)
    changed = []
    for key in pairs.keys() | ga.keys() | gb.keys():
        na, nb = pairs.get(key, (None, None))
        sa, sb = ga.get(key) or na, gb.get(key) or nb
        if sa and sb and sa[0] == sb[0]:
            unchanged += 1
        else:
            changed.append((key, sa, sb))
    for (subject, check), sa, sb in sorted(changed, key=lambda c: c[0]):
        change = StatusChange(
            subject=subject, check=check, a=sa[0] if sa else "—", b=sb[0] if sb else "—",
            a_reason=sa[1] if sa else "", a_result=sa[2] if sa else None, b_result=sb[2] if sb else None,
        )  # fmt: skip
        changes.setdefault(subject, []).append(change)
    return unchanged


# (metric key, check, A's folded value, B's, direction): a delta before it is shown. At 1,250 nodes
# a comparison holds 10k of them; only a page's worth become MetricDelta objects.
RawDelta = tuple[str, str, Folded | None, Folded | None, str]


def _raw_deltas(pairs: Iterable[tuple[ValueKey, Folded | None, Folded | None]]) -> dict[str, list[RawDelta]]:
    """Each key value found in either run, folded to the node's number, by subject."""
    per_subject: dict[str, list[RawDelta]] = {}
    for key, va, vb in pairs:
        subject, metric_key, check = key
        metric = METRICS_BY_KEY.get(metric_key)
        if metric is None:  # stored for a key metric no check declares any more
            continue
        direction = _direction(metric, va[0] if va else None, vb[0] if vb else None)
        per_subject.setdefault(subject, []).append((metric_key, check, va, vb, direction))
    return per_subject


# Two finished runs' stored key values paired in the database: one row per (subject, metric, check)
# instead of both runs' rows matched here (19k a run at 1,250 nodes).
_STORED = f"SELECT subject, metric, item_key, value, gpu, result_id FROM {RunKeyValue._meta.db_table} WHERE run_id = %s"
_STORED_PAIRS = (
    f"SELECT COALESCE(a.subject, b.subject), COALESCE(a.metric, b.metric), COALESCE(a.item_key, b.item_key), "
    f"a.value, a.gpu, a.result_id, b.value, b.gpu, b.result_id FROM ({_STORED}) a FULL JOIN ({_STORED}) b "
    "ON a.subject = b.subject AND a.metric = b.metric AND a.item_key = b.item_key"
)


def _paired_values(a: Run, b: Run) -> Iterator[tuple[ValueKey, Folded | None, Folded | None]]:
    """Each key value of either run with the other's: stored ones paired in one streamed query when
    both runs stored theirs, else each run's folded (stored, or from its measurements) and matched."""
    if all(r.status not in ACTIVE_STATUSES and RunKeyValue.objects.filter(run=r).exists() for r in (a, b)):
        with connection.chunked_cursor() as cursor:
            cursor.execute(_STORED_PAIRS, [a.pk, b.pk])
            for subject, metric, item_key, value_a, gpu_a, result_a, value_b, gpu_b, result_b in cursor:
                yield (
                    (subject, metric, item_key),
                    (value_a, gpu_a, result_a) if result_a is not None else None,
                    (value_b, gpu_b, result_b) if result_b is not None else None,
                )
        return
    values_a, values_b = _key_values(a), _key_values(b)
    for key in values_a.keys() | values_b.keys():
        yield key, values_a.get(key), values_b.get(key)


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
    changes: dict[str, list[StatusChange]] = {}
    unchanged = _status_changes(a, b, changes)
    deltas = _raw_deltas(_paired_values(a, b))
    counts = _count(changes, deltas)  # before the "only worse" filter: the summary stays whole
    nodes = ComparedNodes(changes, deltas, only_worse)
    return Comparison(a=a, b=b, nodes=nodes, unchanged_statuses=unchanged, counts=counts)

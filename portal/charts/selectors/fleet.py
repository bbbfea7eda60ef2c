"""Fleet distribution of one metric over a run's nodes (or GPUs), with robust outliers."""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.db.models import Case, CharField, Count, F, Max, Sum, When, Window
from django.db.models.fields.json import KT
from django.db.models.functions import RowNumber

from checks import presentation_of
from checks.core.presentation import FleetMetric
from portal.charts.selectors.common import (
    MIN_DEVIATION,
    OUTLIER_Z,
    item_kind,
    robust_z,
)
from portal.formatting import unit_shown
from portal.ordering import natural_key as natural
from portal.runs.models import Measurement, Run, RunMetric, Scope


def metric_direction(*, kind: str, metric: str) -> FleetMetric:
    """Whether higher is better for `metric` and how a node's GPUs fold into one value: the kind's
    declaration (checks/core/presentation.py Presentation.direction). Every metric offered is declared
    (tests/checks); one asked for by hand that is not reads higher-is-better, the lowest GPU."""
    return presentation_of(kind).direction(metric) or FleetMetric(metric)


def threshold_value(text: str) -> float | None:
    """The number of a simple threshold string ('>= 460', '<= 0'); None for anything else."""
    match = re.fullmatch(r"\s*(?:>=|<=|>|<|==)\s*(-?[\d.]+(?:e[+-]?\d+)?)\s*", text or "")
    return float(match.group(1)) if match else None


@dataclass
class MetricChoice:
    item_key: str
    name: str
    phase: str
    unit: str
    check: str = ""  # the plan item's name: the picker groups its metrics under it

    @property
    def pick(self) -> str:
        return f"{self.item_key}|{self.name}|{self.phase}"

    @property
    def metric_key(self) -> str:
        """How the rack heatmap names it: "check:metric@phase"."""
        return f"{self.item_key}:{self.name}" + (f"@{self.phase}" if self.phase else "")

    @property
    def label(self) -> str:
        return f"{self.item_key}: {self.short_label}"

    @property
    def short_label(self) -> str:
        """The metric under its check's heading in a picker: "busbw_peak (load) [GB/s]"."""
        phase = f" ({self.phase})" if self.phase else ""
        unit = f" [{unit_shown(self.unit)}]" if self.unit else ""
        return f"{self.name}{phase}{unit}"

    @property
    def group(self) -> str:
        return f"{self.check} · {self.item_key}" if self.check and self.check != self.item_key else self.item_key


def run_metric_choices(*, run: Run) -> list[MetricChoice]:
    """The (check, metric, phase) triples with numbers in this run that their check declares worth
    comparing across nodes (checks/core/presentation.py Presentation.fleet_metrics: judged, followed
    metrics, never exit codes or presence flags), in plan order. Read from the run's list written
    with its measurements (RunMetric); a run recorded before that list existed, one DISTINCT."""
    items = {item.get("key"): item for item in run.plan_snapshot.get("items", [])}
    offered = {key: presentation_of(str(item.get("kind", ""))).fleet_metrics() for key, item in items.items()}
    rows: Iterable[tuple[str, str, Any, str]] = list(
        RunMetric.objects.filter(run=run).values_list("item_key", "name", "phase", "unit")
    ) or (
        Measurement.objects.filter(result__run=run, value__isnull=False)
        .values_list("result__item_key", "name", "labels__phase", "unit")
        .distinct()
    )
    seen: dict[tuple[str, str, str], MetricChoice] = {}
    for item_key, name, phase, unit in rows:
        phase = phase if isinstance(phase, str) else ""
        key = (item_key, name, phase)
        if key not in seen and name in offered.get(item_key, ()):
            check = str(items[item_key].get("name") or item_key)
            seen[key] = MetricChoice(item_key, name, phase, unit or "", check)
    order = {key: i for i, key in enumerate(items)}
    return sorted(seen.values(), key=lambda c: (order.get(c.item_key, 99), c.name, c.phase))


@dataclass
class Point:
    node: str
    value: float
    gpu: int | None = None
    z: float | None = None

    median: float | None = None

    @property
    def outlier(self) -> bool:
        """|robust z| > 3.5 and at least 5 % off the median (portal/runs/outliers.py's guard: a
        very tight fleet has a tiny MAD, and a 1 % wobble is nobody's straggler)."""
        if self.z is None or abs(self.z) <= OUTLIER_Z:
            return False
        return self.median is None or abs(self.value - self.median) >= MIN_DEVIATION * abs(self.median)


@dataclass
class Distribution:
    title: str
    item_key: str
    metric: str
    phase: str
    unit: str
    per: str  # "node" or "gpu"
    aggregate: str  # how GPUs were reduced per node ("" when per GPU or node-level)
    points: list[Point]
    better: str = "higher"  # the kind's declared direction: "higher" or "lower"
    threshold: str = ""
    z_limit: float = OUTLIER_Z

    @property
    def outliers(self) -> list[Point]:
        return [p for p in self.points if p.outlier]


def _metric_rows(*, run: Run, item_key: str, metric: str, phase: str = "") -> Any:  # annotated: untyped
    """One metric's numbers in a run, each with the node it counts for (`node`): its result's node, or
    for a group result the node its measurement names (labels['node']; none: not counted). fio's
    per-job rows are left out (the *_sum rows carry the node's figure). Filtered in SQL: nothing
    per measurement is decoded here."""
    qs = Measurement.objects.filter(result__run=run, result__item_key=item_key, name=metric, value__isnull=False)
    if phase:
        qs = qs.filter(labels__phase=phase)
    node = Case(
        When(result__scope=Scope.GROUP, then=KT("labels__node")),
        default=F("result__node__hostname"),
        output_field=CharField(),
    )
    return qs.exclude(labels__has_key="job").annotate(node=node).exclude(node__isnull=True).exclude(node="").order_by()


def run_metric_values(*, run: Run, item_key: str, metric: str, phase: str = "") -> list[dict[str, Any]]:
    """Every (node, gpu, value, unit, threshold) row of one metric in a run: one query. Group
    results count only where a measurement names its node (labels['node'])."""
    rows = _metric_rows(run=run, item_key=item_key, metric=metric, phase=phase)
    return [
        {"node": node, "gpu": gpu, "value": value, "unit": unit, "threshold": threshold}
        for node, gpu, value, unit, threshold in rows.values_list("node", "gpu", "value", "unit", "threshold")
    ]


@dataclass
class _Shape:
    """What every row of a metric shares, read before its points: whether it is per GPU, its unit
    and the one threshold all were judged against ("" when they differ)."""

    per_gpu: bool
    unit: str
    threshold: str


def _shape(rows: Any) -> _Shape:
    """One aggregate query over the metric's rows."""
    found = rows.aggregate(
        gpus=Count("gpu"), thresholds=Count("threshold", distinct=True), threshold=Max("threshold"), unit=Max("unit")
    )
    shared = (found["threshold"] or "") if found["thresholds"] == 1 else ""
    return _Shape(per_gpu=bool(found["gpus"]), unit=found["unit"] or "", threshold=shared)


def _folded(rows: Any, how: str) -> list[tuple[str, float, int | None]]:
    """(node, value, gpu) once per node, folded in SQL: the worst GPU by `how` ("min", "max") with
    its index, the sum of counts ("sum", no GPU), else the node's one value."""
    if how == "sum":
        return [
            (node, total, None)
            for node, total in rows.values("node").annotate(total=Sum("value")).values_list("node", "total")
        ]
    order = F("value").desc() if how == "max" else F("value").asc()
    ranked = rows.annotate(
        rank=Window(RowNumber(), partition_by=[F("node")], order_by=[order, F("gpu").asc(), F("id").asc()])
    )
    return list(ranked.filter(rank=1).values_list("node", "value", "gpu"))


def _points(rows: Any, *, by_gpu: bool, how: str) -> list[Point]:
    """One point per GPU, or per node (folded in SQL: `_folded`), in natural node order, each with
    its robust z against the fleet median."""
    if by_gpu:
        points = [Point(node, value, gpu) for node, value, gpu in rows.values_list("node", "value", "gpu")]
    else:
        points = [Point(node, value, gpu) for node, value, gpu in _folded(rows, how)]
    points.sort(key=lambda p: (natural(p.node), p.gpu if p.gpu is not None else -1))
    median = statistics.median([p.value for p in points]) if points else None
    for point, z in zip(points, robust_z([p.value for p in points]), strict=True):
        point.z, point.median = z, median
    return points


def run_distribution(*, run: Run, item_key: str, metric: str, phase: str = "", per: str = "node") -> Distribution:
    """One metric of a run over its nodes (or GPUs): two queries, its shape then its points, the
    nodes' GPUs folded in SQL (a node's number is its worst GPU's)."""
    rows = _metric_rows(run=run, item_key=item_key, metric=metric, phase=phase)
    shape = _shape(rows)
    by_gpu = shape.per_gpu and per == "gpu"
    declared = metric_direction(kind=item_kind(run, item_key), metric=metric)
    how = declared.gpu_agg if shape.per_gpu and not by_gpu else ""
    phase_text = f" ({phase})" if phase else ""
    per_text = " per GPU" if by_gpu else (f", {how} over GPUs per node" if how else " per node")
    return Distribution(
        title=f"{item_key}: {metric}{phase_text}{per_text}, run #{run.pk}",
        item_key=item_key,
        metric=metric,
        phase=phase,
        unit=shape.unit,
        per="gpu" if by_gpu else "node",
        aggregate=how,
        points=_points(rows, by_gpu=by_gpu, how=how),
        better=declared.better,
        threshold=shape.threshold,
    )

"""Burn-in telemetry per GPU (downsampled), the node's BMC power, throttle spans and the slowdown
temperature."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from checks import presentation_of
from checks.core.presentation import TelemetryChart
from portal.charts.selectors.common import (
    MAX_POINTS,
    is_float,
)
from portal.runs.lttb import downsample
from portal.runs.models import CheckResult, Measurement, Series


@dataclass
class Trace:
    gpu: int | None
    x: list[Any]
    y: list[Any]
    points: int  # stored points before downsampling


@dataclass
class ThrottleSpan:
    gpu: int | None
    reason: str
    start: float
    end: float


@dataclass
class BurnInData:
    title: str
    panels: list[tuple[str, str, str, list[Trace]]]  # (series name, label, unit, traces)
    throttles: list[ThrottleSpan]
    slowdown_c: float | None
    max_points: int
    stored_points: int = 0
    drawn_points: int = 0
    node: str = ""  # named in every hover
    spans_panel: str = ""  # the panel (series name) the throttle markers sit on


def _declared(result: CheckResult) -> TelemetryChart:
    return presentation_of(result.kind).telemetry or TelemetryChart(panels=())


def burn_in_result(*, result: CheckResult, max_points: int = MAX_POINTS) -> BurnInData:
    """The panels the kind declares (checks/core/presentation.py TelemetryChart: temperature, power, SM
    clock per GPU, the node's power when it was sampled), each trace LTTB-downsampled to
    `max_points`, with the declared throttle spans and slowdown line."""
    declared = _declared(result)
    by_name: dict[str, list[Trace]] = {p.series: [] for p in declared.panels}
    stored = drawn = 0
    rows = Series.objects.filter(result=result, name__in=list(by_name)).order_by("gpu", "id")
    for s in rows.only("name", "gpu", "count", "x_packed", "y_packed", "view_packed"):
        # The stored view (VIEW_POINTS, LTTB) when there is one; older series from every point.
        x, y = downsample(*s.view(), max_points)
        stored += s.count
        drawn += len(x)
        by_name[s.name].append(Trace(gpu=s.gpu, x=x, y=y, points=s.count))
    spans = Measurement.objects.filter(result=result, name=declared.spans).only("gpu", "text", "labels")
    throttles = [
        ThrottleSpan(gpu=m.gpu, reason=m.text, start=float(m.labels["start_t"]), end=float(m.labels["end_t"]))
        for m in spans
        if is_float((m.labels or {}).get("start_t")) and is_float((m.labels or {}).get("end_t"))
    ]
    panels = [
        (p.series, p.label, p.unit, by_name[p.series]) for p in declared.panels if by_name[p.series] or not p.optional
    ]
    return BurnInData(
        title=f"{result.item_key} on {result.node.hostname}: telemetry per GPU",
        panels=panels,
        throttles=throttles,
        slowdown_c=slowdown_threshold(result=result),
        max_points=max_points,
        stored_points=stored,
        drawn_points=drawn,
        node=result.node.hostname,
        spans_panel=declared.spans_panel,
    )


def slowdown_threshold(*, result: CheckResult) -> float | None:
    """The NVML slowdown temperature of the result's node: burn-in does not store it, so it comes
    from the measurements the kind names (`TelemetryChart.limit`: the same run's DLC or inventory
    result on that node, one query), else from the probe
    document in the result's own stdout when it was kept whole. The lowest GPU's value."""
    values = [
        v
        for v in Measurement.objects.filter(
            result__run_id=result.run_id,
            result__node_id=result.node_id,
            name__in=_declared(result).limit,
            value__isnull=False,
        ).values_list("value", flat=True)
        if v is not None  # excluded by the query; narrows the type
    ]
    if values:
        return min(values)
    try:
        doc = json.loads(result.stdout) if result.stdout and not result.output_truncated else None
    except ValueError:
        return None
    gpus = ((doc or {}).get("before") or {}).get("gpus") if isinstance(doc, dict) else None
    found = [
        g["temperature"]["slowdown"]
        for g in gpus or []
        if isinstance(g, dict)
        and isinstance(g.get("temperature"), dict)
        and isinstance(g["temperature"].get("slowdown"), (int, float))
    ]
    return float(min(found)) if found else None

"""NCCL busbw curves by message size: one result, or every node of one item of a run. Each curve
carries the floor its own result was judged against, and the smallest size that judgement covers
(the kind's declaration, checks/core/presentation.py SeriesThreshold): never the plan's number redrawn
over sizes the check did not judge."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from checks import presentation_of
from portal.charts.selectors.common import item_kind
from portal.charts.selectors.fleet import threshold_value
from portal.formatting import as_number
from portal.runs.models import CheckResult, Measurement, Run, Scope, Series


@dataclass
class Curve:
    name: str
    x: list[float]
    y: list[float | None]
    url: str = ""
    # The bound its result was judged against (None: not judged) and the smallest x it covers.
    threshold: float | None = None
    threshold_from: float | None = None


@dataclass
class NcclData:
    title: str
    curves: list[Curve]


def _curve_name(result: CheckResult, series: Series) -> str:
    labels = series.labels or {}
    if labels.get("pair"):
        return f"pair {labels['pair']}"
    if result.scope == Scope.GROUP:
        return result.node_set or result.node.hostname
    return result.node.hostname


def _judged(kind: str, result_ids: Iterable[int]) -> dict[int, tuple[float | None, float | None]]:
    """Each result's (bound, smallest x judged) from the measurement its kind names: one query."""
    declared = presentation_of(kind).series_threshold
    if declared is None:
        return {}
    rows = Measurement.objects.filter(result_id__in=list(result_ids), name=declared.measurement).values_list(
        "result_id", "threshold", "labels"
    )
    out: dict[int, tuple[float | None, float | None]] = {}
    for result_id, threshold, labels in rows:
        bound = threshold_value(threshold or "")
        start = as_number((labels or {}).get(declared.x_from)) if declared.x_from else None
        if bound is not None or result_id not in out:
            out[result_id] = (bound, start)
    return out


def nccl_result(*, result: CheckResult) -> NcclData:
    """The declared series (busbw by message size) of one result: one curve per stored series (per pair when the
    series are labelled with one), against the floor the result was judged on."""
    series = Series.objects.filter(result=result, name=presentation_of(result.kind).curves).order_by("id")
    bound, start = _judged(result.kind, [result.pk]).get(result.pk, (None, None))
    curves = [Curve(_curve_name(result, s), list(s.x), list(s.y), "", bound, start) for s in series]
    where = result.node_set if result.scope == Scope.GROUP else result.node.hostname
    return NcclData(title=f"{result.item_key}: busbw on {where}", curves=curves)


def nccl_run(*, run: Run, item_key: str) -> NcclData:
    """Every node's (or group's) curve of the declared series of one item of a run: two queries."""
    from django.urls import reverse

    kind = item_kind(run, item_key)
    rows = list(
        Series.objects.filter(result__run=run, result__item_key=item_key, name=presentation_of(kind).curves)
        .select_related("result__node")
        .only(
            "x_packed",
            "y_packed",
            "labels",
            "result__id",
            "result__scope",
            "result__node_set",
            "result__node__hostname",
        )
        .order_by("result__node__hostname", "id")
    )
    judged = _judged(kind, {s.result_id for s in rows}) if rows else {}
    curves = [
        Curve(
            _curve_name(s.result, s),
            list(s.x),
            list(s.y),
            reverse("runs:result_detail", args=[s.result_id]),
            *judged.get(s.result_id, (None, None)),
        )
        for s in rows
    ]
    return NcclData(title=f"{item_key}: busbw by message size, run #{run.pk}", curves=curves)

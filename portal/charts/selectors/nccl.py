"""NCCL busbw curves by message size: one result, or every node of one item of a run."""

from __future__ import annotations

from dataclasses import dataclass

from portal.charts.selectors.common import (
    item_thresholds,
)
from portal.runs.models import CheckResult, Run, Scope, Series


@dataclass
class Curve:
    name: str
    x: list[float]
    y: list[float | None]
    url: str = ""


@dataclass
class NcclData:
    title: str
    curves: list[Curve]
    threshold: float | None


def _curve_name(result: CheckResult, series: Series) -> str:
    labels = series.labels or {}
    if labels.get("pair"):
        return f"pair {labels['pair']}"
    if result.scope == Scope.GROUP:
        return result.node_set or result.node.hostname
    return result.node.hostname


def nccl_result(*, result: CheckResult) -> NcclData:
    """busbw by message size of one NCCL result: one curve per stored series (per pair when the
    series are labelled with one)."""
    series = Series.objects.filter(result=result, name="busbw").order_by("id")
    curves = [Curve(_curve_name(result, s), list(s.x), list(s.y)) for s in series]
    threshold = item_thresholds(result.run, result.item_key).get("min_busbw_gbps")
    where = result.node_set if result.scope == Scope.GROUP else result.node.hostname
    return NcclData(title=f"{result.item_key}: busbw on {where}", curves=curves, threshold=threshold)


def nccl_run(*, run: Run, item_key: str) -> NcclData:
    """Every node's (or group's) busbw curve of one NCCL item of a run: one query."""
    from django.urls import reverse

    rows = (
        Series.objects.filter(result__run=run, result__item_key=item_key, name="busbw")
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
    curves = [
        Curve(_curve_name(s.result, s), list(s.x), list(s.y), reverse("runs:result_detail", args=[s.result_id]))
        for s in rows
    ]
    threshold = item_thresholds(run, item_key).get("min_busbw_gbps")
    return NcclData(title=f"{item_key}: busbw by message size, run #{run.pk}", curves=curves, threshold=threshold)

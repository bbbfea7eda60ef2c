"""DLC temperature: steady idle and load temperature per GPU against the slowdown threshold."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from checks import presentation_of
from checks.core.presentation import PhaseBars
from portal.charts.selectors.common import (
    item_thresholds,
)
from portal.runs.models import CheckResult, Measurement


@dataclass
class DlcData:
    title: str
    gpus: list[int]
    idle: list[float | None]
    load: list[float | None]
    slowdown: list[float | None]
    margin_c: float | None
    sibling_delta: list[float | None]  # load temperature minus the median of the other GPUs
    max_sibling_delta_c: float | None
    node: str = ""  # named in every hover


def dlc_result(*, result: CheckResult) -> DlcData:
    """The kind's declared per-GPU measurement idle and under load against its per-GPU limit
    (checks/core/presentation.py PhaseBars: steady temperature against the slowdown temperature)."""
    declared = presentation_of(result.kind).phase_bars or PhaseBars("", "")
    rows = Measurement.objects.filter(
        result=result, name__in=(declared.measurement, declared.limit), gpu__isnull=False
    ).values_list("name", "gpu", "value", "labels")
    idle: dict[int, float | None] = {}
    load: dict[int, float | None] = {}
    slowdown: dict[int, float | None] = {}
    for name, gpu, value, labels in rows:
        if gpu is None:  # excluded by the query; narrows the type
            continue
        if name == declared.limit:
            slowdown[gpu] = value
        elif (labels or {}).get("phase") == declared.load:
            load[gpu] = value
        else:
            idle[gpu] = value
    gpus = sorted(set(idle) | set(load) | set(slowdown))
    deltas: list[float | None] = []
    for gpu in gpus:
        others = [v for g, v in load.items() if g != gpu and v is not None]
        value = load.get(gpu)
        deltas.append(value - statistics.median(others) if value is not None and others else None)
    t = item_thresholds(result.run, result.item_key)
    return DlcData(
        title=f"{result.item_key} on {result.node.hostname}: steady GPU temperature, idle and under load",
        gpus=gpus,
        idle=[idle.get(g) for g in gpus],
        load=[load.get(g) for g in gpus],
        slowdown=[slowdown.get(g) for g in gpus],
        margin_c=t.get(declared.margin),
        sibling_delta=deltas,
        max_sibling_delta_c=t.get(declared.sibling),
        node=result.node.hostname,
    )

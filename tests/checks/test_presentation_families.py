"""A chart family and its declaration go together, and a fleet metric's direction comes from the
kind's own declarations in a fixed order."""

from __future__ import annotations

import pytest

from checks import presented
from checks.core.presentation import (
    CounterTable,
    FleetMetric,
    KeyMetric,
    OutlierMetric,
    Presentation,
    TelemetryChart,
    TelemetryPanel,
    TrendRule,
    lowest,
)

TELEMETRY = TelemetryChart(panels=(TelemetryPanel("t", "T", "C"),))


def test_a_family_needs_its_declaration_and_the_declaration_its_family() -> None:
    with pytest.raises(ValueError, match="'burn_in'"):
        Presentation(chart="burn_in")
    with pytest.raises(ValueError, match="'burn_in'"):
        Presentation(telemetry=TELEMETRY)
    with pytest.raises(ValueError, match="'ecc'"):
        Presentation(chart="burn_in", telemetry=TELEMETRY, counters=CounterTable(columns=(("c", "C"),)))
    assert Presentation(chart="burn_in", telemetry=TELEMETRY).charted_names() == {"t"}


def test_every_charted_kind_declares_what_its_family_reads() -> None:
    for kind, shown in presented():
        if shown.chart:
            assert shown.charted_names(), kind


def test_a_fleet_metric_names_a_known_direction_and_folding() -> None:
    with pytest.raises(ValueError, match="better"):
        Presentation(fleet=(FleetMetric("x", better="up"),))
    with pytest.raises(ValueError, match="gpu_agg"):
        Presentation(fleet=(FleetMetric("x", gpu_agg="mean"),))


def test_the_direction_comes_from_the_key_metric_then_fleet_then_outlier_then_trend() -> None:
    shown = Presentation(
        key_metrics=(KeyMetric("k", "K", "keyed", "W", better="lower", gpu_agg="sum"),),
        fleet=(FleetMetric("listed", better="lower", gpu_agg="max"),),
        outliers=(OutlierMetric("o", "O", ("slow",), "GB/s", True, lowest("slow")),),
        trends=(TrendRule("hot", +1, 3.0, False, "rising", "C"), TrendRule("cap", -1, 1.0, False, "lowered", "W")),
    )
    assert shown.direction("keyed") == FleetMetric("keyed", "lower", "sum")
    assert shown.direction("listed") == FleetMetric("listed", "lower", "max")
    assert shown.direction("slow") == FleetMetric("slow", "higher", "min")
    assert shown.direction("hot") == FleetMetric("hot", "lower", "max")
    assert shown.direction("cap") == FleetMetric("cap", "higher", "min")
    assert shown.direction("unknown") is None

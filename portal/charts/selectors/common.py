"""Shared by the chart selectors: the chart family of a kind, plan thresholds, robust z.
The natural sort key lives with the pure figure helpers (portal/charts/figures/common.py)."""

from __future__ import annotations

from typing import Any

from checks import presentation_of
from portal.runs.models import VIEW_POINTS, Run

# Telemetry is drawn at this many points per trace at most (LTTB keeps spikes); exports stay whole.
# A stored series keeps a view of that many points (portal/runs/models.py), read instead of all.
MAX_POINTS = VIEW_POINTS
# Robust outlier score: |x - median| / (1.4826 * MAD) above this (Iglewicz & Hoaglin's 3.5).
OUTLIER_Z = 3.5
MIN_DEVIATION = 0.05


def chart_kind(kind: str) -> str:
    """Which chart family a result of this check kind gets ('' = none): the kind declares it
    (checks/core/presentation.py)."""
    return presentation_of(kind).chart


def item_thresholds(run: Run, item_key: str) -> dict[str, Any]:
    """The thresholds a plan item ran with, from the run's snapshot (never today's definition)."""
    for item in (run.plan_snapshot or {}).get("items", []):
        if item.get("key") == item_key:
            return dict(item.get("thresholds") or {})
    return {}


def item_kind(run: Run, item_key: str) -> str:
    """The check kind of a plan item, from the run's snapshot."""
    for item in (run.plan_snapshot or {}).get("items", []):
        if item.get("key") == item_key:
            return str(item.get("kind", ""))
    return ""


def robust_z(values: list[float]) -> list[float | None]:
    """Each value's robust z-score, (x - median) / (1.4826 * MAD), sign kept; the scale is the runs
    app's (portal/runs/outliers.py, which judges the run-level verdicts) so chart labels and
    verdicts agree. None for every value when there are fewer than 3 or no spread at all."""
    from portal.runs.outliers import robust_scale

    if len(values) < 3:
        return [None] * len(values)
    median, scale = robust_scale(values)
    if scale <= 0:
        return [None] * len(values)
    return [(v - median) / scale for v in values]


def is_float(value: Any) -> bool:
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True

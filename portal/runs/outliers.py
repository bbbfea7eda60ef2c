"""Fleet outliers: which node lags its peers of the same run, by a robust score. Pure math, no Django.

A node can pass every absolute threshold and still be the straggler that slows a whole training job
(all-reduce runs at the speed of its slowest member). Within one run we compare each node's key
metric with the fleet median using the modified z-score of Iglewicz & Hoaglin ("How to Detect and
Handle Outliers", ASQC 1993):

    z = (x - median) / (1.4826 * MAD)        (equivalently 0.6745 * (x - median) / MAD)

where MAD is the median absolute deviation; 1.4826 makes MAD estimate the standard deviation of a
normal sample. They recommend flagging |z| > 3.5. Median and MAD ignore the outliers themselves,
unlike mean and standard deviation, which one bad node drags along.

Two guards keep a healthy fleet quiet:
- only the bad direction counts (a node *faster* than its peers is not a problem);
- the node must also deviate from the median by a minimum fraction (5 %): a very tight fleet has a
  tiny MAD, and a 1 % wobble would otherwise score |z| > 3.5.
"""

from __future__ import annotations

import statistics
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from checks import presented
from checks.core.presentation import OutlierMetric, Row

K = TypeVar("K", bound=Hashable)

Z_THRESHOLD = 3.5  # Iglewicz & Hoaglin's recommended cut-off for the modified z-score
MIN_RELATIVE_DEVIATION = 0.05  # and at least 5 % away from the median
MIN_NODES = 5  # a median of fewer nodes says little about "the fleet"
MAD_SCALE = 1.4826  # MAD -> standard deviation for normal data
# When more than half the fleet has the very same value, MAD is 0; the usual fallback (as in IBM
# SPSS's modified z) is the mean absolute deviation scaled by sqrt(pi/2) = 1.253314.
MEAN_AD_SCALE = 1.253314


@dataclass(frozen=True)
class Outlier:
    """One node's value that lags the fleet median in the bad direction."""

    value: float
    median: float
    z: float

    @property
    def deviation(self) -> float:
        """Signed fraction of the median (-0.14 = 14 % below)."""
        return (self.value - self.median) / self.median if self.median else 0.0


def robust_scale(values: list[float]) -> tuple[float, float]:
    """(median, scale) so that z = (x - median) / scale. scale is 0 when every value is the same."""
    median = statistics.median(values)
    mad = statistics.median(abs(v - median) for v in values)
    if mad > 0:
        return median, MAD_SCALE * mad
    mean_ad = statistics.fmean(abs(v - median) for v in values)
    return median, MEAN_AD_SCALE * mean_ad


def find_outliers(
    values: Mapping[K, float],
    *,
    low_is_bad: bool,
    z_threshold: float = Z_THRESHOLD,
    min_relative_deviation: float = MIN_RELATIVE_DEVIATION,
    min_nodes: int = MIN_NODES,
) -> dict[K, Outlier]:
    """The keys whose value is a robust outlier on the bad side of the median."""
    clean = {k: float(v) for k, v in values.items() if v is not None and v == v}  # drop None/NaN
    if len(clean) < min_nodes:
        return {}
    median, scale = robust_scale(list(clean.values()))
    if scale <= 0 or median == 0:
        return {}
    out: dict[K, Outlier] = {}
    for key, value in clean.items():
        z = (value - median) / scale
        bad_side = z < 0 if low_is_bad else z > 0
        if not bad_side or abs(z) <= z_threshold:
            continue
        if abs(value - median) < min_relative_deviation * abs(median):
            continue
        out[key] = Outlier(value=value, median=median, z=z)
    return out


# --- which metrics: each check kind declares its own (checks/core/presentation.py OutlierMetric) ------
# A measurement here is a mapping with name, value, gpu, labels (a Measurement row as values()).


# The declaration is the metric: nothing to copy or convert.
Metric = OutlierMetric

METRICS: dict[str, tuple[Metric, ...]] = {kind: shown.outliers for kind, shown in presented() if shown.outliers}


def show(metric: Metric, value: float) -> str:
    """A value in the metric's shown unit ("412 GB/s")."""
    return f"{_fmt(value / metric.scale)} {metric.unit}"


def reason(metric: Metric, outlier: Outlier) -> str:
    """The sentence appended to an outlier's reason."""
    direction = "below" if outlier.value < outlier.median else "above"
    return (
        f"outlier: {metric.label} {show(metric, outlier.value)} is {abs(outlier.deviation) * 100:.0f}% {direction} "
        f"the fleet median {show(metric, outlier.median)} (robust z {outlier.z:+.1f})"
    )


def _fmt(value: float) -> str:
    magnitude = abs(value)
    if magnitude >= 100:
        return f"{value:.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def fleet_outliers(metric: Metric, per_node: Mapping[K, Iterable[Row]]) -> dict[K, Outlier]:
    """Read `metric` from each node's measurements and return the nodes that lag the fleet."""
    values = {key: metric.read(rows) for key, rows in per_node.items()}
    return find_outliers({k: v for k, v in values.items() if v is not None}, low_is_bad=metric.low_is_bad)

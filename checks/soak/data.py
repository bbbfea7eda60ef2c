"""The heat soak's thresholds, its subject findings, and what the soak's samples can be trusted to
say (checks/soak/judge.py judges with them).

Samples share one time base `t` (seconds, 1 Hz). A series is usable only when it has one entry per
time point, every entry is None (no reading at that second) or a finite number within physical
bounds, and it covers enough of the soak; anything else makes its subject `error` naming why.
Sums over nodes are taken per time point (time-aligned), never as a sum of each node's peak.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

from checks.core.base import ERROR, FAIL, PASS, WARN, Finding, Measurement, ParamsError
from checks.core.presentation import SUBJECT_VERDICT
from checks.soak.physics import MAX_GPU_POWER_W, MAX_NODE_POWER_W

Values = list[float | None]

# A subject's status from its parts: a proven fail stands even when another part could not be told
# (as a fail in the kept part of a truncated output does, checks/core/base.py), then error, warn, pass.
_ORDER = (FAIL, ERROR, WARN, PASS)


@dataclass
class SoakThresholds:
    # Rated maximum power of one node, W; None = not judged (the peak is recorded and the node is
    # `warn`). Hardware profiles set it: PROFILE_THRESHOLDS below.
    node_max_w: float | None = None
    # How far a node's non-GPU draw (node power - its GPUs' NVML power, steady window) may sit above
    # the fleet's median non-GPU draw, as a fraction of the node's power. NVML's power reading is
    # accurate to +-5% (nvmlDeviceGetPowerUsage docs) and PSU input-power telemetry to a few percent at
    # load: errors in opposite directions move the non-GPU draw by up to ~8-9% of node power, so 10%
    # tolerates the instruments and still flags a node 30% over its GPUs (~20% of node power).
    non_gpu_tolerance_frac: float = 0.10
    # The expected non-GPU draw of one node under load, W, used when fewer than min_fleet_nodes nodes
    # give a fleet median. None: NVIDIA publishes no figure; set it per site from a known-good node.
    platform_overhead_w: float | None = None
    # Nodes needed for a fleet median of non-GPU draw: with 3, one faulty node cannot move the median
    # (Kiln convention; the median's breakdown point is 50%).
    min_fleet_nodes: int = 3
    # Continuous load on a branch circuit may be at most 80% of its overcurrent device's rating
    # (NEC 210.19(A)(1) / 210.20(A): continuous loads at 125%, i.e. the "80% rule").
    breaker_continuous_frac: float = 0.8
    # Power factor of the nodes' PSUs, to turn watts into amps (I = P / (V x PF)) and breaker amps
    # into feed watts. 80 PLUS Platinum and Titanium require PF >= 0.95 at 50% load (80 PLUS
    # programme spec); using the floor overstates currents slightly, the safe side.
    power_factor: float = 0.95
    # Largest deviation of one phase's current from the mean phase current, as a fraction of the mean
    # (NEMA MG-1 14.36's unbalance definition); 10%: "PDU phases must be balanced" (an integrator's
    # GPU-cluster acceptance checklist) as a number; conservative default, tune per site. None = not judged.
    phase_imbalance_max: float | None = 0.10
    # A UPS must carry at least 120% of the measured peak of the racks it carries (an integrator's
    # GPU-cluster acceptance checklist).
    ups_margin: float = 1.2
    # Direct liquid cooling must remove at least 80% of the heat (an integrator's GPU-cluster
    # acceptance checklist; DLC HGX designs capture ~80-90% in liquid, the rest goes to room air). None = not judged.
    dlc_capture_min: float | None = 0.8
    # A loop that "removes" more than 125% of the electrical power of its racks is not measuring them
    # (energy balance: flow-meter and delta-T sensor error of a few percent each, plus heat the liquid
    # may pick up from room air, stay well under 25%): it serves load outside the model, or its
    # sensors read wrong. Such a loop is `error`, never pass.
    max_capture_plausible: float = 1.25
    # The steady window: the last 25% of the soak (7.5 min of the default 30 min). A DLC loop settles
    # within minutes of a step load (coolant transit and cold-plate time constants are tens of seconds
    # to minutes), so the last quarter of a soak is past the transient. Kiln convention.
    steady_fraction: float = 0.25
    # Readings a series needs over the soak: 40 at 1 Hz leaves 10 in the steady window (Kiln convention).
    min_samples: int = 40
    # Share of the soak's time points that must hold a reading (a BMC or PDU may drop a few answers,
    # not a tenth of them; Kiln convention).
    min_coverage: float = 0.9

    def __post_init__(self) -> None:
        for name in ("non_gpu_tolerance_frac", "breaker_continuous_frac", "power_factor", "steady_fraction"):
            if not 0 < getattr(self, name) <= 1:
                raise ParamsError(f"threshold {name!r}: must be in (0, 1], got {getattr(self, name)}")
        if not 0 <= self.min_coverage <= 1:
            raise ParamsError(f"threshold 'min_coverage': must be in [0, 1], got {self.min_coverage}")
        for name in ("node_max_w", "platform_overhead_w", "phase_imbalance_max", "dlc_capture_min"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ParamsError(f"threshold {name!r}: must be > 0 or None, got {value}")
        if self.ups_margin < 1 or self.max_capture_plausible < 1:
            raise ParamsError("thresholds 'ups_margin' and 'max_capture_plausible': must be >= 1")
        if self.min_samples < 2 or self.min_fleet_nodes < 2:
            raise ParamsError("thresholds 'min_samples' and 'min_fleet_nodes': must be >= 2")


PROFILE_THRESHOLDS: dict[str, dict[str, Any]] = {
    # NVIDIA DGX H100 User Guide, "Hardware Overview": system power usage ~10.2 kW max (HGX H100
    # 8-GPU); the figure for HGX H100/H200 8-GPU nodes.
    "H100-SXM-8": {"node_max_w": 10_200.0},
    # NVIDIA DGX H200 datasheet: system power usage ~10.2 kW max.
    "H200-SXM-8": {"node_max_w": 10_200.0},
    # NVIDIA DGX A100 User Guide, "Hardware Overview": system power usage 6.5 kW max.
    "A100-SXM-8": {"node_max_w": 6_500.0},
}


# --- subject findings --------------------------------------------------------------------------

KINDS = ("soak", "node", "rack", "pdu_phase", "feed", "ups", "loop")
_TITLES = {"soak": "soak", "node": "node", "rack": "rack", "pdu_phase": "PDU", "feed": "rack"}
_TITLES.update({"ups": "UPS", "loop": "loop"})


@dataclass
class SoakFinding:
    """One subject's judgement: kind (KINDS), name ("gpu05", "r2", "pdu-r2-a phase 2", "r2 feed A"),
    status, a reason that names the subject and the numbers, its measurements, and labels naming the
    rack / pdu / phase / feed / ups / loop it concerns."""

    kind: str
    name: str
    status: str
    reason: str
    measurements: list[Measurement] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)

    def finding(self) -> Finding:
        return Finding(self.status, self.reason)

    def verdict_row(self) -> Measurement:
        """The subject's verdict as the portal reads it (checks/core/presentation.py SUBJECT_VERDICT)."""
        labels = {**self.labels, "subject": self.kind, "subject_name": self.name, "status": self.status}
        return Measurement(name=SUBJECT_VERDICT, value=None, text=self.reason, labels=labels)


Part = tuple[str, str]  # (status, text): one judged fact of a subject


def subject_status(parts: list[Part]) -> str:
    """FAIL if any part failed, else ERROR, else WARN, else PASS; no part at all is ERROR."""
    statuses = {status for status, _ in parts}
    return next((s for s in _ORDER if s in statuses), ERROR)


def subject(
    kind: str, name: str, parts: list[Part], measurements: list[Measurement], labels: dict[str, str]
) -> SoakFinding:
    """A subject finding from its parts: problems first in the reason, then what passed."""
    status = subject_status(parts)
    ordered = sorted(parts, key=lambda p: _ORDER.index(p[0]) if p[0] in _ORDER else len(_ORDER))
    text = "; ".join(t for _, t in ordered) or "nothing could be judged"
    for m in measurements:
        m.labels.update({k: v for k, v in labels.items() if k not in m.labels})
    return SoakFinding(kind, name, status, f"{_TITLES[kind]} {name}: {text}", measurements, labels)


def measure(name: str, value: float | None, unit: str, *, threshold: str = "", ok: bool | None = None) -> Measurement:
    return Measurement(name=name, value=value, unit=unit, threshold=threshold, ok=ok)


def kw(watts: float) -> str:
    return f"{watts / 1000:.2f} kW"


# --- reading series ------------------------------------------------------------------------------


def read_time(raw: object, min_samples: int) -> tuple[list[float], str]:
    """The common time base, or why there is none: a list of finite, strictly increasing seconds."""
    if not isinstance(raw, (list, tuple)) or not raw:
        return [], "no time base (samples['t'] is missing or empty)"
    if len(raw) < min_samples:
        return [], f"only {len(raw)} time points in the soak (need at least {min_samples})"
    t: list[float] = []
    for i, value in enumerate(raw):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return [], f"time point {i} is not a finite number ({value!r:.30})"
        if t and value <= t[-1]:
            return [], f"time points are not increasing at index {i} ({t[-1]:g} s then {value:g} s)"
        t.append(float(value))
    return t, ""


def read_series(raw: object, n: int, what: str, unit: str, high: float, low: float = 0.0) -> tuple[Values, str]:
    """One series on the time base: (values, "") or ([], why it cannot be used)."""
    if raw is None:
        return [], f"no {what} readings"
    if not isinstance(raw, (list, tuple)):
        return [], f"{what} readings are not a series ({type(raw).__name__})"
    if len(raw) != n:
        return [], f"{what}: {len(raw)} readings for {n} time points (truncated or misaligned)"
    values: Values = []
    for i, value in enumerate(raw):
        if value is None:
            values.append(None)
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return [], f"{what}: reading {i} is {value!r:.30} (not a finite number)"
        if not low <= value <= high:
            return [], f"{what}: reading {i} is {value:g} {unit} (impossible: outside {low:g}..{high:g} {unit})"
        values.append(float(value))
    return values, ""


def coverage_problem(values: Values, steady: list[int], t: SoakThresholds, what: str) -> str:
    """Why a usable series still covers too little of the soak, or ""."""
    have = sum(v is not None for v in values)
    need = max(t.min_samples, math.ceil(t.min_coverage * len(values)))
    if have < need:
        return f"{what}: readings at {have} of {len(values)} time points (need {need})"
    if not any(values[i] is not None for i in steady):
        return f"{what}: no readings in the steady window"
    return ""


def checked(raw: object, times: SoakTimes, what: str, unit: str, high: float, low: float = 0.0) -> tuple[Values, str]:
    """read_series, then coverage: (values, "") or ([], why)."""
    values, why = read_series(raw, len(times.t), what, unit, high, low)
    if not why:
        why = coverage_problem(values, times.steady, times.thresholds, what)
    return ([], why) if why else (values, "")


@dataclass(frozen=True)
class SoakTimes:
    """The time base, its steady window (indices) and the thresholds that sized them."""

    t: list[float]
    steady: list[int]
    thresholds: SoakThresholds

    @classmethod
    def of(cls, t: list[float], thresholds: SoakThresholds) -> SoakTimes:
        start = t[-1] - thresholds.steady_fraction * (t[-1] - t[0])
        return cls(t, [i for i, x in enumerate(t) if x >= start], thresholds)

    def describe_steady(self) -> str:
        return f"steady window {self.t[self.steady[0]] - self.t[0]:g}-{self.t[-1] - self.t[0]:g} s"


# --- time-aligned sums ---------------------------------------------------------------------------


@dataclass
class Aggregate:
    """A weighted sum of node series per time point; None where a contributing node has no reading.
    `missing`: nodes that should contribute but whose series is unusable (host -> why)."""

    values: Values
    hosts: list[str]
    missing: dict[str, str]

    def peak(self) -> tuple[float, int] | None:
        """The largest value and its index (the sum at its peak moment), or None."""
        found = [(v, i) for i, v in enumerate(self.values) if v is not None]
        return max(found, key=lambda p: p[0]) if found else None

    def steady(self, steady: list[int]) -> float | None:
        values = [v for i in steady if (v := self.values[i]) is not None]
        return statistics.median(values) if values else None

    def coverage(self) -> float:
        return sum(v is not None for v in self.values) / len(self.values) if self.values else 0.0

    def gaps(self, t: SoakThresholds, what: str) -> str:
        """Why this sum cannot be trusted as complete, or ""."""
        if self.missing:
            named = ", ".join(f"{h} ({why})" for h, why in sorted(self.missing.items())[:3])
            more = f" and {len(self.missing) - 3} more" if len(self.missing) > 3 else ""
            return f"{what} unknown: no usable power readings from {named}{more}"
        if self.coverage() < t.min_coverage:
            return (
                f"{what} unknown: readings from all {len(self.hosts)} nodes at only {self.coverage():.0%} of the soak"
            )
        return ""


def weighted_sum(series: dict[str, Values], problems: dict[str, str], weights: dict[str, float], n: int) -> Aggregate:
    """Sum of weight x series per time point over the hosts in `weights` that have a usable series."""
    hosts = sorted(h for h in weights if h in series)
    missing = {h: problems.get(h, "no power readings") for h in weights if h not in series}
    values: Values = []
    for i in range(n):
        points = [series[h][i] for h in hosts]
        if not hosts or any(p is None for p in points):
            values.append(None)
        else:
            values.append(sum(weights[h] * p for h, p in zip(hosts, points, strict=True) if p is not None))
    return Aggregate(values, hosts, missing)


def steady_median(values: Values, steady: list[int]) -> float | None:
    found = [v for i in steady if (v := values[i]) is not None]
    return statistics.median(found) if found else None


def positive(value: object) -> float | None:
    """A configured quantity (budget, capacity, voltage, rating) as a float, or None when it is not a
    finite number above zero (a configuration gap)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        return None
    return float(value)


# --- the soak's nodes ----------------------------------------------------------------------------


def rows(facility: object, key: str) -> list[dict[str, Any]]:
    """facility[key] as a list of mappings (rows that are not mappings are left out)."""
    found = facility.get(key) if isinstance(facility, dict) else None
    return [r for r in found if isinstance(r, dict)] if isinstance(found, (list, tuple)) else []


def mapping(value: object) -> dict[str, Any]:
    return {str(k): v for k, v in value.items()} if isinstance(value, dict) else {}


@dataclass
class SoakData:
    """What the soak's samples say about its nodes, checked: usable node power and GPU power series
    (and why the others are not), each node's rack, and the facility's racks by name."""

    times: SoakTimes
    hosts: list[str]
    rack_of: dict[str, str]
    racks: dict[str, dict[str, Any]]
    power: dict[str, Values] = field(default_factory=dict)
    power_problem: dict[str, str] = field(default_factory=dict)
    gpu: dict[str, Values] = field(default_factory=dict)
    gpu_problem: dict[str, str] = field(default_factory=dict)

    @property
    def thresholds(self) -> SoakThresholds:
        return self.times.thresholds

    def in_racks(self, racks: list[str]) -> list[str]:
        wanted = set(racks)
        return [h for h in self.hosts if self.rack_of.get(h) in wanted]

    def total(self, hosts: list[str], weights: dict[str, float] | None = None) -> Aggregate:
        """The time-aligned sum of these nodes' power (each times its weight, 1 by default)."""
        weights = weights if weights is not None else dict.fromkeys(hosts, 1.0)
        return weighted_sum(self.power, self.power_problem, weights, len(self.times.t))


def load(facility: object, samples: object, thresholds: SoakThresholds) -> SoakData | str:
    """The soak's nodes with their checked series, or why nothing at all can be judged."""
    if not isinstance(samples, dict):
        return "no samples (not a mapping)"
    t, why = read_time(samples.get("t"), thresholds.min_samples)
    if why:
        return why
    node_rack = {h: str(r) for h, r in mapping(facility.get("nodes") if isinstance(facility, dict) else None).items()}
    power_raw, gpu_raw = mapping(samples.get("node_power_w")), mapping(samples.get("gpu_power_w"))
    counts = mapping(samples.get("gpu_count"))
    racks = {str(r.get("name")): r for r in rows(facility, "racks")}
    data = SoakData(SoakTimes.of(t, thresholds), sorted(set(node_rack) | set(power_raw)), node_rack, racks)
    for host in data.hosts:
        values, why = checked(power_raw.get(host), data.times, "node power", "W", MAX_NODE_POWER_W)
        if why:
            data.power_problem[host] = why
        else:
            data.power[host] = values
        count = counts.get(host)
        ok_count = isinstance(count, int) and not isinstance(count, bool) and count > 0
        high = count * MAX_GPU_POWER_W if ok_count and count is not None else MAX_NODE_POWER_W
        gpus, why = checked(gpu_raw.get(host), data.times, "GPU power", "W", high)
        if why:
            data.gpu_problem[host] = why
        else:
            data.gpu[host] = gpus
    return data

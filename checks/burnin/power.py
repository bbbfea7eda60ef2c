"""burn_in's node power (checks/burnin/check.py, param `node_power`): the BMC's readings the probe took
beside NVML during the burn (probe --node-power, checks/probe/SCHEMA.md "Node power"), summed up
and judged.

Measurements (node-level, no GPU), present only when the probe sampled node power:
  node_power_source       text   "dcmi" / "sdr" / "" (never read)
  node_power_readings     count  samples holding a reading
  node_power_coverage     0..1   share of the steady window's samples holding one
  node_power_peak_w       W      the highest reading of the burn
  node_power_steady_w     W      the median reading over the steady window
  gpu_power_steady_sum_w  W      the median, over the same window, of the per-sample sum of the
                                 GPUs' NVML power (a sample where any GPU is unread is left out)
  node_power_over_gpu_w   W      node_power_steady_w - gpu_power_steady_sum_w: CPUs, memory, NICs,
                                 NVSwitches, fans and PSU losses, or a fault drawing beside the GPUs
  node_power_error        text   each of the probe's reasons for a missing reading
The steady window is the one burn-in judges clocks and power over (SamplingDoc.steady_start: after
a quarter of the burn, at most 10 minutes). Node power lags the GPU readings of its sample by at
most one interval, which a median over minutes does not feel.

No false pass: node power that was asked for and is missing, or covers too little of the steady
window, is `error` with the probe's reasons; a node drawing less than its GPUs alone is `error`
(the BMC reading does not cover the node, or an instrument is wrong), never a pass.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from checks.core.base import ERROR, FAIL, Finding, Measurement, ParamsError
from checks.core.evidence import COUNT, Rule
from checks.core.sampling import SamplingDoc
from checks.soak.physics import MAX_NODE_POWER_W

# Impossible-evidence rules of these measurements (checks/core/evidence.py): the readings' own bound
# (checks/core/sampling_columns.py NODE_POWER_RULE); the difference may be negative (judged, not refused).
EVIDENCE: dict[str, Rule] = {
    "node_power_readings": COUNT,
    "node_power_coverage": Rule("a fraction", low=0.0, high=1.0),
    "node_power_peak_w": Rule("a node's input power", low=0.0, high=MAX_NODE_POWER_W),
    "node_power_steady_w": Rule("a node's input power", low=0.0, high=MAX_NODE_POWER_W),
    "gpu_power_steady_sum_w": Rule("the GPUs' power", low=0.0, high=MAX_NODE_POWER_W),
    "node_power_over_gpu_w": Rule("a difference of powers", low=-MAX_NODE_POWER_W, high=MAX_NODE_POWER_W),
}


def check_node_power_thresholds(t: Any) -> None:
    """ParamsError for node power thresholds that cannot be (burn-in's __post_init__)."""
    for name in ("node_max_w", "max_node_over_gpu_w"):
        value = getattr(t, name)
        if value is not None and not 0 < value <= MAX_NODE_POWER_W:
            raise ParamsError(f"threshold {name!r}: must be in (0, {MAX_NODE_POWER_W:g}] W or None, got {value}")
    if not 0 < (share := t.node_power_min_coverage) <= 1:
        raise ParamsError(f"threshold 'node_power_min_coverage': must be in (0, 1], got {share}")


def node_power_measurements(doc: SamplingDoc) -> list[Measurement]:
    """The node power summary of a sampling document; [] when the probe did not sample it."""
    if not doc.has_node_power:
        return []
    readings = doc.node_power_w or []
    info = doc.node_power_info
    steady_from = doc.steady_start()
    window = [k for k, t in enumerate(doc.times) if t >= steady_from]
    node = [v for k in window if (v := readings[k]) is not None]
    gpu_sums = doc.gpu_power_sums()
    gpus = [v for k in window if (v := gpu_sums[k]) is not None]
    known = [v for v in readings if v is not None]
    coverage = len(node) / len(window) if window else None
    out = [
        Measurement(name="node_power_source", text=(info.source if info else None) or ""),
        Measurement(name="node_power_readings", value=float(len(known))),
        _value("node_power_coverage", coverage, "", "no sample in the steady window"),
        _value("node_power_peak_w", max(known) if known else None, "W", "no node power reading"),
        _value("node_power_steady_w", _median(node), "W", "no node power reading in the steady window"),
        _value("gpu_power_steady_sum_w", _median(gpus), "W", "no sample with every GPU's power in the steady window"),
    ]
    steady, gpu_sum = out[-2].value, out[-1].value
    over = None if steady is None or gpu_sum is None else round(steady - gpu_sum, 1)
    out.append(_value("node_power_over_gpu_w", over, "W", "node power or GPU power missing in the steady window"))
    out += [Measurement(name="node_power_error", text=e) for e in (info.errors if info else [])]
    return out


def _value(name: str, value: float | None, unit: str, missing: str) -> Measurement:
    m = Measurement(name=name, value=None if value is None else round(value, 4), unit=unit)
    if value is None:
        m.labels["missing"] = missing
    return m


def _median(values: list[float]) -> float | None:
    return float(statistics.median(values)) if values else None


@dataclass
class _Read:
    """The node power measurements by name (burn-in's _Facts would do, but this module stands alone)."""

    by_name: dict[str, Measurement]

    def get(self, name: str) -> Measurement:
        return self.by_name.get(name) or Measurement(name=name, labels={"missing": "measurement absent"})


def judge_node_power(measurements: list[Measurement], thresholds: Any) -> tuple[list[Finding], str]:
    """Findings on node power, and a clause for the pass reason ("" when nothing was judged).
    Nothing at all when the probe did not sample node power (the param was off)."""
    facts = _Read({m.name: m for m in measurements if m.name.startswith(("node_power", "gpu_power_steady"))})
    if "node_power_readings" not in facts.by_name:
        return [], ""
    usable = _usable(facts, thresholds)
    if usable:
        return [usable], ""
    findings = _judge_max(facts, thresholds) + _judge_over(facts, thresholds)
    peak, steady = facts.get("node_power_peak_w").value, facts.get("node_power_steady_w").value
    assert peak is not None and steady is not None  # _usable made sure
    clause = f"node power peak {peak / 1000:.2f} kW, steady {steady / 1000:.2f} kW"
    if thresholds.node_max_w is not None:
        clause += f" (max {thresholds.node_max_w / 1000:.2f} kW)"
    return findings, clause


def _usable(facts: _Read, thresholds: Any) -> Finding | None:
    """The `error` when the readings cannot be judged: none, or too few in the steady window."""
    errors = [m.text for m in facts.by_name.values() if m.name == "node_power_error"]
    why = f" ({'; '.join(errors[:3])})" if errors else ""
    coverage = facts.get("node_power_coverage")
    if not facts.get("node_power_readings").value:
        return Finding(ERROR, f"node power: no BMC reading during the burn{why}")
    if facts.get("node_power_steady_w").value is None:
        return Finding(ERROR, f"node power: no BMC reading in the burn's steady window{why}")
    need = thresholds.node_power_min_coverage
    coverage.threshold = f">= {need:g}"
    coverage.ok = coverage.value is not None and coverage.value >= need
    if not coverage.ok:
        shown = "none" if coverage.value is None else f"{coverage.value:.0%}"
        return Finding(ERROR, f"node power: readings in {shown} of the steady window's samples (need {need:.0%}){why}")
    return None


def _judge_max(facts: _Read, thresholds: Any) -> list[Finding]:
    """Peak and steady power against the profile's node maximum (None: recorded, not judged)."""
    limit = thresholds.node_max_w
    if limit is None:
        return []
    findings = []
    for name, what in (("node_power_peak_w", "peak"), ("node_power_steady_w", "steady")):
        m = facts.get(name)
        if m.value is None:
            continue
        m.threshold, m.ok = f"<= {limit:g}", m.value <= limit
        if not m.ok:
            findings.append(Finding(FAIL, f"node power {what} {m.value:,.0f} W > {limit:,.0f} W (the node's maximum)"))
    return findings


def _judge_over(facts: _Read, thresholds: Any) -> list[Finding]:
    """The node's draw beside its GPUs: below zero is `error`, above the site's figure is `fail`."""
    over = facts.get("node_power_over_gpu_w")
    limit = thresholds.max_node_over_gpu_w
    if over.value is None:
        if limit is None:
            return []
        return [Finding(ERROR, f"node power beside the GPUs unknown ({over.labels.get('missing', 'missing')})")]
    gpus = facts.get("gpu_power_steady_sum_w").value or 0.0
    if over.value < 0:
        over.ok = False
        return [
            Finding(
                ERROR,
                f"node power {gpus + over.value:,.0f} W is below its GPUs' own {gpus:,.0f} W (NVML): the BMC's"
                " reading does not cover the whole node, or one instrument is wrong",
            )
        ]
    if limit is None:
        return []
    over.threshold, over.ok = f"<= {limit:g}", over.value <= limit
    if over.ok:
        return []
    why = f"node draws {over.value:,.0f} W beside its GPUs' {gpus:,.0f} W (site maximum {limit:,.0f} W)"
    return [Finding(FAIL, why)]

"""The `power-soak` heat soak's judgement: pure Python over the facility model
and the soak's 1 Hz samples. A GroupCheck wraps it; this module runs no command.

`judge_soak(facility, samples, thresholds)` returns a SoakResult: one SoakFinding per subject
(node, rack, pdu_phase, feed, ups, loop; `soak` when the samples hold no usable time base) with a
status, a reason naming the subject and its numbers, and its measurements; and the overall Verdict
(checks/core/verdict.py). `fail`: measured out of spec. `error`: could not tell (no or impossible
readings, too few, a configuration gap). No subject passes without evidence.

Input contract (facility: what the database holds; samples: what the soak measured):
    facility = {"racks": [{"name", "power_budget_w", "cooling_budget_w", "room", "row", "position"}],
                "pdus": [{"name", "rack", "feed": "A"|"B", "phases": 1|3, "voltage_v" (phase-to-neutral),
                          "breaker_a": [A per phase], "has_endpoint": bool}],
                "feeds": [{"node", "pdu", "phase": 1-based, "share": fraction of the node's power}],
                "ups": [{"name", "capacity_w", "racks": [names]}],
                "loops": [{"name", "racks": [names], "fluid": "water"|"pg25", "has_endpoint": bool}],
                "nodes": {hostname: rack}}
    samples = {"t": [s], "node_power_w": {host: [W | None]}, "gpu_power_w": {host: [W | None]},
               "gpu_count": {host: int}, "phase_current_a": {pdu: {"1": [A], ...}} (optional),
               "loops": {loop: {"supply_c": [C], "return_c": [C], "flow_lpm": [L/min]}} (optional)}

Definitions: a node's or a sum's *peak* is its largest value over the soak; *steady* is the median
over the steady window (the last `steady_fraction` of the soak). Sums over nodes are per time point.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from checks.core.base import ERROR, FAIL, PASS, WARN, GroupVerdict, Measurement, Series, Verdict
from checks.core.evidence import Rule
from checks.soak.circuits import feed_map, judge_feeds, judge_pdus
from checks.soak.data import PROFILE_THRESHOLDS as PROFILE_THRESHOLDS  # re-exported for the check
from checks.soak.data import (
    Aggregate,
    Part,
    SoakData,
    SoakFinding,
    SoakThresholds,
    checked,
    kw,
    load,
    mapping,
    measure,
    positive,
    rows,
    steady_median,
    subject,
)
from checks.soak.physics import (
    MAX_COOLANT_C,
    MAX_FLOW_LPM,
    MAX_NODE_POWER_W,
    MIN_COOLANT_C,
    fluid_for,
    heat_removed_w,
)

# Measurement name -> what its value may be (for the wrapping check's `evidence`): aggregates over
# racks and UPSes pass checks/core/evidence.py's 1 MW bound of "W" on large clusters, and a node's non-GPU
# draw may be slightly negative (instrument error) before it is judged.
# 1 GW: a whole campus of the largest announced AI data centres; no rack, feed, UPS or loop nears it.
_MAX_SITE_W = 1e9
SOAK_EVIDENCE: dict[str, Rule] = {
    "node_non_gpu_power_w": Rule("a node's power less its GPUs'", low=-MAX_NODE_POWER_W, high=MAX_NODE_POWER_W),
    "rack_peak_power_w": Rule("a rack power", low=0.0, high=_MAX_SITE_W),
    "rack_steady_power_w": Rule("a rack power", low=0.0, high=_MAX_SITE_W),
    "feed_capacity_w": Rule("a feed capacity", low=0.0, high=_MAX_SITE_W),
    "ups_capacity_w": Rule("a UPS capacity", low=0.0, high=_MAX_SITE_W),
    "ups_peak_load_w": Rule("a UPS load", low=0.0, high=_MAX_SITE_W),
    "loop_heat_removed_w": Rule("a heat flow", low=-_MAX_SITE_W, high=_MAX_SITE_W),
    "loop_power_w": Rule("a loop's electrical load", low=0.0, high=_MAX_SITE_W),
}


@dataclass
class SoakResult:
    """Every subject's finding, and the overall verdict (the worst finding: verdict.Verdict)."""

    findings: list[SoakFinding]
    verdict: Verdict

    def of(self, kind: str, name: str | None = None) -> list[SoakFinding]:
        return [f for f in self.findings if f.kind == kind and (name is None or f.name == name)]

    @property
    def measurements(self) -> list[Measurement]:
        """Every subject's measurements, then a verdict row per subject other than a node (whose
        verdict is the result's attribution): what the capacity page and the certificate read."""
        found = [m for f in self.findings for m in f.measurements]
        return found + [f.verdict_row() for f in self.findings if f.kind != "node"]

    def node_verdicts(self) -> dict[str, Verdict]:
        return {f.name: Verdict(f.status, f.reason, [f.finding()]) for f in self.of("node")}

    def group_verdict(self) -> GroupVerdict:
        v = self.verdict
        return GroupVerdict(v.status, v.reason, list(v.findings), node_verdicts=self.node_verdicts())


def judge_soak(facility: object, samples: object, thresholds: SoakThresholds | None = None) -> SoakResult:
    """Judge a heat soak: nodes, racks, PDU phases, A/B feeds, UPSes and cooling loops."""
    t = thresholds or SoakThresholds()
    data = load(facility, samples, t)
    if isinstance(data, str):
        findings = [subject("soak", "samples", [(ERROR, data)], [], {})]
        return SoakResult(findings, Verdict.from_findings([f.finding() for f in findings]))
    feeds = feed_map(facility, data)
    findings = judge_nodes(data, feeds.node_problem)
    findings += judge_racks(data)
    findings += judge_pdus(facility, samples, data, feeds)
    findings += judge_feeds(facility, data)
    findings += judge_ups(facility, data)
    findings += judge_loops(facility, samples, data)
    if not findings:  # no node in the facility model or the samples: nothing was judged
        findings = [subject("soak", "samples", [(ERROR, "no node in the facility model or the samples")], [], {})]
    return SoakResult(findings, Verdict.from_findings([f.finding() for f in findings], pass_reason=_summary(findings)))


def _summary(findings: list[SoakFinding]) -> str:
    counts: dict[str, int] = {}
    for f in findings:
        counts[f.kind] = counts.get(f.kind, 0) + 1
    listed = ", ".join(f"{n} {kind.replace('_', ' ')}{'s' if n != 1 else ''}" for kind, n in counts.items())
    return f"all within spec: {listed}"


# --- nodes ---------------------------------------------------------------------------------------


def _non_gpu(data: SoakData, host: str) -> float | None:
    """Steady-window median of node power minus its GPUs' power, per time point."""
    node, gpu = data.power.get(host), data.gpu.get(host)
    if node is None or gpu is None:
        return None
    diff = [n - g if n is not None and g is not None else None for n, g in zip(node, gpu, strict=True)]
    return steady_median(diff, data.times.steady)


def _reference(non_gpu: dict[str, float | None], t: SoakThresholds) -> tuple[float | None, str]:
    known = [v for v in non_gpu.values() if v is not None]
    if len(known) >= t.min_fleet_nodes:
        return statistics.median(known), f"the fleet median ({len(known)} nodes)"
    if t.platform_overhead_w is not None:
        return t.platform_overhead_w, "the configured platform overhead"
    return (
        None,
        f"no reference: {len(known)} nodes with GPU readings (need {t.min_fleet_nodes}) and no platform_overhead_w",
    )


def judge_nodes(data: SoakData, feed_problems: dict[str, str]) -> list[SoakFinding]:
    non_gpu = {h: _non_gpu(data, h) for h in data.hosts}
    reference = _reference(non_gpu, data.thresholds)
    return [_judge_node(data, h, non_gpu[h], reference, feed_problems.get(h)) for h in data.hosts]


def _judge_node(
    data: SoakData, host: str, non_gpu: float | None, reference: tuple[float | None, str], feed: str | None
) -> SoakFinding:
    rack = data.rack_of.get(host)
    labels = {"node": host, "rack": rack or ""}
    parts: list[Part] = [(ERROR, feed)] if feed else []
    if rack is None:
        parts.append((ERROR, "not placed in any rack of the facility model"))
    elif rack not in data.racks:
        parts.append((ERROR, f"its rack {rack!r} is not in the facility model"))
    values = data.power.get(host)
    if values is None:
        m = measure("node_peak_power_w", None, "W")
        m.labels["missing"] = data.power_problem.get(host, "no power readings")
        return subject("node", host, [*parts, (ERROR, m.labels["missing"])], [m], labels)
    found = [v for v in values if v is not None]
    peak, steady = max(found), steady_median(values, data.times.steady) or 0.0
    ms = [measure("node_peak_power_w", peak, "W"), measure("node_steady_power_w", steady, "W")]
    parts.append(_node_max(ms, data.thresholds.node_max_w))
    parts.append(_overhead(data, host, steady, non_gpu, reference, ms))
    return subject("node", host, parts, ms, labels)


def _node_max(ms: list[Measurement], node_max: float | None) -> Part:
    peak, steady = ms[0].value or 0.0, ms[1].value or 0.0
    said = f"peak {kw(peak)}, steady {kw(steady)}"
    if node_max is None:
        return (WARN, f"{said}: not judged against a node maximum (no node_max_w for this hardware)")
    for m in ms:
        m.threshold, m.ok = f"<= {node_max:g} W", (m.value or 0.0) <= node_max
    if peak > node_max:
        return (FAIL, f"{said}: above the node maximum {kw(node_max)}")
    return (PASS, f"{said} within the node maximum {kw(node_max)}")


def _overhead(
    data: SoakData,
    host: str,
    steady: float,
    non_gpu: float | None,
    reference: tuple[float | None, str],
    ms: list[Measurement],
) -> Part:
    """The node's non-GPU draw against the fleet's: a node far above its GPUs points at a fault."""
    if host not in data.gpu:
        return (ERROR, f"non-GPU draw unknown: {data.gpu_problem.get(host, 'no GPU power readings')}")
    gpu = steady_median(data.gpu[host], data.times.steady)
    if non_gpu is None or gpu is None:
        return (ERROR, "non-GPU draw unknown: no steady time point with both node and GPU readings")
    ms.append(measure("node_gpu_power_w", gpu, "W"))
    m = measure("node_non_gpu_power_w", non_gpu, "W")
    ms.append(m)
    tol = data.thresholds.non_gpu_tolerance_frac * steady
    said = f"non-GPU draw {kw(non_gpu)} (node {kw(steady)} - GPUs {kw(gpu)}, {data.times.describe_steady()})"
    if non_gpu < -tol:
        return (ERROR, f"{said}: the node reads below its GPUs by more than {kw(tol)}; BMC and NVML disagree")
    ref, ref_said = reference
    if ref is None:
        return (WARN, f"{said}: not judged ({ref_said})")
    limit = ref + tol
    m.threshold, m.ok = f"<= {limit:.0f} W", non_gpu <= limit
    rule = f"{ref_said} {kw(ref)} + {data.thresholds.non_gpu_tolerance_frac:.0%} of node power ({kw(tol)})"
    if m.ok:
        return (PASS, f"{said} within {rule}")
    implied = gpu + ref
    return (FAIL, f"{said} is {kw(non_gpu - ref)} above {rule}: the node draws {steady / implied:.0%} of what "
            f"its GPUs plus a typical platform imply ({kw(implied)})")  # fmt: skip


# --- racks and UPSes -----------------------------------------------------------------------------


def _at(data: SoakData, index: int) -> str:
    return f" at t={data.times.t[index] - data.times.t[0]:g} s"


def _load_part(
    m: Measurement, value: float | None, limit: float | None, gaps: str, what: str, limit_what: str, detail: str
) -> Part:
    """A load (W) against a budget: fail when over (even a lower bound from incomplete readings)."""
    if limit is None:
        return (ERROR, f"no {limit_what} configured")
    if value is None:
        return (ERROR, gaps or f"{what} unknown")
    m.threshold, m.ok = f"<= {limit:g} W", value <= limit
    if not m.ok:
        return (FAIL, f"{what} {'at least ' if gaps else ''}{kw(value)} ({detail}) above the {limit_what} {kw(limit)}")
    if gaps:
        m.threshold, m.ok = "", None
        return (ERROR, gaps)
    return (PASS, f"{what} {kw(value)} ({detail}) within the {limit_what} {kw(limit)}")


def judge_racks(data: SoakData) -> list[SoakFinding]:
    """Each rack's time-aligned peak against its power budget, its steady load against its cooling budget."""
    findings = []
    for name, rack in sorted(data.racks.items()):
        hosts = data.in_racks([name])
        if not hosts:
            continue  # no node of the soak in it: nothing drew power there
        total = data.total(hosts)
        gaps, peak = total.gaps(data.thresholds, "the rack's load"), total.peak()
        steady = total.steady(data.times.steady)
        pm = measure("rack_peak_power_w", peak[0] if peak else None, "W")
        sm = measure("rack_steady_power_w", steady, "W")
        when = f"{len(hosts)} nodes{_at(data, peak[1]) if peak else ''}"
        parts = [
            _load_part(pm, peak[0] if peak else None, positive(rack.get("power_budget_w")), gaps,
                       "time-aligned peak", "rack power budget", when),
            _load_part(sm, steady, positive(rack.get("cooling_budget_w")), gaps,
                       "steady load", "rack cooling budget", data.times.describe_steady()),
        ]  # fmt: skip
        findings.append(subject("rack", name, parts, [pm, sm], {"rack": name}))
    return findings


def judge_ups(facility: object, data: SoakData) -> list[SoakFinding]:
    """Each UPS's capacity against `ups_margin` x the time-aligned peak of the racks it carries."""
    findings = []
    margin = data.thresholds.ups_margin
    for ups in rows(facility, "ups"):
        name = str(ups.get("name"))
        racks = [str(r) for r in ups.get("racks") or []]
        labels = {"ups": name, "rack": ",".join(racks)}
        capacity = positive(ups.get("capacity_w"))
        unknown = [r for r in racks if r not in data.racks]
        hosts = data.in_racks(racks)
        total = data.total(hosts)
        peak, gaps = total.peak(), total.gaps(data.thresholds, "the UPS load")
        cm = measure("ups_capacity_w", capacity, "W")
        lm = measure("ups_peak_load_w", peak[0] if peak else None, "W")
        parts: list[Part] = [(ERROR, f"carries rack {r!r}, which is not in the facility model") for r in unknown]
        if not hosts:
            parts.append((ERROR, "carries no rack with nodes of the soak"))
        elif capacity is None:
            parts.append((ERROR, "no UPS capacity configured"))
        elif peak is None:
            parts.append((ERROR, gaps or "the UPS load is unknown"))
        else:
            what = f"{margin:g} x the time-aligned peak {kw(peak[0])}{_at(data, peak[1])} of racks {', '.join(racks)}"
            parts.append(_ups_part(cm, capacity, peak[0] * margin, gaps, what))
        findings.append(subject("ups", name, parts, [cm, lm], labels))
    return findings


def _ups_part(m: Measurement, capacity: float, required: float, gaps: str, what: str) -> Part:
    m.threshold, m.ok = f">= {required:.0f} W", capacity >= required
    if not m.ok:
        return (FAIL, f"capacity {kw(capacity)} below {what} = {'at least ' if gaps else ''}{kw(required)}")
    if gaps:
        m.threshold, m.ok = "", None
        return (ERROR, gaps)
    return (PASS, f"capacity {kw(capacity)} covers {what} = {kw(required)}")


# --- cooling loops -------------------------------------------------------------------------------


def judge_loops(facility: object, samples: object, data: SoakData) -> list[SoakFinding]:
    readings = mapping(samples.get("loops") if isinstance(samples, dict) else None)
    return [_judge_loop(loop, readings.get(str(loop.get("name"))), data) for loop in rows(facility, "loops")]


def _loop_series(raw: object, data: SoakData) -> tuple[dict[str, list[float | None]], list[str]]:
    series, problems = {}, []
    got = mapping(raw)
    for key, what, unit, low, high in (
        ("supply_c", "supply temperature", "C", MIN_COOLANT_C, MAX_COOLANT_C),
        ("return_c", "return temperature", "C", MIN_COOLANT_C, MAX_COOLANT_C),
        ("flow_lpm", "flow", "L/min", 0.0, MAX_FLOW_LPM),
    ):
        values, why = checked(got.get(key), data.times, what, unit, high, low)
        if why:
            problems.append(why)
        series[key] = values
    return series, problems


def _judge_loop(loop: dict, raw: object, data: SoakData) -> SoakFinding:
    name = str(loop.get("name"))
    racks = [str(r) for r in loop.get("racks") or []]
    labels = {"loop": name, "rack": ",".join(racks)}
    fluid = fluid_for(loop.get("fluid"))
    hosts = data.in_racks(racks)
    parts: list[Part] = []
    if fluid is None:
        parts.append((ERROR, f"unknown coolant {loop.get('fluid')!r} (known: water, pg25)"))
    if not hosts:
        parts.append((ERROR, "serves no rack with nodes of the soak"))
    if raw is None:
        endpoint = "" if loop.get("has_endpoint") else " (no CDU endpoint configured)"
        parts.append((ERROR, f"no supply/return/flow readings{endpoint}"))
    if parts or fluid is None:
        return subject("loop", name, parts, [], labels)
    series, problems = _loop_series(raw, data)
    if problems:
        return subject("loop", name, [(ERROR, p) for p in problems], [], labels)
    heat = [
        heat_removed_w(f, s, r, fluid) if s is not None and r is not None and f is not None else None
        for s, r, f in zip(series["supply_c"], series["return_c"], series["flow_lpm"], strict=True)
    ]
    ms, part = _capture(series, heat, data.total(hosts), data, f"{fluid.name}, racks {', '.join(racks)}")
    return subject("loop", name, [part], ms, labels)


def _steady_readings(
    series: dict[str, list[float | None]], heat: list[float | None], total: Aggregate, steady: list[int]
) -> list[Measurement]:
    """Steady-window medians: supply, return, flow, heat removed and the electrical load, the last two
    over the time points that hold both."""
    both = [i for i in steady if heat[i] is not None and total.values[i] is not None]
    removed = steady_median(heat, both) if both else None
    load_w = steady_median(total.values, both) if both else None
    return [measure("loop_supply_c", steady_median(series["supply_c"], steady), "C"),
            measure("loop_return_c", steady_median(series["return_c"], steady), "C"),
            measure("loop_flow_lpm", steady_median(series["flow_lpm"], steady), "L/min"),
            measure("loop_heat_removed_w", removed, "W"), measure("loop_power_w", load_w, "W")]  # fmt: skip


def _capture(
    series: dict[str, list[float | None]], heat: list[float | None], total: Aggregate, data: SoakData, what: str
) -> tuple[list[Measurement], Part]:
    """Heat carried by the liquid against the electrical load of the loop's racks, at the steady window."""
    ms = _steady_readings(series, heat, total, data.times.steady)
    supply, ret, flow, removed, load_w = (m.value for m in ms)
    gaps = total.gaps(data.thresholds, "the loop's electrical load")
    if removed is None or not load_w:
        return ms, (ERROR, gaps or "no steady time point with both coolant and node power readings")
    said = (f"liquid removes {kw(removed)} (flow {flow or 0:.0f} L/min, supply {supply or 0:.1f} C, return "
            f"{ret or 0:.1f} C, {what}) of the {'at least ' if gaps else ''}{kw(load_w)} the nodes draw, "
            f"{data.times.describe_steady()}")  # fmt: skip
    if removed <= 0:
        return ms, (ERROR, f"{said}: return not warmer than supply under load (sensors swapped or not reading)")
    rm = measure("loop_capture_ratio", removed / load_w, "")
    ms.append(rm)
    return ms, _capture_part(rm, said, gaps, data.thresholds)


def _capture_part(rm: Measurement, said: str, gaps: str, t: SoakThresholds) -> Part:
    ratio = rm.value or 0.0
    if ratio > t.max_capture_plausible and not gaps:
        return (ERROR, f"{said}: {ratio:.0%} of the load is more than the loop can take from these "
                f"racks (> {t.max_capture_plausible:.0%}): load outside the model, or misreading")  # fmt: skip
    if t.dlc_capture_min is None:
        return (WARN, f"{said} ({ratio:.0%}): not judged (no dlc_capture_min)")
    rm.threshold, rm.ok = f">= {t.dlc_capture_min:g}", ratio >= t.dlc_capture_min
    if rm.ok and gaps:
        rm.threshold, rm.ok = "", None
        return (ERROR, gaps)
    if rm.ok:
        return (PASS, f"{said}: captures {ratio:.0%}, at least {t.dlc_capture_min:.0%}")
    return (FAIL, f"{said}: captures only {ratio:.0%}, below the {t.dlc_capture_min:.0%} DLC must remove "
            f"(low coolant flow or a loop problem)")  # fmt: skip


# --- charts --------------------------------------------------------------------------------------


@dataclass
class SoakCharts:
    """What the capacity page and the certificate draw: the cluster's power per time point (over the
    nodes with usable readings; None where one of them has no reading), each rack's time-aligned
    series and peak, and the nodes left out (host -> why)."""

    cluster: Series
    racks: dict[str, Series]
    rack_peaks_w: dict[str, float]
    rack_peak_t: dict[str, float]
    left_out: dict[str, str]


def soak_charts(facility: object, samples: object, thresholds: SoakThresholds | None = None) -> SoakCharts | str:
    """The chart series of a soak, or why there are none (no usable time base)."""
    data = load(facility, samples, thresholds or SoakThresholds())
    if isinstance(data, str):
        return data
    x = [v - data.times.t[0] for v in data.times.t]
    usable = sorted(data.power)
    cluster = Series("cluster_power_w", "W", x, data.total(usable).values)
    racks, peaks, peak_t = {}, {}, {}
    for rack in sorted(data.racks):
        total = data.total([h for h in data.in_racks([rack]) if h in data.power])
        if not total.hosts:
            continue
        racks[rack] = Series("rack_power_w", "W", x, total.values, labels={"rack": rack})
        if (peak := total.peak()) is not None:
            peaks[rack], peak_t[rack] = peak[0], x[peak[1]]
    return SoakCharts(cluster, racks, peaks, peak_t, dict(data.power_problem))

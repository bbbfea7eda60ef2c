"""The heat soak's electrical distribution (checks/soak/judge.py calls these): each PDU phase's
peak current against 80% of its breaker, phase imbalance of 3-phase PDUs, and the A/B failover case.

A phase's current is the PDU's own reading where the soak sampled it (samples["phase_current_a"]),
else derived from the facility model: the time-aligned sum of node power x share over the nodes
mapped to that phase, divided by the phase-to-neutral voltage and the power factor.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from checks.core.base import ERROR, FAIL, PASS, Measurement
from checks.soak.data import (
    Aggregate,
    Part,
    SoakData,
    SoakFinding,
    Values,
    checked,
    kw,
    mapping,
    measure,
    positive,
    rows,
    steady_median,
    subject,
)
from checks.soak.physics import (
    MAX_PHASE_CURRENT_A,
    continuous_limit_a,
    feed_capacity_w,
    phase_current_a,
    phase_deviations,
)

# A node's feed shares must add up to 1 (all of its power is on some PDU). 0.02 tolerates shares the
# facility model rounded to two decimals (6 x 0.17 = 1.02); a real gap (one PSU unmapped) is 1/6 or more.
SHARE_SUM_TOLERANCE = 0.02 + 1e-9  # + 1e-9: the float sum of 6 x 0.17 is just over 1.02
# The facility model and a measured phase disagree by more than this share of the derived current:
# the reason says so (mis-cabling, or load the model does not know, such as switches on the PDU).
# A note only: the phase is judged on its measured current. Kiln convention.
MODEL_MISMATCH_FRAC = 0.25


@dataclass
class FeedMap:
    """The facility model's feeds: (pdu, phase) -> {host: share}, and what is wrong with it."""

    shares: dict[tuple[str, int], dict[str, float]] = field(default_factory=dict)
    node_problem: dict[str, str] = field(default_factory=dict)  # host -> why its mapping is unusable
    pdu_problem: dict[str, list[str]] = field(default_factory=dict)  # pdu -> rows that name it wrongly


def _phase_count(pdu: dict[str, Any]) -> int | None:
    phases = pdu.get("phases")
    return phases if phases in (1, 3) and not isinstance(phases, bool) else None


def _row_problem(host: str, pdu: str, phase: object, raw_share: object, pdus: dict, hosts: dict) -> str:
    """What is wrong with one feed row, or ""."""
    if host not in hosts:
        return f"a feed names node {host!r}, not a node of the soak"
    if pdu not in pdus:
        return f"fed from PDU {pdu!r}, which is not in the facility model"
    # A PDU without a valid phase count is that PDU's error (its phases say so), not the node's.
    count, share = _phase_count(pdus[pdu]) or 3, positive(raw_share)
    if isinstance(phase, bool) or not (isinstance(phase, int) and 1 <= phase <= count) or share is None or share > 1:
        return f"its feed on PDU {pdu} is malformed (phase {phase!r}, share {raw_share!r})"
    return ""


def feed_map(facility: object, data: SoakData) -> FeedMap:
    """Read facility['feeds'] against the PDUs and the soak's nodes."""
    pdus = {str(p.get("name")): p for p in rows(facility, "pdus")}
    out, totals = FeedMap(), dict.fromkeys(data.hosts, 0.0)
    for row in rows(facility, "feeds"):
        host, pdu, phase, share = (
            str(row.get("node")),
            str(row.get("pdu")),
            row.get("phase"),
            positive(row.get("share")),
        )
        why = _row_problem(host, pdu, phase, row.get("share"), pdus, totals)
        if why and pdu in pdus:
            out.pdu_problem.setdefault(pdu, []).append(f"node {host}: {why}")
        if why and host in totals:
            out.node_problem[host] = why
        if not why and isinstance(phase, int) and share is not None:
            out.shares.setdefault((pdu, phase), {})[host] = share
            totals[host] += share
    fed_racks = {str(p.get("rack")) for p in pdus.values()}
    for host, total in totals.items():
        if total == 0 and data.rack_of.get(host) not in fed_racks:
            continue  # no PDU modelled in its rack: nothing to map it to
        if host not in out.node_problem and abs(total - 1.0) > SHARE_SUM_TOLERANCE:
            what = "no PDU feed in the facility model" if total == 0 else f"feed shares add up to {total:g}, not 1"
            out.node_problem[host] = what
    return out


# --- PDU phases ----------------------------------------------------------------------------------


@dataclass
class _Phase:
    """One phase being judged: its subject parts and measurements, and its steady current."""

    name: str
    labels: dict[str, str]
    parts: list[Part] = field(default_factory=list)
    measurements: list[Measurement] = field(default_factory=list)
    steady_a: float | None = None


def judge_pdus(facility: object, samples: object, data: SoakData, feeds: FeedMap) -> list[SoakFinding]:
    measured = mapping(samples.get("phase_current_a") if isinstance(samples, dict) else None)
    findings: list[SoakFinding] = []
    for pdu in rows(facility, "pdus"):
        findings += _judge_pdu(pdu, measured, data, feeds)
    return findings


def _judge_pdu(pdu: dict[str, Any], measured: dict[str, Any], data: SoakData, feeds: FeedMap) -> list[SoakFinding]:
    name, count = str(pdu.get("name")), _phase_count(pdu)
    labels = {"pdu": name, "rack": str(pdu.get("rack", "")), "feed": str(pdu.get("feed", ""))}
    if count is None:
        return [subject("pdu_phase", name, [(ERROR, f"phases must be 1 or 3, got {pdu.get('phases')!r}")], [], labels)]
    phases = [_Phase(f"{name} phase {k}", {**labels, "phase": str(k)}) for k in range(1, count + 1)]
    config = _config_problems(pdu, count, feeds.pdu_problem.get(name, []))
    readings = measured.get(name)
    for k, phase in enumerate(phases, start=1):
        phase.parts += [(ERROR, why) for why in config]
        _judge_current(phase, pdu, k, readings, data, feeds)
    if count == 3:
        _judge_imbalance(phases, data.thresholds.phase_imbalance_max)
    return [subject("pdu_phase", p.name, p.parts, p.measurements, p.labels) for p in phases]


def _config_problems(pdu: dict[str, Any], count: int, feed_rows: list[str]) -> list[str]:
    problems = [f"feed must be A or B, got {pdu.get('feed')!r}"] if pdu.get("feed") not in ("A", "B") else []
    if positive(pdu.get("voltage_v")) is None:
        problems.append(f"no nominal voltage configured (voltage_v {pdu.get('voltage_v')!r})")
    breakers = pdu.get("breaker_a")
    if not isinstance(breakers, (list, tuple)) or len(breakers) != count:
        problems.append(f"breaker_a must list one rating per phase ({count}), got {breakers!r}")
    problems += feed_rows[:3]
    return problems


def _breaker(pdu: dict[str, Any], k: int) -> float | None:
    breakers = pdu.get("breaker_a")
    return positive(breakers[k - 1]) if isinstance(breakers, (list, tuple)) and len(breakers) >= k else None


def _derived(pdu: dict[str, Any], k: int, data: SoakData, feeds: FeedMap) -> Aggregate | None:
    """Phase k's current from the model (A per time point), or None when the PDU has no voltage."""
    voltage = positive(pdu.get("voltage_v"))
    if voltage is None:
        return None
    per_amp = phase_current_a(1.0, voltage, data.thresholds.power_factor)
    shares = feeds.shares.get((str(pdu.get("name")), k), {})
    agg = data.total(list(shares), {h: s * per_amp for h, s in shares.items()})
    rack = str(pdu.get("rack", ""))
    for host in data.in_racks([rack]):
        if host in feeds.node_problem:
            agg.missing[host] = feeds.node_problem[host]
    return agg


def _judge_current(
    phase: _Phase, pdu: dict[str, Any], k: int, readings: object, data: SoakData, feeds: FeedMap
) -> None:
    """Phase k's peak current against the continuous-load limit of its breaker."""
    t = data.thresholds
    derived = _derived(pdu, k, data, feeds)
    if readings is not None:
        series = mapping(readings)
        values, why = checked(series.get(str(k)), data.times, f"measured phase {k} current", "A", MAX_PHASE_CURRENT_A)
        if why:
            phase.parts.append((ERROR, why))
            return
        source, gaps = "measured by the PDU", ""
    elif pdu.get("has_endpoint"):
        phase.parts.append((ERROR, "the PDU has an endpoint but the soak holds no phase current readings from it"))
        return
    elif derived is None or (not derived.hosts and not derived.missing):
        phase.parts.append((ERROR, f"no measured current and no node mapped to phase {k} to derive it from"))
        return
    else:
        values = derived.values
        source = f"derived from node power x share / {pdu.get('voltage_v'):g} V / PF {t.power_factor:g}"
        gaps = derived.gaps(t, "derived current")
    phase.steady_a = steady_median(values, data.times.steady) if not gaps else None
    phase.parts.append(_current_part(phase, values, _breaker(pdu, k), source, gaps, data))
    if readings is not None and derived is not None and not derived.missing:
        phase.parts += _model_note(values, derived, data)


def _current_part(phase: _Phase, values: Values, breaker: float | None, source: str, gaps: str, data: SoakData) -> Part:
    found = [(v, i) for i, v in enumerate(values) if v is not None]
    peak = max(found, key=lambda p: p[0]) if found else None
    m = measure("phase_peak_current_a", peak[0] if peak else None, "A")
    phase.measurements.append(m)
    if breaker is None:
        return (ERROR, "no breaker rating configured for this phase")
    if peak is None:
        return (ERROR, gaps or "no current readings")
    frac = data.thresholds.breaker_continuous_frac
    limit = continuous_limit_a(breaker, frac)
    m.threshold, m.ok = f"<= {limit:g} A", peak[0] <= limit
    at = f" at t={data.times.t[peak[1]] - data.times.t[0]:g} s"
    said = f"peak {peak[0]:.1f} A{at} ({source})"
    rule = f"{frac:.0%} of its {breaker:g} A breaker ({limit:.1f} A, continuous-load rule)"
    if not m.ok:
        return (FAIL, f"{'at least ' if gaps else ''}{said} above {rule}")
    if gaps:
        m.ok, m.threshold = None, ""
        return (ERROR, gaps)
    return (PASS, f"{said} within {rule}")


def _model_note(measured: Values, derived: Aggregate, data: SoakData) -> list[Part]:
    """A pass-level note when the PDU's reading and the model's feeds disagree at the steady window."""
    have, model = steady_median(measured, data.times.steady), derived.steady(data.times.steady)
    if have is None or model is None or abs(have - model) <= MODEL_MISMATCH_FRAC * model:
        return []
    return [(PASS, f"the facility model's feeds imply {model:.1f} A at steady, not {have:.1f} A: cabling "
             "(or load the model does not know) differs from the model")]  # fmt: skip


def _judge_imbalance(phases: list[_Phase], limit: float | None) -> None:
    """The largest deviation from the mean steady phase current, judged on the phase that deviates most."""
    currents = {p.labels["phase"]: p.steady_a for p in phases}
    known = {k: v for k, v in currents.items() if v is not None}
    deviations = phase_deviations(known) if len(known) == len(phases) else None
    if deviations is None:
        return
    mean = sum(known.values()) / len(known)
    worst = max(phases, key=lambda p: abs(deviations[p.labels["phase"]]))
    imbalance = abs(deviations[worst.labels["phase"]])
    for p in phases:
        p.measurements.append(measure("phase_deviation", deviations[p.labels["phase"]], ""))
    listed = ", ".join(f"L{k} {v:.1f} A" for k, v in sorted(known.items()))
    said = f"phase imbalance {imbalance:.0%} (steady currents {listed}; mean {mean:.1f} A)"
    if limit is None:
        worst.parts.append((PASS, f"{said}: not judged (no phase_imbalance_max)"))
        return
    m = measure("pdu_phase_imbalance", imbalance, "", threshold=f"<= {limit:g}", ok=imbalance <= limit)
    worst.measurements.append(m)
    if m.ok:
        worst.parts.append((PASS, f"{said} within {limit:.0%}"))
    else:
        worst.parts.append((FAIL, f"{said} above {limit:.0%}: phase {worst.labels['phase']} deviates most"))


# --- A/B feeds -----------------------------------------------------------------------------------


def judge_feeds(facility: object, data: SoakData) -> list[SoakFinding]:
    """For each rack with PDUs on both feeds: can feed A alone, and feed B alone, carry its peak?"""
    by_rack: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for pdu in rows(facility, "pdus"):
        if pdu.get("feed") in ("A", "B"):
            by_rack.setdefault(str(pdu.get("rack")), {}).setdefault(str(pdu["feed"]), []).append(pdu)
    findings: list[SoakFinding] = []
    for rack, feeds in sorted(by_rack.items()):
        hosts = data.in_racks([rack])
        if len(feeds) < 2 or not hosts:
            continue
        total = data.total(hosts)
        for feed in ("A", "B"):
            findings.append(_judge_feed(rack, feed, feeds[feed], total, data))
    return findings


def _feed_circuits(pdus: list[dict[str, Any]]) -> tuple[list[tuple[float, list[float]]], list[str]]:
    """(voltage, breakers) of each PDU on a feed, and the PDUs lacking a voltage, phase count or rating."""
    circuits, gaps = [], []
    for pdu in pdus:
        voltage, count = positive(pdu.get("voltage_v")), _phase_count(pdu)
        breakers = [b for k in range(1, (count or 0) + 1) if (b := _breaker(pdu, k)) is not None]
        if voltage is None or count is None or len(breakers) != count:
            gaps.append(str(pdu.get("name")))
        else:
            circuits.append((voltage, breakers))
    return circuits, gaps


def _judge_feed(rack: str, feed: str, pdus: list[dict[str, Any]], total: Aggregate, data: SoakData) -> SoakFinding:
    t = data.thresholds
    labels = {"rack": rack, "feed": feed, "pdu": ",".join(str(p.get("name")) for p in pdus)}
    circuits, gaps = _feed_circuits(pdus)
    if gaps:
        why = f"capacity unknown: PDU {', '.join(gaps)} lacks a voltage, phase count or breaker rating"
        return subject("feed", f"{rack} feed {feed}", [(ERROR, why)], [], labels)
    capacity = feed_capacity_w(circuits, t.breaker_continuous_frac, t.power_factor)
    peak, problem = total.peak(), total.gaps(t, "the rack's peak")
    m = measure("feed_capacity_w", capacity, "W")
    if peak is None:
        return subject("feed", f"{rack} feed {feed}", [(ERROR, problem or "the rack's peak is unknown")], [m], labels)
    m.threshold, m.ok = f">= {peak[0]:.0f} W", capacity >= peak[0]
    how = f"feed {feed} alone ({len(pdus)} PDU, {t.breaker_continuous_frac:.0%} of breakers, PF {t.power_factor:g})"
    said = f"{how} carries {kw(capacity)}; the rack's peak is {'at least ' if problem else ''}{kw(peak[0])}"
    if not m.ok:
        part: Part = (FAIL, f"{said}: the rack would trip on losing feed {'B' if feed == 'A' else 'A'}")
    elif problem:
        m.ok, m.threshold = None, ""
        part = (ERROR, problem)
    else:
        part = (PASS, said)
    return subject("feed", f"{rack} feed {feed}", [part], [m], labels)

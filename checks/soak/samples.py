"""The heat soak's samples, assembled from what every node and the facility sampler printed
(checks/soak/check.py runs them; checks/soak/judge.py judges the result).

Every node's probe starts sampling at the common start (`--start-at`), so its `t` counts seconds
from the same instant on every node (up to the nodes' clock offsets, which NTP keeps to
milliseconds). Readings are put on one grid of `interval_s` steps: a reading lands on the grid
point nearest to it when it is within half a step; a grid point with no reading stays None (no
evidence, never zero or a neighbour's value).

Facility endpoints are read by the worker (worker/redfish.py) with the readers declared here, and
arrive as one readings document (checks/core/fanout.py FACILITY_LABEL):
    {"schema": 1, "endpoints": [{"kind": "pdu"|"loop", "name", "t": [s], "readings": {key: [value|None]},
                                 "errors": [why], "requests": n}]}
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from checks.core.base import CommandOutput, EvidenceError
from checks.core.fanout import FACILITY_SCHEMA, FacilityReader, Readings
from checks.core.sampling import SamplingDoc, load_sampling
from checks.power.facility import parse_redfish_cdu, parse_redfish_pdu

Values = list[float | None]
PHASES = {"L1": "1", "L2": "2", "L3": "3"}
LOOP_KEYS = {"coolant_supply_c": "supply_c", "coolant_return_c": "return_c", "coolant_flow_lpm": "flow_lpm"}


def read_pdu(texts: list[str]) -> Readings:
    """A RackPDU's Mains circuits -> phase current per phase ("1".."3"), summed over the circuits
    (a PDU with two inlets); a phase any circuit could not report is None."""
    totals: dict[str, float | None] = {}
    for text in texts:
        for m in parse_redfish_pdu(text).measurements:
            phase = PHASES.get(m.labels.get("phase", ""))
            if m.name != "phase_current_a" or phase is None:
                continue
            before = totals.get(phase, 0.0)
            totals[phase] = None if m.value is None or before is None else before + m.value
    return totals


def read_loop(texts: list[str]) -> Readings:
    """A CDU's primary coolant connectors -> supply_c, return_c, flow_lpm of the first connector
    that reports all three (the others are redundant pumps or sensors of the same loop)."""
    for text in texts:
        found = {LOOP_KEYS[m.name]: m.value for m in parse_redfish_cdu(text).measurements if m.name in LOOP_KEYS}
        if len(found) == len(LOOP_KEYS) and all(v is not None for v in found.values()):
            return found
    return dict.fromkeys(LOOP_KEYS.values())


FACILITY_READERS = {
    # DSP0268 PowerDistribution: a RackPDU's incoming circuits are the members of "Mains".
    "pdu": FacilityReader(link="Mains", read=read_pdu),
    # DSP0268 CoolingUnit: the facility-side (primary) loop's connectors.
    "loop": FacilityReader(link="PrimaryCoolantConnectors", read=read_loop),
}


def grid(duration_s: float, interval_s: float) -> list[float]:
    count = max(1, math.floor(duration_s / interval_s + 1e-9))
    return [round(k * interval_s, 6) for k in range(count)]


def on_grid(points: list[tuple[float, float | None]], n: int, interval_s: float) -> Values:
    """Readings placed on the grid (see the module docstring); the first reading of a point wins."""
    values: Values = [None] * n
    taken = [False] * n
    for t, value in points:
        if not math.isfinite(t):
            continue
        k = round(t / interval_s)
        if 0 <= k < n and abs(t - k * interval_s) <= interval_s / 2 and not taken[k]:
            values[k], taken[k] = value, True
    return values


@dataclass
class Assembled:
    """The judge's samples, and per node why its readings could not be used (host -> why)."""

    samples: dict[str, Any]
    problems: dict[str, str] = field(default_factory=dict)
    docs: dict[str, SamplingDoc] = field(default_factory=dict)


def gpu_sum(doc: SamplingDoc) -> list[tuple[float, float | None]]:
    """Per sample, the sum of every GPU's power; None when any GPU has no reading then."""
    gpus = doc.gpu_indices()
    columns = [doc.values(g, "power_w") for g in gpus]
    if not columns:
        return []
    sums: list[tuple[float, float | None]] = []
    for row in zip(*columns, strict=True):
        readings = [v for _, v in row]
        sums.append(
            (row[0][0], None if any(v is None for v in readings) else sum(v for v in readings if v is not None))
        )
    return sums


def node_problem(outputs: list[CommandOutput]) -> str:
    """Why a node's output cannot be read at all, or ""."""
    if not outputs:
        return "nothing ran"
    out = outputs[0]
    if out.exit_code is None and not out.stdout:
        last = [line.strip() for line in out.stderr.splitlines() if line.strip()]
        return last[-1][:200] if last else "no exit code (connection lost?)"
    if out.timed_out:
        return f"the soak did not end within {out.command.timeout:g} s"
    return ""


def assemble(
    per_node: dict[str, list[CommandOutput]], facility: list[CommandOutput], interval_s: float, duration_s: float
) -> Assembled:
    """The samples dict of checks/soak/judge.py from the nodes' and the facility's outputs."""
    t = grid(duration_s, interval_s)
    out = Assembled({"t": t, "node_power_w": {}, "gpu_power_w": {}, "gpu_count": {}})
    for host, outputs in sorted(per_node.items()):
        why = node_problem(outputs)
        if not why:
            try:
                doc = load_sampling(outputs[:1])
            except EvidenceError as exc:
                why = str(exc)
            except (RecursionError, ValueError, TypeError) as exc:  # hostile JSON (deep nesting): this node's
                why = f"its output could not be read ({type(exc).__name__})"
        if why:
            out.problems[host] = why
            continue
        out.docs[host] = doc
        out.samples["node_power_w"][host] = on_grid(doc.node_power(), len(t), interval_s)
        out.samples["gpu_power_w"][host] = on_grid(gpu_sum(doc), len(t), interval_s)
        out.samples["gpu_count"][host] = len(doc.gpu_indices())
    phases, loops = facility_samples(facility, len(t), interval_s)
    out.samples["phase_current_a"], out.samples["loops"] = phases, loops
    return out


def facility_samples(facility: list[CommandOutput], n: int, interval_s: float) -> tuple[dict[str, Any], dict[str, Any]]:
    """PDU phase currents and loop readings on the grid, from the sampler's readings document."""
    phases: dict[str, Any] = {}
    loops: dict[str, Any] = {}
    for endpoint in facility_endpoints(facility):
        times = endpoint.get("t")
        readings = endpoint.get("readings")
        if not isinstance(times, list) or not isinstance(readings, dict):
            raise EvidenceError(f"facility readings of {endpoint.get('name')!r}: no time base or readings")
        into = phases if endpoint.get("kind") == "pdu" else loops
        into[str(endpoint.get("name"))] = {
            str(key): on_grid(_points(times, values, endpoint, key), n, interval_s) for key, values in readings.items()
        }
    return phases, loops


def _points(
    times: list[Any], values: object, endpoint: dict[str, Any], key: object
) -> list[tuple[float, float | None]]:
    if not isinstance(values, list) or len(values) != len(times):
        raise EvidenceError(f"facility readings of {endpoint.get('name')!r}: {key!r} is not one reading per time")
    points: list[tuple[float, float | None]] = []
    for t, v in zip(times, values, strict=True):
        if not _number(t) or not (v is None or _number(v)):
            raise EvidenceError(f"facility readings of {endpoint.get('name')!r}: {key!r} holds {v!r:.30} at {t!r:.30}")
        points.append((float(t), None if v is None else float(v)))
    return points


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def facility_endpoints(facility: list[CommandOutput]) -> list[dict[str, Any]]:
    """The endpoints of the sampler's readings document(s); none when nothing was sampled."""
    found: list[dict[str, Any]] = []
    for out in facility:
        try:
            doc = json.loads(out.stdout)
        except ValueError as exc:
            raise EvidenceError(f"facility readings are not JSON ({exc})") from None
        if (
            not isinstance(doc, dict)
            or doc.get("schema") != FACILITY_SCHEMA
            or not isinstance(doc.get("endpoints"), list)
        ):
            raise EvidenceError(f"facility readings: not a schema {FACILITY_SCHEMA} readings document")
        found += [e for e in doc["endpoints"] if isinstance(e, dict)]
    return found


def facility_errors(facility: list[CommandOutput]) -> dict[str, list[str]]:
    """Per endpoint, what the sampler could not read (for the reasons)."""
    return {str(e.get("name")): [str(x) for x in e.get("errors") or []][:3] for e in facility_endpoints(facility)}

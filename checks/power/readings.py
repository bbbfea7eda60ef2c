"""Node power readings from the BMC, in band over SSH: parsers `ipmitool_dcmi_power` and
`ipmitool_sdr_power`, plus what every power and cooling parser shares (the impossible-evidence
rules and the Redfish document helpers of checks/power/redfish.py, which holds `redfish_power`,
`redfish_pdu` and `redfish_cdu`). No check judges these yet: the `power-soak` group check reads
them and declares `evidence = EVIDENCE`.

`ipmitool_dcmi_power` (`ipmitool dcmi power reading`, DCMI 1.5 "Get Power Reading"):
  power_w, power_w_min, power_w_max, power_w_avg   W   the whole node's input power
  sampling_period_s                                s   the window of min/max/avg
  power_reading_state                              text "activated" / "deactivated"
  A BMC whose reading state is "deactivated" has no power measurement (DCMI 1.5 table 6-16,
  power reading state bit 6 clear), whatever numbers it prints next to it: OpenBMC printed
  319 W (openbmc/openbmc#3257) or 0 W (openbmc/phosphor-host-ipmid#167) with that state. Each
  number is then recorded as value None with `labels["missing"]` saying so and
  `labels["reported"]` keeping what the tool printed: never a reading a threshold can pass.
  An output without the closing "Power reading state is:" line was cut: EvidenceError.

`ipmitool_sdr_power` (`ipmitool sdr [elist|type ...]` or `ipmitool sensor`, where DCMI is absent):
  psu_input_w    W    a power supply's input sensor, labels psu (the sensor name), status
  psu_output_w   W    a power supply's output sensor (name says out / output / POUT)
  power_w        W    any other watt sensor (Dell "Pwr Consumption", "System Level"), labels sensor
  psu_status     text a power supply's discrete state ("Presence detected, Power Supply AC lost")
  A sensor with state "ns" or no reading ("No Reading", "Not Readable", "disabled", "na") is left
  out and named in the warnings; an output with no power sensor at all is EvidenceError.

Every measurement that breaks a rule of `EVIDENCE` (or of its unit, checks/core/evidence.py) keeps
its value and gets `labels["invalid"]` naming why, as `parse_output` does for NaN and inf: a
negative watt, a 10 kV phase. The public `parse_*` functions return `Parsed` (measurements and
warnings), exactly what `python -m checks parse KIND FILE` prints.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from checks.core import evidence
from checks.core.base import EvidenceError, Measurement
from checks.core.evidence import Rule
from checks.core.parsers import Parsed, load_json, register_parser

# The parser kinds of this family (checks/power/readings.py, checks/power/redfish.py,
# checks/power/facility.py). No check judges them yet (`python -m checks judge` refuses them);
# the power-soak group check will, through checks/core/raw_outputs.py.
POWER_KINDS = ("ipmitool_dcmi_power", "ipmitool_sdr_power", "redfish_power", "redfish_pdu", "redfish_cdu")

# 10 kA: above the largest low-voltage busbar there is (IEC 61439 switchgear frames stop at
# 6,300 A, e.g. ABB Emax 2 E6.2), so no rack PDU, branch, outlet or floor PDU reads more.
MAX_CURRENT_A = 10_000.0
# 1,000 V AC is where low voltage ends (IEC 60038); PDUs and server PSUs are low-voltage equipment.
MAX_VOLTAGE_V = 1_000.0
# 100 MW: forty times the largest liquid-to-liquid CDUs sold (about 2.3-2.5 MW, e.g. Vertiv
# CoolChip CDU 2300); a facility's whole heat load, not one unit's. The W unit rule (1 MW,
# checks/core/evidence.py) would wrongly refuse a real multi-megawatt CDU.
MAX_HEAT_W = 1e8
# 1e6 L/min: ~350x the flow of such a CDU (2.5 MW at a 10 K rise in water is about 60 kg/s,
# ~3,600 L/min: Q = m * cp * dT with cp 4.18 kJ/(kg K)).
MAX_FLOW_LPM = 1e6
# 20 MVA: a large data-centre hall transformer; a rack PDU is 5-60 kVA (the real Enlogic EN6850
# in tests/fixtures/power is 22 kVA), a floor PDU a few hundred kVA.
MAX_APPARENT_VA = 2e7

CURRENT = Rule("a current", low=0.0, high=MAX_CURRENT_A)
VOLTAGE = Rule("a voltage", low=0.0, high=MAX_VOLTAGE_V)
HEAT = Rule("a heat flow", low=0.0, high=MAX_HEAT_W)
FLOW = Rule("a liquid flow", low=0.0, high=MAX_FLOW_LPM)
PERCENT = Rule("a percentage", low=0.0, high=100.0)
# Coolant density: 500-2,500 kg/m3 spans every data-centre coolant, from water (997) and PG25
# (~1,020) to the heaviest fluorinated immersion fluids (~1,800, 3M Fluorinert FC-43 datasheet).
DENSITY = Rule("a coolant density", low=500.0, high=2_500.0)
# Specific heat: 0.5-5 kJ/(kg K); water's 4.18 is the highest of any practical coolant,
# fluorinated fluids are ~1.1 (same datasheets).
SPECIFIC_HEAT = Rule("a coolant specific heat", low=0.5, high=5.0)

# By measurement name; a name not here falls back on its unit's rule (W, C, s: checks/core/evidence.py).
EVIDENCE: dict[str, Rule] = {
    "heat_removal_w": HEAT,
    "cooling_capacity_w": HEAT,
    "coolant_flow_lpm": FLOW,
    "rated_flow_lpm": FLOW,
    "coolant_density_kg_m3": DENSITY,
    "coolant_specific_heat_kj_kgk": SPECIFIC_HEAT,
    "pdu_capacity_va": Rule("an apparent power", low=0.0, high=MAX_APPARENT_VA),
    "humidity_pct": PERCENT,
    "pump_speed_pct": PERCENT,
    **{
        name: CURRENT
        for name in (
            "phase_current_a",
            "neutral_current_a",
            "current_a",
            "outlet_current_a",
            "rated_current_a",
            "psu_input_a",
        )
    },
    **{name: VOLTAGE for name in ("phase_voltage_v", "line_voltage_v", "voltage_v", "outlet_voltage_v", "psu_input_v")},
}


def measure(name: str, value: float | None, unit: str, **labels: str) -> Measurement:
    return Measurement(name=name, value=value, unit=unit, labels={k: v for k, v in labels.items() if v != ""})


def missing(name: str, unit: str, why: str, **labels: str) -> Measurement:
    """A fact the source should have carried and did not: value None, `labels["missing"]`."""
    return measure(name, None, unit, missing=why, **labels)


def fact(name: str, text: str, **labels: str) -> Measurement:
    return Measurement(name=name, text=text, labels={k: v for k, v in labels.items() if v != ""})


def flag_impossible(measurements: Iterable[Measurement]) -> int:
    """`labels["invalid"]` on every value that breaks its rule (EVIDENCE, else its unit's); how many."""
    flagged = 0
    for m in measurements:
        why = evidence.check_value(m, EVIDENCE)
        if why and "invalid" not in m.labels:
            m.labels["invalid"] = why
            flagged += 1
    return flagged


def finish(what: str, out: list[Measurement], warnings: list[str]) -> Parsed:
    """The parse result, impossible values flagged; no measurement at all is EvidenceError."""
    if not out:
        why = f": {'; '.join(warnings[:3])}" if warnings else ""
        raise EvidenceError(f"{what} holds no power or cooling reading{why}")
    flag_impossible(out)
    return Parsed(out, warnings)


def number(value: Any) -> float | None:
    """A JSON number (or a numeric string, as some BMCs send) as float; None for null/absent/text."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


# --- ipmitool dcmi power reading -----------------------------------------------------------------

# ipmitool lib/ipmi_dcmi.c ipmi_dcmi_pwr_rd: these four lines, the timestamp, the sampling period
# ("%08u Seconds." or, with sample_time, "5 sec"/"1 min"...), then the state line. Some builds
# print the timestamp without its newline, so "Sampling period:" can follow it on the same line.
_DCMI_FIELDS = (
    ("power_w", "Instantaneous power reading"),
    ("power_w_min", "Minimum during sampling period"),
    ("power_w_max", "Maximum during sampling period"),
    ("power_w_avg", "Average power reading over sample period"),
)
_DCMI_PERIOD = re.compile(r"Sampling period:[ \t]*(\S+)[ \t]*(seconds?|sec|min|minutes?|hours?|hr|days?)\b", re.I)
_DCMI_STATE = re.compile(r"Power reading state is:[ \t]*(\w+)")
_PERIOD_SECONDS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def _dcmi_number(text: str, label: str) -> float | None:
    found = re.search(rf"{re.escape(label)}:[ \t]*(\S+)[ \t]*Watts", text)
    if found is None:
        return None
    value = number(found.group(1))
    if value is None:
        raise EvidenceError(f"ipmitool dcmi '{label}' is not a number: {found.group(1)[:40]!r}")
    return value


def _dcmi_period(text: str) -> float | None:
    found = _DCMI_PERIOD.search(text)
    if found is None:
        return None
    value = number(found.group(1))
    if value is None:
        raise EvidenceError(f"ipmitool dcmi 'Sampling period' is not a number: {found.group(1)[:40]!r}")
    return value * _PERIOD_SECONDS[found.group(2)[0].lower()]


@register_parser("ipmitool_dcmi_power")
def parse_ipmitool_dcmi_power(text: str) -> Parsed:
    """`ipmitool dcmi power reading` -> power_w, power_w_min/max/avg (W), sampling_period_s (s),
    power_reading_state (text); a deactivated reading's numbers are recorded as missing."""
    values = {name: _dcmi_number(text, label) for name, label in _DCMI_FIELDS}
    if all(v is None for v in values.values()):
        first = next((line.strip() for line in text.splitlines() if line.strip()), "")
        raise EvidenceError(f"no DCMI power reading in the output (first line: {first[:80]!r})")
    state = _DCMI_STATE.search(text)
    if state is None:
        raise EvidenceError(
            "ipmitool dcmi power reading output incomplete: the closing 'Power reading state is:' line is missing"
        )
    absent = [label for name, label in _DCMI_FIELDS if values[name] is None]
    if absent:
        raise EvidenceError(f"ipmitool dcmi power reading has no '{absent[0]}' line")
    values["sampling_period_s"] = _dcmi_period(text)
    word = state.group(1)
    if word != "activated":
        why = (
            f"Power reading state is: {word} (DCMI: no power measurement available; "
            "the number beside it is not a measurement)"
        )
        out = [_reported(name, value, why) for name, value in values.items()]
        warnings = [f"DCMI power reading state is {word}: no power measurement"]
    else:
        out = [
            missing(name, "s", "no 'Sampling period' line") if value is None else measure(name, value, _unit(name))
            for name, value in values.items()
        ]
        warnings = []
    out.append(fact("power_reading_state", word))
    return finish("ipmitool dcmi power reading", out, warnings)


def _unit(name: str) -> str:
    return "s" if name.endswith("_s") else "W"


def _reported(name: str, value: float | None, why: str) -> Measurement:
    shown = "absent" if value is None else f"{value:g} {_unit(name)}"
    return missing(name, _unit(name), why, reported=shown)


# --- ipmitool sdr / sensor ---------------------------------------------------------------------

_PSU_NAME = re.compile(r"\b(psu?|power ?supply)[ _-]?\d*\b", re.I)
_OUTPUT_NAME = re.compile(r"out|pout", re.I)
_POWER_NAME = re.compile(r"pwr|power|watt", re.I)
_NO_READING = frozenset({"no reading", "not readable", "disabled", "na", "n/a", ""})
_HEX_ID = re.compile(r"[0-9A-Fa-f]{1,4}h")


def _sdr_row(line: str) -> tuple[str, str, str, str] | None:
    """(name, reading, status, entity) of one row of `ipmitool sdr` (Name | Reading | Status),
    `sdr elist` or `sdr type` (Name | 52h | ok | 10.1 | Reading) or `ipmitool sensor` (Name |
    Value | Units | Status | thresholds...); entity is '' where the format has none. None for
    anything else."""
    parts = [p.strip() for p in line.split("|")]
    if len(parts) < 3 or not parts[0]:
        return None
    if len(parts) == 3:
        return parts[0], parts[1], parts[2], ""
    if len(parts) == 5 and _HEX_ID.fullmatch(parts[1]):
        return parts[0], parts[4], parts[2], parts[3]
    return parts[0], f"{parts[1]} {parts[2]}".strip(), parts[3], ""


def _sdr_measurement(name: str, reading: str, status: str, entity: str) -> Measurement | str | None:
    """A row's measurement, a warning (a power sensor without a reading), or None (not power).
    A power supply is known by its name or by its IPMI entity, 10.N ("power supply", IPMI 2.0
    table 43-13), which `sdr elist` prints: Dell names its PSU current sensors just "Current"."""
    watts = re.fullmatch(r"(\S+)\s+Watts", reading, re.I)
    psu = _PSU_NAME.search(name) is not None or entity.startswith("10.")
    if status.lower() == "ns" or reading.lower() in _NO_READING or (watts and number(watts.group(1)) is None):
        powerish = watts or psu or _POWER_NAME.search(name)
        return f"{name}: no reading (status {status or 'none'})" if powerish else None
    labels = {"status": status} if status.lower() not in ("ok", "") else {}
    if watts:
        value = number(watts.group(1))
        if not psu:
            return measure("power_w", value, "W", sensor=name, **labels)
        which = "psu_output_w" if _OUTPUT_NAME.search(name) else "psu_input_w"
        return measure(which, value, "W", psu=name, **labels)
    if psu and not re.fullmatch(r"-?[\d.]+\s+\S+", reading):
        return fact("psu_status", reading, psu=name, **labels)
    return None


@register_parser("ipmitool_sdr_power")
def parse_ipmitool_sdr_power(text: str) -> Parsed:
    """`ipmitool sdr`/`sdr elist`/`sdr type`/`sensor` -> psu_input_w, psu_output_w (labels psu),
    power_w (labels sensor), psu_status (text); sensors with no reading are left out and warned."""
    out: list[Measurement] = []
    warnings: list[str] = []
    rows = 0
    for line in text.splitlines():
        row = _sdr_row(line)
        if row is None:
            continue
        rows += 1
        found = _sdr_measurement(*row)
        if isinstance(found, str):
            warnings.append(found)
        elif found is not None:
            out.append(found)
    if not rows:
        raise EvidenceError("not ipmitool sdr or sensor output (no 'Name | ... | ...' rows)")
    if not any(m.value is not None for m in out):
        warnings.append(f"no power sensor in Watts among {rows} rows")
    if not out:
        raise EvidenceError(f"no power sensor or power supply state in {rows} ipmitool rows: {'; '.join(warnings[:3])}")
    return finish("ipmitool sdr output", out, warnings)


# --- Redfish document helpers (checks/power/redfish.py) -----------------------------------------


def redfish_document(text: str, what: str) -> dict[str, Any]:
    doc = load_json(text, what)
    if not isinstance(doc, dict):
        raise EvidenceError(f"{what} is not a JSON object")
    return doc


def odata_kind(doc: dict[str, Any]) -> str:
    """'#Power.v1_7_3.Power' -> 'Power', '#Power.v1_5_0.PowerSupply' -> 'PowerSupply'; '' if untyped."""
    kind = doc.get("@odata.type")
    return kind.rsplit(".", 1)[-1] if isinstance(kind, str) else ""


def reading(obj: dict[str, Any], key: str) -> float | None:
    """`obj[key]` as a number, whether a bare property (PowerConsumedWatts: 344) or an excerpt
    object ({"Reading": 42, "DataSourceUri": ...}); None when absent or null."""
    value = obj.get(key)
    if isinstance(value, dict):
        value = value.get("Reading")
    return number(value)


def state_of(item: dict[str, Any]) -> tuple[str, str]:
    """(Status.State, Status.Health), '' where absent."""
    status = item.get("Status")
    if not isinstance(status, dict):
        return "", ""
    return str(status.get("State") or ""), str(status.get("Health") or "")


def members(items: Any) -> list[dict[str, Any]]:
    """The dict members of a Redfish array that are present (State not 'Absent')."""
    if not isinstance(items, list):
        return []
    return [item for item in items if isinstance(item, dict) and state_of(item)[0] != "Absent"]


def absent_members(items: Any) -> list[dict[str, Any]]:
    """The dict members of a Redfish array whose Status.State is 'Absent': an empty bay or slot."""
    if not isinstance(items, list):
        return []
    return [item for item in items if isinstance(item, dict) and state_of(item)[0] == "Absent"]


def member_names(items: list[dict[str, Any]]) -> list[str]:
    """A label per member: its Name, else MemberId/Id, else its position; a Name shared by several
    members (HPE names every supply 'HpeServerPowerSupply') gets its MemberId appended."""
    names = [str(i.get("Name") or i.get("MemberId") or i.get("Id") or n) for n, i in enumerate(items)]
    out = []
    for n, (name, item) in enumerate(zip(names, items, strict=True)):
        if names.count(name) > 1:
            name = f"{name} {item.get('MemberId') or item.get('Id') or n}"
        out.append(name)
    return out


def resource_id(doc: dict[str, Any], collection: str) -> str:
    """The member of `collection` in the document's @odata.id ('/Chassis/1U/...' -> '1U'), else Id/Name."""
    link = doc.get("@odata.id")
    if isinstance(link, str):
        found = re.search(rf"/{collection}/([^/#]+)", link)
        if found:
            return found.group(1)
    return str(doc.get("Id") or doc.get("Name") or "")

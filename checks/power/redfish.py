"""Out-of-band power readings from Redfish documents (one GET's JSON body each),
detected by `@odata.type`. Shared rules and helpers: checks/power/readings.py. A reading the
document should carry and does not is value None with `labels["missing"]`; an empty bay or slot
(Status.State "Absent") is no reading and no failure of the document: it is recorded as the text
psu_state "Absent" (labels psu) and named in the warnings, so a bay the inventory expected full
shows as empty rather than vanishing. Units are converted to W, A, V, C, L/min and say so
in `labels["source_unit"]` when the source used another.

`redfish_power` (node):
  Power (legacy Chassis/{id}/Power): PowerControl[] -> power_w (PowerConsumedWatts),
    power_capacity_w, power_w_min/max/avg and sampling_period_s (PowerMetrics, IntervalInMin x 60),
    labels control (Name, else MemberId); PowerSupplies[] -> psu_input_w (PowerInputWatts),
    psu_output_w (PowerOutputWatts, else LastPowerOutputWatts with labels source), psu_capacity_w,
    psu_health (text), labels psu; an empty bay -> psu_state "Absent".
  PowerSubsystem -> power_capacity_w (CapacityWatts); PowerSupply -> psu_capacity_w, psu_health
    (an empty bay: psu_state "Absent" only);
  PowerSupplyMetrics -> psu_input_w, psu_output_w (InputPowerWatts/OutputPowerWatts.Reading),
    psu_input_v, psu_input_a; EnvironmentMetrics -> power_w (PowerWatts.Reading), labels control
    (the chassis); Sensor with ReadingType Power -> power_w, labels sensor.
`redfish_pdu` and `redfish_cdu` are in checks/power/facility.py, on the same helpers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from checks.core.base import EvidenceError, Measurement
from checks.core.parsers import Parsed, register_parser
from checks.power.readings import (
    absent_members,
    fact,
    finish,
    measure,
    member_names,
    members,
    missing,
    number,
    odata_kind,
    reading,
    redfish_document,
    resource_id,
    state_of,
)

Handler = Callable[[dict[str, Any]], tuple[list[Measurement], list[str]]]

# Liquid flow units as Redfish Sensor.ReadingUnits (UCUM) print them -> L/min. Redfish defines
# LiquidFlowLPM in L/min and the older LiquidFlow in L/s (DSP0268 Sensor ReadingType); m3/h and
# US gallons per minute are what CDU datasheets and BMS points use (1 US gal = 3.785411784 L, NIST).
FLOW_TO_LPM: dict[str, float] = {
    "L/min": 1.0,
    "L/s": 60.0,
    "L/h": 1.0 / 60.0,
    "m3/h": 1000.0 / 60.0,
    "m3/s": 60_000.0,
    "[gal_us]/min": 3.785411784,
    "gal/min": 3.785411784,
}
# Heat and power units -> W (SI prefixes).
TO_WATTS: dict[str, float] = {"W": 1.0, "kW": 1_000.0, "MW": 1_000_000.0}


def parse_document(
    text: str, what: str, handlers: dict[str, Handler], guess: Callable[[dict[str, Any]], str]
) -> Parsed:
    """One Redfish document to measurements, by the handler of its `@odata.type` (or of what
    `guess` makes of an untyped one); a type with no handler is EvidenceError."""
    doc = redfish_document(text, what)
    kind = odata_kind(doc) or guess(doc)
    handler = handlers.get(kind)
    if handler is None:
        shown = doc.get("@odata.type")
        raise EvidenceError(f"{what} is not one of {', '.join(sorted(handlers))} (@odata.type {str(shown)[:80]!r})")
    out, warnings = handler(doc)
    return finish(f"Redfish {kind} document", out, warnings)


def value_or_missing(name: str, value: float | None, unit: str, why: str, **labels: str) -> Measurement:
    return measure(name, value, unit, **labels) if value is not None else missing(name, unit, why, **labels)


def health_fact(name: str, item: dict[str, Any], **labels: str) -> list[Measurement]:
    health = state_of(item)[1]
    return [fact(name, health, **labels)] if health else []


# --- redfish_power --------------------------------------------------------------------------------


def _controls(doc: dict[str, Any]) -> list[Measurement]:
    out: list[Measurement] = []
    items = members(doc.get("PowerControl"))
    for control, name in zip(items, member_names(items), strict=True):
        why = "PowerConsumedWatts absent: the BMC reports no power reading for this control"
        out.append(value_or_missing("power_w", reading(control, "PowerConsumedWatts"), "W", why, control=name))
        capacity = reading(control, "PowerCapacityWatts")
        if capacity is not None:
            out.append(measure("power_capacity_w", capacity, "W", control=name))
        metrics = control.get("PowerMetrics")
        if isinstance(metrics, dict):
            for key, metric in (("MinConsumedWatts", "power_w_min"), ("MaxConsumedWatts", "power_w_max")):
                if (value := number(metrics.get(key))) is not None:
                    out.append(measure(metric, value, "W", control=name))
            if (value := number(metrics.get("AverageConsumedWatts"))) is not None:
                out.append(measure("power_w_avg", value, "W", control=name))
            if (minutes := number(metrics.get("IntervalInMin"))) is not None:
                out.append(measure("sampling_period_s", minutes * 60.0, "s", control=name, source_unit="min"))
    return out


def _supplies(items: list[dict[str, Any]]) -> list[Measurement]:
    out: list[Measurement] = []
    for psu, name in zip(items, member_names(items), strict=True):
        why = "PowerInputWatts absent: the BMC reports no input power for this supply"
        out.append(value_or_missing("psu_input_w", reading(psu, "PowerInputWatts"), "W", why, psu=name))
        output = reading(psu, "PowerOutputWatts")
        if output is not None:
            out.append(measure("psu_output_w", output, "W", psu=name))
        elif (last := reading(psu, "LastPowerOutputWatts")) is not None:
            out.append(measure("psu_output_w", last, "W", psu=name, source="LastPowerOutputWatts"))
        else:
            out.append(missing("psu_output_w", "W", "neither PowerOutputWatts nor LastPowerOutputWatts", psu=name))
        capacity = reading(psu, "PowerCapacityWatts")
        if capacity is not None:
            out.append(measure("psu_capacity_w", capacity, "W", psu=name))
        out += health_fact("psu_health", psu, psu=name)
    return out


def absent_bay(name: str) -> tuple[Measurement, str]:
    """An empty power-supply bay: a fact (not a reading, not a failure) and the warning naming it."""
    return fact("psu_state", "Absent", psu=name), f"power supply {name!r}: bay empty (Status.State Absent)"


def _legacy_power(doc: dict[str, Any]) -> tuple[list[Measurement], list[str]]:
    if not isinstance(doc.get("PowerControl"), list) and not isinstance(doc.get("PowerSupplies"), list):
        raise EvidenceError("Redfish Power document has no PowerControl or PowerSupplies array")
    out = _controls(doc) + _supplies(members(doc.get("PowerSupplies")))
    readings = [m for m in out if m.name in ("power_w", "psu_input_w") and m.value is not None]
    warnings = [] if readings else ["no power reading: no PowerConsumedWatts and no PowerInputWatts"]
    for name in member_names(absent_members(doc.get("PowerSupplies"))):
        empty, why = absent_bay(name)
        out.append(empty)
        warnings.append(why)
    return out, warnings


def _power_subsystem(doc: dict[str, Any]) -> tuple[list[Measurement], list[str]]:
    why = "CapacityWatts absent"
    out = [value_or_missing("power_capacity_w", reading(doc, "CapacityWatts"), "W", why, control="PowerSubsystem")]
    return out, ["a PowerSubsystem holds capacity, not readings: power is in PowerSupplies/{id}/Metrics"]


def _power_supply(doc: dict[str, Any]) -> tuple[list[Measurement], list[str]]:
    name = resource_id(doc, "PowerSupplies")
    if state_of(doc)[0] == "Absent":
        empty, why = absent_bay(name)
        return [empty], [why]
    if "PowerInputWatts" in doc or "LastPowerOutputWatts" in doc:  # a legacy Power.PowerSupply member
        return _supplies([doc]), []
    out = [measure("psu_capacity_w", v, "W", psu=name) for v in [reading(doc, "PowerCapacityWatts")] if v is not None]
    out += health_fact("psu_health", doc, psu=name)
    return out, ["a PowerSupply holds capacity and health: its readings are in its Metrics"]


def _psu_metrics(doc: dict[str, Any]) -> tuple[list[Measurement], list[str]]:
    name = resource_id(doc, "PowerSupplies")
    out = [
        value_or_missing("psu_input_w", reading(doc, "InputPowerWatts"), "W", "InputPowerWatts absent", psu=name),
        value_or_missing("psu_output_w", reading(doc, "OutputPowerWatts"), "W", "OutputPowerWatts absent", psu=name),
    ]
    for key, metric, unit in (("InputVoltage", "psu_input_v", "V"), ("InputCurrentAmps", "psu_input_a", "A")):
        if (value := reading(doc, key)) is not None:
            out.append(measure(metric, value, unit, psu=name))
    return out + health_fact("psu_health", doc, psu=name), []


def _environment_power(doc: dict[str, Any]) -> tuple[list[Measurement], list[str]]:
    chassis = resource_id(doc, "Chassis")
    return [value_or_missing("power_w", reading(doc, "PowerWatts"), "W", "PowerWatts absent", control=chassis)], []


def _power_sensor(doc: dict[str, Any]) -> tuple[list[Measurement], list[str]]:
    kind = str(doc.get("ReadingType") or "")
    if kind != "Power":
        raise EvidenceError(f"Redfish Sensor {doc.get('Id')!r} reads {kind or 'nothing'}, not Power")
    return [converted("power_w", doc, TO_WATTS, "W", sensor=str(doc.get("Id") or doc.get("Name") or ""))], []


def converted(name: str, doc: dict[str, Any], table: dict[str, float], unit: str, **labels: str) -> Measurement:
    """A Sensor's Reading in `unit`, converted from its ReadingUnits by `table`."""
    source = str(doc.get("ReadingUnits") or unit)
    value = number(doc.get("Reading"))
    if source not in table:
        return missing(name, unit, f"ReadingUnits {source!r} unknown: cannot convert to {unit}", **labels)
    if value is None:
        return missing(name, unit, "Reading absent or null", **labels)
    extra = {"source_unit": source} if table[source] != 1.0 else {}  # Cel is C, L/min is L/min
    return measure(name, value * table[source], unit, **labels, **extra)


def _power_guess(doc: dict[str, Any]) -> str:
    return "Power" if "PowerControl" in doc or "PowerSupplies" in doc else ""


POWER_HANDLERS: dict[str, Handler] = {
    "Power": _legacy_power,
    "PowerSubsystem": _power_subsystem,
    "PowerSupply": _power_supply,
    "PowerSupplyMetrics": _psu_metrics,
    "EnvironmentMetrics": _environment_power,
    "Sensor": _power_sensor,
}


@register_parser("redfish_power")
def parse_redfish_power(text: str) -> Parsed:
    """A node's Redfish Power / PowerSubsystem / PowerSupply / PowerSupplyMetrics /
    EnvironmentMetrics / power Sensor document -> power_w, psu_input_w... (module docstring)."""
    return parse_document(text, "Redfish power document", POWER_HANDLERS, _power_guess)

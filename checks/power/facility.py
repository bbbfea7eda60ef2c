"""Facility power and cooling readings from Redfish documents: parsers `redfish_pdu` and
`redfish_cdu`, detected by `@odata.type`, on the helpers of checks/power/redfish.py and the rules
of checks/power/readings.py. A reading the document should carry and does not is value None with
`labels["missing"]`; units are W, A, V, VA, C, L/min, %, with `labels["source_unit"]` where the
source used another.

`redfish_pdu` (RackPDU, DSP0268 PowerDistribution):
  Circuit (Mains, Branch, Subfeed, Feeder) -> mains_power_w (a Mains) or branch_power_w (any
    other): PowerWatts, else the sum of phase_power_w (labels source), phase_power_w
    (PolyPhasePowerWatts LineNToNeutral -> phase LN), rated_current_a (RatedCurrentAmps: the breaker), phase_current_a
    (PolyPhaseCurrentAmps Line1..3 -> phase L1..L3; else CurrentAmps as L1, labels source),
    neutral_current_a, phase_voltage_v (LineNToNeutral -> phase LN; else Voltage as L1),
    line_voltage_v (Line1ToLine2 -> phase L1-L2 ...; a plain Voltage of a circuit wired without
    neutral, TwoPhase3Wire or ThreePhase4Wire, is line-to-line: phase L1-L2), phase_power_w also
    from line-to-line PolyPhasePowerWatts (Line1ToLine2 -> phase L1-L2: a load across two lines),
    breaker_state (text); labels circuit, circuit_type.
  Outlet -> outlet_power_w, outlet_current_a, outlet_voltage_v, rated_current_a,
    outlet_power_state (text); labels outlet (Id, else Name).
  OutletGroup -> outlet_group_power_w, labels outlet_group; PowerDistributionMetrics ->
    pdu_power_w (the whole PDU), labels pdu; PowerDistribution -> pdu_capacity_va
    (PowerCapacityVA), pdu_health (text), labels pdu.
  Sensor (Chassis/{pdu}/Sensors/{id} or PowerEquipment/.../Sensors/{id}) -> by ReadingType and
    ElectricalContext: Current on Line1..3 -> phase_current_a (phase L1..L3), on Neutral ->
    neutral_current_a, else current_a; Voltage LineNToNeutral -> phase_voltage_v (phase LN),
    LineXToLineY -> line_voltage_v (phase LX-LY), else voltage_v; Power LineNToNeutral /
    LineXToLineY -> phase_power_w, else power_w; Reading converted from ReadingUnits (A/mA, V/mV/kV,
    W/kW); labels sensor, and electrical_context where it names none of those phases.
`redfish_cdu` (DSP0268 CoolingUnit and its parts):
  CoolantConnector -> coolant_supply_c, coolant_return_c, coolant_delta_c, coolant_flow_lpm,
    rated_flow_lpm, heat_removal_w (HeatRemovedkW x 1000, source_unit kW); labels loop
    (primary / secondary, from the @odata.id; '' for a server's own connector), connector.
  CoolingUnit -> coolant_density_kg_m3, coolant_specific_heat_kj_kgk (the loop's fluid, for
    heat = flow x density x specific heat x (return - supply)), cooling_capacity_w, cdu_health
    (text; labels rollup, conditions); labels cdu.
  Pump -> pump_speed_pct, pump_health (text), labels pump; LeakDetection / LeakDetector ->
    leak_detector (text DetectorState), labels detector, group; EnvironmentMetrics ->
    ambient_c, humidity_pct, cdu_power_w.
  Sensor -> by ReadingType: LiquidFlowLPM / LiquidFlow -> coolant_flow_lpm (any unit of
    FLOW_TO_LPM: L/s, m3/h, US gal/min...), Heat -> heat_removal_w (kW or W), Temperature ->
    coolant_supply_c / coolant_return_c ("supply" / "return" in its Id or Name; else
    temperature_c), Power -> cdu_power_w; labels sensor.
"""

from __future__ import annotations

import re
from typing import Any

from checks.core.base import EvidenceError, Measurement
from checks.core.parsers import Parsed, register_parser
from checks.power.readings import fact, measure, missing, number, reading, resource_id, state_of
from checks.power.redfish import (
    FLOW_TO_LPM,
    TO_WATTS,
    Handler,
    converted,
    health_fact,
    parse_document,
    value_or_missing,
)

# --- redfish_pdu ----------------------------------------------------------------------------------

_LINES = (("Line1", "L1"), ("Line2", "L2"), ("Line3", "L3"))
_LINE_PAIRS = (("Line1ToLine2", "L1-L2"), ("Line2ToLine3", "L2-L3"), ("Line3ToLine1", "L3-L1"))
# DSP0268 PhaseWiringType: TwoPhase3Wire is (Line1, Line2, PE) and ThreePhase4Wire (Line1..3, PE):
# no neutral conductor, so a circuit's single Voltage can only be line-to-line.
_NO_NEUTRAL = frozenset({"TwoPhase3Wire", "ThreePhase4Wire"})
# Sensor ReadingUnits (UCUM) -> A, V: DSP0268 Sensor uses "A" and "V"; the prefixes are SI.
TO_AMPS: dict[str, float] = {"A": 1.0, "mA": 0.001}
TO_VOLTS: dict[str, float] = {"V": 1.0, "mV": 0.001, "kV": 1_000.0}


def _phases(doc: dict[str, Any], **labels: str) -> list[Measurement]:
    """Per-phase currents and voltages of a Circuit (PolyPhase*), else its single readings as L1."""
    out: list[Measurement] = []
    currents = doc.get("PolyPhaseCurrentAmps")
    if isinstance(currents, dict):
        for key, phase in _LINES:
            if key in currents:
                why = f"PolyPhaseCurrentAmps.{key} has no Reading"
                out.append(value_or_missing("phase_current_a", reading(currents, key), "A", why, phase=phase, **labels))
        if (neutral := reading(currents, "Neutral")) is not None:
            out.append(measure("neutral_current_a", neutral, "A", **labels))
    elif "CurrentAmps" in doc:
        why = "CurrentAmps has no Reading"
        current = reading(doc, "CurrentAmps")
        out.append(value_or_missing("phase_current_a", current, "A", why, phase="L1", source="CurrentAmps", **labels))
    voltages = doc.get("PolyPhaseVoltage")
    if isinstance(voltages, dict):
        for key, phase in _LINES:
            if (volts := reading(voltages, f"{key}ToNeutral")) is not None:
                out.append(measure("phase_voltage_v", volts, "V", phase=phase, **labels))
        for key, pair in _LINE_PAIRS:
            if (volts := reading(voltages, key)) is not None:
                out.append(measure("line_voltage_v", volts, "V", phase=pair, **labels))
    elif (volts := reading(doc, "Voltage")) is not None:
        if doc.get("PhaseWiringType") in _NO_NEUTRAL:
            out.append(measure("line_voltage_v", volts, "V", phase="L1-L2", source="Voltage", **labels))
        else:
            out.append(measure("phase_voltage_v", volts, "V", phase="L1", source="Voltage", **labels))
    return out


def _phase_powers(doc: dict[str, Any], **labels: str) -> list[Measurement]:
    """phase_power_w per PolyPhasePowerWatts load: line-to-neutral (a wye circuit's phases, phase
    L1..L3) and line-to-line (a load across two lines, phase L1-L2...); each load is counted once."""
    powers = doc.get("PolyPhasePowerWatts")
    if not isinstance(powers, dict):
        return []
    keys = [(f"{key}ToNeutral", phase) for key, phase in _LINES] + list(_LINE_PAIRS)
    found = [(phase, reading(powers, key)) for key, phase in keys]
    return [measure("phase_power_w", watts, "W", phase=phase, **labels) for phase, watts in found if watts is not None]


def _circuit_power(doc: dict[str, Any], phases: list[Measurement], **labels: str) -> Measurement:
    """The circuit's PowerWatts; without it, the sum of its line-to-neutral phase powers, else of
    its line-to-line ones (a circuit without neutral), labelled as derived; else missing."""
    name = "mains_power_w" if labels.get("circuit_type") == "Mains" else "branch_power_w"
    total = reading(doc, "PowerWatts")
    if total is not None:
        return measure(name, total, "W", **labels)
    # A wye circuit's real power is the sum of its line-to-neutral phases; its line-to-line entries
    # may be the same power seen between lines, so they are summed only where there is no neutral one.
    to_neutral = [m.value for m in phases if m.value is not None and "-" not in m.labels.get("phase", "")]
    line_to_line = [m.value for m in phases if m.value is not None and "-" in m.labels.get("phase", "")]
    if to_neutral or line_to_line:
        loads = "Line*ToNeutral" if to_neutral else "Line*ToLine*"
        total = sum(to_neutral or line_to_line)
        return measure(name, total, "W", source=f"sum of PolyPhasePowerWatts {loads}", **labels)
    return missing(name, "W", "neither PowerWatts nor PolyPhasePowerWatts", **labels)


def _rated(doc: dict[str, Any], **labels: str) -> list[Measurement]:
    rated = reading(doc, "RatedCurrentAmps")
    return [measure("rated_current_a", rated, "A", **labels)] if rated is not None else []


def _circuit(doc: dict[str, Any]) -> tuple[list[Measurement], list[str]]:
    kind = str(doc.get("CircuitType") or "")
    labels = {"circuit": str(doc.get("Id") or doc.get("Name") or ""), "circuit_type": kind}
    phases = _phase_powers(doc, **labels)
    out = [_circuit_power(doc, phases, **labels), *phases, *_rated(doc, **labels), *_phases(doc, **labels)]
    if doc.get("BreakerState"):
        out.append(fact("breaker_state", str(doc["BreakerState"]), **labels))
    return out, []


def _outlet(doc: dict[str, Any]) -> tuple[list[Measurement], list[str]]:
    outlet = str(doc.get("Id") or doc.get("Name") or "")
    out = [value_or_missing("outlet_power_w", reading(doc, "PowerWatts"), "W", "PowerWatts absent", outlet=outlet)]
    current = reading(doc, "CurrentAmps")
    polyphase = doc.get("PolyPhaseCurrentAmps")
    if current is None and isinstance(polyphase, dict):
        current = reading(polyphase, "Line1")
    out.append(value_or_missing("outlet_current_a", current, "A", "CurrentAmps absent", outlet=outlet))
    if (volts := reading(doc, "Voltage")) is not None:
        out.append(measure("outlet_voltage_v", volts, "V", outlet=outlet))
    out += _rated(doc, outlet=outlet)
    if doc.get("PowerState"):
        out.append(fact("outlet_power_state", str(doc["PowerState"]), outlet=outlet))
    return out, []


def _outlet_group(doc: dict[str, Any]) -> tuple[list[Measurement], list[str]]:
    group = str(doc.get("Id") or doc.get("Name") or "")
    power = reading(doc, "PowerWatts")
    return [value_or_missing("outlet_group_power_w", power, "W", "PowerWatts absent", outlet_group=group)], []


def _pdu_metrics(doc: dict[str, Any]) -> tuple[list[Measurement], list[str]]:
    pdu = resource_id(doc, "RackPDUs")
    return [value_or_missing("pdu_power_w", reading(doc, "PowerWatts"), "W", "PowerWatts absent", pdu=pdu)], []


def _power_distribution(doc: dict[str, Any]) -> tuple[list[Measurement], list[str]]:
    pdu = str(doc.get("Id") or doc.get("Name") or "")
    capacity = reading(doc, "PowerCapacityVA")
    out = [measure("pdu_capacity_va", capacity, "VA", pdu=pdu)] if capacity is not None else []
    out += health_fact("pdu_health", doc, pdu=pdu)
    return out, ["a PowerDistribution holds no reading: read its Mains, Branches, Outlets and Metrics"]


# Sensor.ElectricalContext -> (phase label, which of line/neutral/pair): DSP0268 Sensor.
_CONTEXT_PHASE: dict[str, str] = {
    **{key: phase for key, phase in _LINES},
    **{f"{key}ToNeutral": phase for key, phase in _LINES},
    **dict(_LINE_PAIRS),
}


def _sensor_names(kind: str, context: str) -> tuple[str, str]:
    """(measurement name, unit) of a PDU Sensor by ReadingType and ElectricalContext."""
    pair = context in dict(_LINE_PAIRS)
    to_neutral = context.endswith("ToNeutral") and context in _CONTEXT_PHASE
    if kind == "Current":
        if context in dict(_LINES):
            return "phase_current_a", "A"
        return ("neutral_current_a" if context == "Neutral" else "current_a"), "A"
    if kind == "Voltage":
        if pair:
            return "line_voltage_v", "V"
        return ("phase_voltage_v" if to_neutral else "voltage_v"), "V"
    if kind == "Power":
        return ("phase_power_w" if pair or to_neutral else "power_w"), "W"
    return "", ""


def _pdu_sensor(doc: dict[str, Any]) -> tuple[list[Measurement], list[str]]:
    kind = str(doc.get("ReadingType") or "")
    context = str(doc.get("ElectricalContext") or "")
    sensor = str(doc.get("Id") or doc.get("Name") or "")
    name, unit = _sensor_names(kind, context)
    if not name:
        raise EvidenceError(f"Redfish Sensor {sensor!r} reads {kind or 'nothing'}: not a current, voltage or power")
    phase = _CONTEXT_PHASE.get(context, "") if name.startswith(("phase_", "line_")) else ""
    labels = {"phase": phase} if phase else {"electrical_context": context}
    table = {"A": TO_AMPS, "V": TO_VOLTS, "W": TO_WATTS}[unit]
    return [converted(name, doc, table, unit, sensor=sensor, **labels)], []


PDU_HANDLERS: dict[str, Handler] = {
    "Circuit": _circuit,
    "Outlet": _outlet,
    "OutletGroup": _outlet_group,
    "PowerDistributionMetrics": _pdu_metrics,
    "PowerDistribution": _power_distribution,
    "Sensor": _pdu_sensor,
}


@register_parser("redfish_pdu")
def parse_redfish_pdu(text: str) -> Parsed:
    """A RackPDU's Redfish Circuit / Outlet / OutletGroup / PowerDistributionMetrics /
    PowerDistribution / Sensor document -> mains_power_w, phase_current_a, outlet_power_w... (docstring)."""
    return parse_document(text, "Redfish PDU document", PDU_HANDLERS, lambda doc: "")


# --- redfish_cdu ----------------------------------------------------------------------------------


def _loop(doc: dict[str, Any]) -> str:
    link = str(doc.get("@odata.id") or "")
    found = re.search(r"/(Primary|Secondary)CoolantConnectors/", link)
    return found.group(1).lower() if found else ""


def _connector(doc: dict[str, Any]) -> tuple[list[Measurement], list[str]]:
    labels = {"loop": _loop(doc), "connector": str(doc.get("Id") or doc.get("Name") or "")}
    out = [
        value_or_missing("coolant_supply_c", reading(doc, "SupplyTemperatureCelsius"), "C", "no supply", **labels),
        value_or_missing("coolant_return_c", reading(doc, "ReturnTemperatureCelsius"), "C", "no return", **labels),
        value_or_missing("coolant_flow_lpm", reading(doc, "FlowLitersPerMinute"), "L/min", "no flow", **labels),
    ]
    if (delta := reading(doc, "DeltaTemperatureCelsius")) is not None:
        out.append(measure("coolant_delta_c", delta, "C", **labels))
    if (rated := reading(doc, "RatedFlowLitersPerMinute")) is not None:
        out.append(measure("rated_flow_lpm", rated, "L/min", **labels))
    if (heat := reading(doc, "HeatRemovedkW")) is not None:
        out.append(measure("heat_removal_w", heat * 1000.0, "W", source_unit="kW", **labels))
    return out, []


def _object(doc: dict[str, Any], key: str) -> dict[str, Any]:
    value = doc.get(key)
    return value if isinstance(value, dict) else {}


def _cooling_unit(doc: dict[str, Any]) -> tuple[list[Measurement], list[str]]:
    cdu = str(doc.get("Id") or doc.get("Name") or "")
    out: list[Measurement] = []
    coolant = _object(doc, "Coolant")
    for key, name, unit in (
        ("DensityKgPerCubicMeter", "coolant_density_kg_m3", "kg/m3"),
        ("SpecificHeatkJoulesPerKgK", "coolant_specific_heat_kj_kgk", "kJ/(kg K)"),
    ):
        if (value := number(coolant.get(key))) is not None:
            out.append(measure(name, value, unit, cdu=cdu, coolant=str(coolant.get("CoolantType") or "")))
    if (capacity := reading(doc, "CoolingCapacityWatts")) is not None:
        out.append(measure("cooling_capacity_w", capacity, "W", cdu=cdu))
    status = _object(doc, "Status")
    conditions = [
        str(c.get("Message") or c.get("MessageId") or "")
        for c in status.get("Conditions") or []
        if isinstance(c, dict) and c.get("Severity") not in ("OK", None)
    ]
    rollup = str(status.get("HealthRollup") or "")
    out += health_fact("cdu_health", doc, cdu=cdu, rollup=rollup, conditions="; ".join(conditions))
    return out, ["a CoolingUnit holds no loop reading: read its Primary/SecondaryCoolantConnectors"]


def _pump(doc: dict[str, Any]) -> tuple[list[Measurement], list[str]]:
    pump = str(doc.get("Id") or doc.get("Name") or "")
    speed = reading(doc, "PumpSpeedPercent")
    out = [measure("pump_speed_pct", speed, "%", pump=pump)] if speed is not None else []
    return out + health_fact("pump_health", doc, pump=pump, state=state_of(doc)[0]), []


def _detector(item: dict[str, Any], group: str) -> Measurement:
    name = str(item.get("DeviceName") or item.get("Name") or item.get("Id") or "")
    return fact("leak_detector", str(item.get("DetectorState") or "no reading"), detector=name, group=group)


def _leak_detection(doc: dict[str, Any]) -> tuple[list[Measurement], list[str]]:
    out: list[Measurement] = []
    for group in doc.get("LeakDetectorGroups") or []:
        if isinstance(group, dict):
            name = str(group.get("GroupName") or "")
            out += [_detector(d, name) for d in group.get("Detectors") or [] if isinstance(d, dict)]
    return out, []


def _leak_detector(doc: dict[str, Any]) -> tuple[list[Measurement], list[str]]:
    return [_detector(doc, "")], []


def _environment(doc: dict[str, Any]) -> tuple[list[Measurement], list[str]]:
    out = []
    for key, name, unit in (
        ("TemperatureCelsius", "ambient_c", "C"),
        ("HumidityPercent", "humidity_pct", "%"),
        ("PowerWatts", "cdu_power_w", "W"),
    ):
        if (value := reading(doc, key)) is not None:
            out.append(measure(name, value, unit))
    return out, []


def _cdu_sensor(doc: dict[str, Any]) -> tuple[list[Measurement], list[str]]:
    kind = str(doc.get("ReadingType") or "")
    sensor = str(doc.get("Id") or doc.get("Name") or "")
    if kind in ("LiquidFlowLPM", "LiquidFlow"):
        # LiquidFlow is in L/s by definition (DSP0268); an omitted ReadingUnits means exactly that.
        unit_doc = doc if doc.get("ReadingUnits") or kind == "LiquidFlowLPM" else {**doc, "ReadingUnits": "L/s"}
        return [converted("coolant_flow_lpm", unit_doc, FLOW_TO_LPM, "L/min", sensor=sensor)], []
    if kind == "Heat":
        return [converted("heat_removal_w", doc, TO_WATTS, "W", sensor=sensor)], []
    if kind == "Power":
        return [converted("cdu_power_w", doc, TO_WATTS, "W", sensor=sensor)], []
    if kind == "Temperature":
        words = f"{doc.get('Id') or ''} {doc.get('Name') or ''}".lower()
        name = "coolant_supply_c" if "supply" in words else "coolant_return_c" if "return" in words else "temperature_c"
        return [converted(name, doc, {"Cel": 1.0, "C": 1.0}, "C", sensor=sensor)], []
    raise EvidenceError(f"Redfish Sensor {sensor!r} reads {kind or 'nothing'}: not a flow, heat, power or temperature")


CDU_HANDLERS: dict[str, Handler] = {
    "CoolantConnector": _connector,
    "CoolingUnit": _cooling_unit,
    "Pump": _pump,
    "LeakDetection": _leak_detection,
    "LeakDetector": _leak_detector,
    "EnvironmentMetrics": _environment,
    "Sensor": _cdu_sensor,
}


@register_parser("redfish_cdu")
def parse_redfish_cdu(text: str) -> Parsed:
    """A CDU's Redfish CoolantConnector / CoolingUnit / Pump / LeakDetection / EnvironmentMetrics /
    Sensor document -> coolant_supply_c, coolant_return_c, coolant_flow_lpm, heat_removal_w..."""
    return parse_document(text, "Redfish CDU document", CDU_HANDLERS, lambda doc: "")

"""The Redfish documents of the testbed's facility (served by testbed/sim/redfish_facility.py).

Shapes follow the DMTF Redfish-Publications mockups public-pdu and public-cooling-unit (copies in
tests/fixtures/redfish-pdu/ and redfish-cdu/): PowerDistribution.v1_6_0, Circuit.v1_9_0,
Outlet.v1_4_4, PowerDistributionMetrics.v1_4_0, CoolingUnit.v1_1_2, CoolantConnector.v1_3_0,
EnvironmentMetrics.v1_4_0. Readings are computed at request time from the nodes' power
(testbed/sim/facility.py); sensors are not served, so readings carry no DataSourceUri.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from testbed.sim.facility import Facility, Loop, Pdu, loop_reading, neutral_current, node_powers, phase_readings

Document = dict[str, Any]
ROOT = "/redfish/v1"
PDUS = f"{ROOT}/PowerEquipment/RackPDUs"
CDUS = f"{ROOT}/ThermalEquipment/CDUs"
OK = {"State": "Enabled", "Health": "OK"}
# The CDU cabinet's air (EnvironmentMetrics): the DMTF public-cooling-unit mockup's readings.
CDU_AIR_C = 24.0
CDU_HUMIDITY_PCT = 26.0


def _ref(uri: str) -> Document:
    return {"@odata.id": uri}


def _collection(kind: str, name: str, uri: str, members: list[str]) -> Document:
    return {
        "@odata.type": f"#{kind}.{kind}",
        "Name": name,
        "Members@odata.count": len(members),
        "Members": [_ref(m) for m in members],
        "@odata.id": uri,
    }


def _reading(value: float, digits: int = 2) -> Document:
    return {"Reading": round(value, digits)}


def _watts(value: float) -> Document:
    # Power factor 1 (testbed/sim/facility.py): apparent = active, no reactive power.
    return {"Reading": round(value, 1), "ApparentVA": round(value, 1), "ReactiveVAR": 0.0, "PowerFactor": 1.0}


def _nominal(voltage: float) -> str:
    """Circuit.NominalVoltageType for a line-to-neutral voltage."""
    if 100.0 <= voltage <= 127.0:
        return "AC100To127V"
    if 200.0 <= voltage <= 240.0:
        return "AC200To240V"
    return "AC277V" if 260.0 <= voltage <= 290.0 else "AC100To277V"


def service_root() -> Document:
    return {
        "@odata.type": "#ServiceRoot.v1_18_0.ServiceRoot",
        "Id": "RootService",
        "Name": "Kiln testbed facility Redfish service",
        "RedfishVersion": "1.13.0",
        "PowerEquipment": _ref(f"{ROOT}/PowerEquipment"),
        "ThermalEquipment": _ref(f"{ROOT}/ThermalEquipment"),
        "@odata.id": f"{ROOT}/",
    }


# ----------------------------------------------------------------------------- power


def _pdu(pdu: Pdu) -> Document:
    uri = f"{PDUS}/{pdu.id}"
    return {
        "@odata.type": "#PowerDistribution.v1_6_0.PowerDistribution",
        "Id": pdu.id,
        "EquipmentType": "RackPDU",
        "Name": pdu.name,
        "Manufacturer": "Kiln testbed",
        "Model": "SimPDU",
        "Status": dict(OK),
        "PowerCapacityVA": round(pdu.rated_current_a * pdu.voltage_v * pdu.phases),
        **({"Location": {"Placement": {"Rack": pdu.rack}}} if pdu.rack else {}),
        "Mains": _ref(f"{uri}/Mains"),
        "Outlets": _ref(f"{uri}/Outlets"),
        "Metrics": _ref(f"{uri}/Metrics"),
        "@odata.id": uri,
    }


def _circuit(pdu: Pdu, powers: dict[str, float]) -> Document:
    phases = phase_readings(pdu, powers)
    total = sum(p.power_w for p in phases)
    doc: Document = {
        "@odata.type": "#Circuit.v1_9_0.Circuit",
        "Id": pdu.circuit,
        "Name": "Mains AC Input",
        "Status": dict(OK),
        "CircuitType": "Mains",
        "PhaseWiringType": "ThreePhase5Wire" if pdu.phases == 3 else "OnePhase3Wire",
        "NominalVoltage": _nominal(pdu.voltage_v),
        "RatedCurrentAmps": pdu.rated_current_a,
        "BreakerState": "Normal",
    }
    volts = {f"Line{p.number}ToNeutral": _reading(p.voltage_v, 1) for p in phases}
    amps = {f"Line{p.number}": _reading(p.current_a) for p in phases}
    watts = {f"Line{p.number}ToNeutral": _watts(p.power_w) for p in phases}
    if pdu.phases == 3:
        line_to_line = pdu.voltage_v * math.sqrt(3.0)
        volts.update({key: _reading(line_to_line, 1) for key in ("Line1ToLine2", "Line2ToLine3", "Line3ToLine1")})
        amps["Neutral"] = _reading(neutral_current(phases))
    else:
        doc["Voltage"] = _reading(pdu.voltage_v, 1)
        doc["CurrentAmps"] = _reading(phases[0].current_a)
    doc.update(
        {
            "PolyPhaseVoltage": volts,
            "PolyPhaseCurrentAmps": amps,
            "PolyPhasePowerWatts": watts,
            "PowerWatts": _watts(total),
            "FrequencyHz": _reading(pdu.frequency_hz, 1),
            "@odata.id": f"{PDUS}/{pdu.id}/Mains/{pdu.circuit}",
        }
    )
    return doc


def _outlet(pdu: Pdu, number: int, powers: dict[str, float]) -> Document | None:
    if not 1 <= number <= len(pdu.feeds):
        return None
    feed = pdu.feeds[number - 1]
    watts = powers.get(feed.node, 0.0) * feed.share
    return {
        "@odata.type": "#Outlet.v1_4_4.Outlet",
        "Id": str(number),
        "Name": f"Outlet {number}",
        "UserLabel": feed.node,
        "Status": dict(OK),
        "PhaseWiringType": "OnePhase3Wire",
        "VoltageType": "AC",
        "NominalVoltage": _nominal(pdu.voltage_v),
        "RatedCurrentAmps": pdu.outlet_rated_current_a,
        "PowerState": "On",
        "Voltage": _reading(pdu.voltage_v, 1),
        "CurrentAmps": _reading(watts / pdu.voltage_v),
        "PowerWatts": _watts(watts),
        "FrequencyHz": _reading(pdu.frequency_hz, 1),
        "@odata.id": f"{PDUS}/{pdu.id}/Outlets/{number}",
    }


def _metrics(pdu: Pdu, powers: dict[str, float]) -> Document:
    total = sum(p.power_w for p in phase_readings(pdu, powers))
    return {
        "@odata.type": "#PowerDistributionMetrics.v1_4_0.PowerDistributionMetrics",
        "Id": "Metrics",
        "Name": "Summary Metrics",
        "PowerWatts": _watts(total),
        "@odata.id": f"{PDUS}/{pdu.id}/Metrics",
    }


def _pdu_part(pdu: Pdu, rest: list[str], facility: Facility, state_dir: Path) -> Document | None:
    uri = f"{PDUS}/{pdu.id}"
    if not rest:
        return _pdu(pdu)
    if rest == ["Mains"]:
        return _collection(
            "CircuitCollection", "Mains Circuit Collection", f"{uri}/Mains", [f"{uri}/Mains/{pdu.circuit}"]
        )
    if rest == ["Outlets"]:
        members = [f"{uri}/Outlets/{n}" for n in range(1, len(pdu.feeds) + 1)]
        return _collection("OutletCollection", "Outlet Collection", f"{uri}/Outlets", members)
    powers = node_powers(state_dir, facility.nodes())
    if rest == ["Mains", pdu.circuit]:
        return _circuit(pdu, powers)
    if rest == ["Metrics"]:
        return _metrics(pdu, powers)
    if len(rest) == 2 and rest[0] == "Outlets" and rest[1].isdigit() and len(rest[1]) < 6:
        return _outlet(pdu, int(rest[1]), powers)
    return None


def power_document(rest: list[str], facility: Facility, state_dir: Path) -> Document | None:
    """/redfish/v1/PowerEquipment/<rest>."""
    if not rest:
        return {
            "@odata.type": "#PowerEquipment.v1_2_3.PowerEquipment",
            "Id": "PowerEquipment",
            "Name": "DCIM Power Equipment",
            "Status": {"State": "Enabled", "HealthRollup": "OK"},
            "RackPDUs": _ref(PDUS),
            "@odata.id": f"{ROOT}/PowerEquipment",
        }
    if rest[0] != "RackPDUs":
        return None
    if len(rest) == 1:
        return _collection(
            "PowerDistributionCollection", "RackPDU Collection", PDUS, [f"{PDUS}/{p.id}" for p in facility.pdus]
        )
    for pdu in facility.pdus:
        if pdu.id == rest[1]:
            return _pdu_part(pdu, rest[2:], facility, state_dir)
    return None


# ----------------------------------------------------------------------------- cooling


def _coolant(loop: Loop) -> Document:
    return {
        "CoolantType": "Water",
        "SpecificHeatkJoulesPerKgK": loop.specific_heat_kj_per_kg_k,
        "DensityKgPerCubicMeter": round(loop.density_kg_per_l * 1000.0, 2),
    }


def _cdu(loop: Loop) -> Document:
    uri = f"{CDUS}/{loop.id}"
    return {
        "@odata.type": "#CoolingUnit.v1_1_2.CoolingUnit",
        "Id": loop.id,
        "EquipmentType": "CDU",
        "Name": loop.name,
        "Manufacturer": "Kiln testbed",
        "Model": "SimCDU",
        "Status": dict(OK),
        "Coolant": _coolant(loop),
        "PrimaryCoolantConnectors": _ref(f"{uri}/PrimaryCoolantConnectors"),
        "EnvironmentMetrics": _ref(f"{uri}/EnvironmentMetrics"),
        "@odata.id": uri,
    }


def _connector(loop: Loop, state_dir: Path) -> Document:
    reading = loop_reading(loop, node_powers(state_dir, set(loop.nodes)))
    return {
        "@odata.type": "#CoolantConnector.v1_3_0.CoolantConnector",
        "Id": "1",
        "Name": "Main supply from facility",
        "Status": dict(OK),
        "CoolantConnectorType": "Pair",
        "Coolant": {"CoolantType": "Water"},
        "RatedFlowLitersPerMinute": loop.flow_lpm,
        "FlowLitersPerMinute": _reading(reading.flow_lpm),
        "SupplyTemperatureCelsius": _reading(reading.supply_c),
        "ReturnTemperatureCelsius": _reading(reading.return_c),
        "DeltaTemperatureCelsius": _reading(reading.return_c - reading.supply_c),
        "HeatRemovedkW": _reading(reading.heat_w / 1000.0, 3),
        "@odata.id": f"{CDUS}/{loop.id}/PrimaryCoolantConnectors/1",
    }


def _cdu_part(loop: Loop, rest: list[str], state_dir: Path) -> Document | None:
    uri = f"{CDUS}/{loop.id}"
    if not rest:
        return _cdu(loop)
    if rest == ["PrimaryCoolantConnectors"]:
        members = [f"{uri}/PrimaryCoolantConnectors/1"]
        name = "Primary (supply side) Cooling Loop Connection Collection"
        return _collection("CoolantConnectorCollection", name, f"{uri}/PrimaryCoolantConnectors", members)
    if rest == ["PrimaryCoolantConnectors", "1"]:
        return _connector(loop, state_dir)
    if rest == ["EnvironmentMetrics"]:
        return {
            "@odata.type": "#EnvironmentMetrics.v1_4_0.EnvironmentMetrics",
            "Name": f"{loop.name} Environment Metrics",
            "TemperatureCelsius": _reading(CDU_AIR_C),
            "HumidityPercent": _reading(CDU_HUMIDITY_PCT),
            "@odata.id": f"{uri}/EnvironmentMetrics",
        }
    return None


def thermal_document(rest: list[str], facility: Facility, state_dir: Path) -> Document | None:
    """/redfish/v1/ThermalEquipment/<rest>."""
    if not rest:
        return {
            "@odata.type": "#ThermalEquipment.v1_2_0.ThermalEquipment",
            "Id": "ThermalEquipment",
            "Name": "Cooling Equipment",
            "Status": {"State": "Enabled", "HealthRollup": "OK"},
            "CDUs": _ref(CDUS),
            "@odata.id": f"{ROOT}/ThermalEquipment",
        }
    if rest[0] != "CDUs":
        return None
    if len(rest) == 1:
        return _collection("CoolingUnitCollection", "CDU Collection", CDUS, [f"{CDUS}/{c.id}" for c in facility.loops])
    for loop in facility.loops:
        if loop.id == rest[1]:
            return _cdu_part(loop, rest[2:], state_dir)
    return None

"""The Redfish power and cooling parsers (checks/power/redfish.py, checks/power/facility.py) on
every real Redfish document in tests/fixtures, value by value; unit conversions; impossible
values flagged by the rules the power-soak check declares; documents that hold no reading or are
not what they claim. Hostile documents built here stay here."""

from __future__ import annotations

import json
from typing import Any

import pytest

from checks.core import evidence
from checks.core.base import EvidenceError, Measurement
from checks.core.parsers import parse_output
from checks.power.facility import parse_redfish_cdu, parse_redfish_pdu
from checks.power.readings import EVIDENCE, flag_impossible
from checks.power.redfish import parse_redfish_power
from tests.checks.test_power_readings import FIXTURES, table

# --- redfish_power ---------------------------------------------------------------------------------


def test_it_reads_the_dmtf_legacy_power_resource() -> None:
    control = {"control": "System Input Power"}
    psu = {"psu": "Power Supply Bay"}
    assert table("redfish_power", "redfish-power/dmtf-rackmount1-Chassis-1U-Power.json") == [
        ("power_w", 344.0, "W", control),
        ("power_capacity_w", 800.0, "W", control),
        ("power_w_min", 271.0, "W", control),
        ("power_w_max", 489.0, "W", control),
        ("power_w_avg", 319.0, "W", control),
        ("sampling_period_s", 1800.0, "s", {**control, "source_unit": "min"}),
        (
            "psu_input_w",
            None,
            "W",
            {"missing": "PowerInputWatts absent: the BMC reports no input power for this supply", **psu},
        ),
        ("psu_output_w", 325.0, "W", {**psu, "source": "LastPowerOutputWatts"}),
        ("psu_capacity_w", 800.0, "W", psu),
        ("psu_health", "Warning", "", psu),
    ]


def test_it_reads_the_newer_power_resources() -> None:
    assert table("redfish_power", "redfish-power/dmtf-rackmount1-EnvironmentMetrics.json") == [
        ("power_w", 374.0, "W", {"control": "1U"})
    ]
    assert table("redfish_power", "redfish-power/dmtf-rackmount1-PowerSubsystem.json") == [
        ("power_capacity_w", 2000.0, "W", {"control": "PowerSubsystem"})
    ]
    bay = {"psu": "Bay1"}
    assert table("redfish_power", "redfish-power/dmtf-rackmount1-PowerSupplies-Bay1-Metrics.json") == [
        ("psu_input_w", 937.4, "W", bay),
        ("psu_output_w", 937.4, "W", bay),
        ("psu_input_v", 230.2, "V", bay),
        ("psu_input_a", 5.19, "A", bay),
        ("psu_health", "Warning", "", bay),
    ]


def test_it_reads_a_real_dell_idrac_power_resource() -> None:
    control = {"control": "System Power Control"}
    ps1, ps2 = {"psu": "PS1 Status"}, {"psu": "PS2 Status"}
    assert table("redfish_power", "power/redfish_power_dell_idrac_iserver.json") == [
        ("power_w", 396.0, "W", control),
        ("power_capacity_w", 1512.0, "W", control),
        ("power_w_min", 393.0, "W", control),
        ("power_w_max", 399.0, "W", control),
        ("power_w_avg", 395.0, "W", control),
        ("sampling_period_s", 60.0, "s", {**control, "source_unit": "min"}),
        ("psu_input_w", 393.0, "W", ps1),
        ("psu_output_w", 363.0, "W", ps1),
        ("psu_capacity_w", 1400.0, "W", ps1),
        ("psu_health", "OK", "", ps1),
        ("psu_input_w", 5.0, "W", ps2),
        ("psu_output_w", 0.0, "W", ps2),
        ("psu_capacity_w", 1400.0, "W", ps2),
        ("psu_health", "OK", "", ps2),
    ]


def test_it_reads_a_real_hpe_ilo_power_resource_with_same_named_supplies() -> None:
    control = {"control": "0"}
    ps0, ps1 = {"psu": "HpeServerPowerSupply 0"}, {"psu": "HpeServerPowerSupply 1"}
    no_input = "PowerInputWatts absent: the BMC reports no input power for this supply"
    assert table("redfish_power", "power/redfish_power_hpe_ilo5_telegraf.json") == [
        ("power_w", 221.0, "W", control),
        ("power_capacity_w", 1600.0, "W", control),
        ("power_w_min", 220.0, "W", control),
        ("power_w_max", 252.0, "W", control),
        ("power_w_avg", 221.0, "W", control),
        ("sampling_period_s", 1200.0, "s", {**control, "source_unit": "min"}),
        ("psu_input_w", None, "W", {"missing": no_input, **ps0}),
        ("psu_output_w", 0.0, "W", {**ps0, "source": "LastPowerOutputWatts"}),
        ("psu_capacity_w", 800.0, "W", ps0),
        ("psu_health", "OK", "", ps0),
        ("psu_input_w", None, "W", {"missing": no_input, **ps1}),
        ("psu_output_w", 90.0, "W", {**ps1, "source": "LastPowerOutputWatts"}),
        ("psu_capacity_w", 800.0, "W", ps1),
        ("psu_health", "OK", "", ps1),
    ]


def test_it_reads_a_real_cisco_cimc_power_resource() -> None:
    c = {"control": "1"}
    assert table("redfish_power", "power/redfish_power_cisco_ucsc-c240-m5sx_iserver.json") == [
        ("power_w", 216.0, "W", c),
        ("power_w_min", 209.0, "W", c),
        ("power_w_max", 329.0, "W", c),
        ("power_w_avg", 242.0, "W", c),
        ("psu_input_w", 119.0, "W", {"psu": "PSU1"}),
        ("psu_output_w", 54.0, "W", {"psu": "PSU1"}),
        ("psu_health", "OK", "", {"psu": "PSU1"}),
        ("psu_input_w", 124.0, "W", {"psu": "PSU2"}),
        ("psu_output_w", 82.0, "W", {"psu": "PSU2"}),
        ("psu_health", "OK", "", {"psu": "PSU2"}),
    ]


def test_it_records_a_real_chassis_without_readings_as_missing_never_as_zero() -> None:
    text = (FIXTURES / "power/redfish_power_cisco_ucsx-9508_no_readings_iserver.json").read_text()
    parsed = parse_output("redfish_power", text)
    readings = [m for m in parsed.measurements if m.name != "psu_state"]
    assert all(m.value is None and m.labels["missing"] for m in readings)
    # Absent blades and bays are no reading at all; the four present controls and two supplies are
    # missing; the four empty bays are named as such, not dropped and not failures.
    controls = [m.labels["control"] for m in parsed.measurements if m.name == "power_w"]
    assert controls == [
        "Chassis Power Control",
        "Blade 1 Power Control",
        "Blade 5 Power Control",
        "Blade 7 Power Control",
    ]
    assert [m.labels["psu"] for m in parsed.measurements if m.name == "psu_input_w"] == [
        "Power Supply 1",
        "Power Supply 4",
    ]
    empty = [(m.text, m.labels["psu"]) for m in parsed.measurements if m.name == "psu_state"]
    assert empty == [("Absent", f"Power Supply {n}") for n in (2, 3, 5, 6)]
    assert parsed.warnings == [
        "no power reading: no PowerConsumedWatts and no PowerInputWatts",
        *(f"power supply 'Power Supply {n}': bay empty (Status.State Absent)" for n in (2, 3, 5, 6)),
    ]


def test_it_reads_a_power_sensor_in_kilowatts_and_an_untyped_legacy_document() -> None:
    sensor = {"@odata.type": "#Sensor.v1_12_0.Sensor", "Id": "TotalPower", "ReadingType": "Power"}
    parsed = parse_redfish_power(json.dumps({**sensor, "Reading": 1.2, "ReadingUnits": "kW"}))
    assert [(m.name, m.value, m.labels) for m in parsed.measurements] == [
        ("power_w", 1200.0, {"sensor": "TotalPower", "source_unit": "kW"})
    ]
    untyped = parse_redfish_power(json.dumps({"PowerControl": [{"PowerConsumedWatts": "69"}]}))
    assert [(m.name, m.value, m.labels) for m in untyped.measurements] == [("power_w", 69.0, {"control": "0"})]


def test_it_records_an_empty_bay_of_a_legacy_power_resource_and_reads_the_rest() -> None:
    rows = table("redfish_power", "redfish-power/dmtf-telemetry-Chassis-1-Power-bay3-absent.json")
    bay3 = {"psu": "Power Supply Bay 3"}
    assert rows[-1] == ("psu_state", "Absent", "", bay3)
    assert ("power_w", 8000.0, "W", {"control": "System Power Control"}) in rows
    assert [r[:2] for r in rows if r[0] == "psu_output_w"] == [("psu_output_w", 192.0), ("psu_output_w", 190.0)]
    assert not any(r[3].get("psu") == "Power Supply Bay 3" for r in rows[:-1])  # an empty bay has no reading
    text = (FIXTURES / "redfish-power/dmtf-telemetry-Chassis-1-Power-bay3-absent.json").read_text(encoding="utf-8")
    why = "power supply 'Power Supply Bay 3': bay empty (Status.State Absent)"
    assert parse_output("redfish_power", text).warnings == [why]


def test_it_records_an_empty_power_supply_bay_instead_of_refusing_the_document() -> None:
    assert table("redfish_power", "redfish-power/dmtf-rackmount1-PowerSupplies-Bay2-absent.json") == [
        ("psu_state", "Absent", "", {"psu": "Bay2"})
    ]


# --- redfish_pdu -----------------------------------------------------------------------------------


def test_it_reads_a_three_phase_mains_circuit() -> None:
    ac1 = {"circuit": "AC1", "circuit_type": "Mains"}
    rows = table("redfish_pdu", "redfish-pdu/dmtf-pdu-RackPDUs-1-Mains-AC1.json")
    total = rows[0]
    assert total[:3] == ("mains_power_w", pytest.approx(488.0), "W")
    assert total[3] == {"source": "sum of PolyPhasePowerWatts Line*ToNeutral", **ac1}
    assert rows[1:] == [
        ("phase_power_w", 198.4, "W", {"phase": "L1", **ac1}),
        ("phase_power_w", 231.5, "W", {"phase": "L2", **ac1}),
        ("phase_power_w", 58.1, "W", {"phase": "L3", **ac1}),
        ("phase_power_w", 738.9, "W", {"phase": "L1-L2", **ac1}),
        ("phase_power_w", 748.3, "W", {"phase": "L2-L3", **ac1}),
        ("phase_power_w", 759.6, "W", {"phase": "L3-L1", **ac1}),
        ("rated_current_a", 40.0, "A", ac1),
        ("phase_current_a", 8.02, "A", {"phase": "L1", **ac1}),
        ("phase_current_a", 8.66, "A", {"phase": "L2", **ac1}),
        ("phase_current_a", 6.91, "A", {"phase": "L3", **ac1}),
        ("neutral_current_a", 2.74, "A", ac1),
        ("phase_voltage_v", 117.8, "V", {"phase": "L1", **ac1}),
        ("phase_voltage_v", 116.6, "V", {"phase": "L2", **ac1}),
        ("phase_voltage_v", 118.5, "V", {"phase": "L3", **ac1}),
        ("line_voltage_v", 202.8, "V", {"phase": "L1-L2", **ac1}),
        ("line_voltage_v", 203.8, "V", {"phase": "L2-L3", **ac1}),
        ("line_voltage_v", 205.3, "V", {"phase": "L3-L1", **ac1}),
        ("breaker_state", "Normal", "", ac1),
    ]


def test_it_reads_a_branch_circuit() -> None:
    a = {"circuit": "A", "circuit_type": "Branch"}
    assert table("redfish_pdu", "power/redfish_pdu_dmtf_RackPDUs-1-Branches-A.json") == [
        ("branch_power_w", 937.4, "W", a),
        ("phase_power_w", 937.4, "W", {"phase": "L1", **a}),
        ("rated_current_a", 16.0, "A", a),
        ("phase_current_a", 5.19, "A", {"phase": "L1", **a}),
        ("phase_voltage_v", 118.2, "V", {"phase": "L1", **a}),
        ("line_voltage_v", 203.5, "V", {"phase": "L1-L2", **a}),
        ("breaker_state", "Normal", "", a),
    ]


@pytest.mark.parametrize(
    ("relative", "outlet", "watts", "amps", "volts", "rated"),
    [
        ("redfish-pdu/dmtf-pdu-RackPDUs-1-Outlets-A1.json", "A1", 197.4, 1.68, 117.5, 20.0),
        ("redfish-pdu/raritan-PX3-5722V-Outlet1.json", "1", 386.839, 1.65, 238.08, 16.0),
        ("power/redfish_pdu_enlogic_EN6850_outlet3_idle.json", "OUTLET 3", 0.0, 0.0, 229.10600280761719, 10.0),
    ],
)
def test_it_reads_an_outlet(relative: str, outlet: str, watts: float, amps: float, volts: float, rated: float) -> None:
    o = {"outlet": outlet}
    assert table("redfish_pdu", relative) == [
        ("outlet_power_w", watts, "W", o),
        ("outlet_current_a", amps, "A", o),
        ("outlet_voltage_v", volts, "V", o),
        ("rated_current_a", rated, "A", o),
        ("outlet_power_state", "On", "", o),
    ]


def test_it_reads_pdu_metrics_an_outlet_group_and_the_pdu_itself() -> None:
    assert table("redfish_pdu", "redfish-pdu/dmtf-pdu-RackPDUs-1-Metrics.json") == [
        ("pdu_power_w", 6438.0, "W", {"pdu": "1"})
    ]
    assert table("redfish_pdu", "power/redfish_pdu_raritan_PX3-5722V_outletgroup2.json") == [
        ("outlet_group_power_w", 825.97700000000012, "W", {"outlet_group": "2"})
    ]
    assert table("redfish_pdu", "redfish-pdu/dmtf-pdu-RackPDUs-1.json") == [
        ("pdu_capacity_va", 20000.0, "VA", {"pdu": "1"}),
        ("pdu_health", "OK", "", {"pdu": "1"}),
    ]
    assert table("redfish_pdu", "power/redfish_pdu_raritan_PX3-5722V_pdu.json") == [
        ("pdu_health", "OK", "", {"pdu": "1"})
    ]


def test_it_reads_a_single_phase_circuit_from_its_plain_current_and_voltage() -> None:
    doc = {
        "@odata.type": "#Circuit.v1_9_0.Circuit",
        "Id": "B",
        "CircuitType": "Branch",
        "CurrentAmps": {"Reading": 12.5},
        "Voltage": {"Reading": 230.0},
    }
    parsed = parse_redfish_pdu(json.dumps(doc))
    b = {"circuit": "B", "circuit_type": "Branch"}
    assert [(m.name, m.value, m.labels) for m in parsed.measurements] == [
        ("branch_power_w", None, {"missing": "neither PowerWatts nor PolyPhasePowerWatts", **b}),
        ("phase_current_a", 12.5, {"phase": "L1", "source": "CurrentAmps", **b}),
        ("phase_voltage_v", 230.0, {"phase": "L1", "source": "Voltage", **b}),
    ]


@pytest.mark.parametrize(
    ("relative", "row"),
    [
        (
            "redfish-pdu/dmtf-pdu-Sensor-CurrentA.json",
            ("phase_current_a", 8.92, "A", {"sensor": "CurrentA", "phase": "L1"}),
        ),
        (
            "redfish-pdu/dmtf-pdu-TransferSwitches-1-Sensor-CurrentA.json",
            ("phase_current_a", 8.92, "A", {"sensor": "CurrentA", "phase": "L1"}),
        ),
        (
            "redfish-pdu/dmtf-pdu-Sensor-VoltageAL1L2.json",
            ("line_voltage_v", 119.27, "V", {"sensor": "VoltageAL1L2", "phase": "L1-L2"}),
        ),
        (
            "redfish-pdu/dmtf-pdu-Sensor-VoltageAL1N.json",
            ("phase_voltage_v", 119.27, "V", {"sensor": "VoltageAL1N", "phase": "L1"}),
        ),
    ],
    ids=["chassis-current", "power-distribution-current", "line-to-line-voltage", "line-to-neutral-voltage"],
)
def test_it_reads_a_single_pdu_sensor(relative: str, row: tuple[Any, ...]) -> None:
    assert table("redfish_pdu", relative) == [row]


@pytest.mark.parametrize(
    ("reading_type", "context", "units", "expected"),
    [
        ("Current", "Line3", "mA", ("phase_current_a", 8.5, {"phase": "L3", "source_unit": "mA"})),
        ("Current", "Neutral", "A", ("neutral_current_a", 8500.0, {"electrical_context": "Neutral"})),
        ("Current", "Total", "A", ("current_a", 8500.0, {"electrical_context": "Total"})),
        ("Voltage", "Line2ToLine3", "V", ("line_voltage_v", 8500.0, {"phase": "L2-L3"})),
        ("Voltage", "Line3ToNeutral", "V", ("phase_voltage_v", 8500.0, {"phase": "L3"})),
        ("Power", "Line3ToLine1", "kW", ("phase_power_w", 8.5e6, {"phase": "L3-L1", "source_unit": "kW"})),
        ("Power", "Total", "W", ("power_w", 8500.0, {"electrical_context": "Total"})),
    ],
)
def test_it_maps_a_pdu_sensor_by_its_electrical_context(
    reading_type: str, context: str, units: str, expected: tuple[str, float, dict[str, str]]
) -> None:
    doc = json.loads((FIXTURES / "redfish-pdu/dmtf-pdu-Sensor-CurrentA.json").read_text(encoding="utf-8"))
    doc.update(ReadingType=reading_type, ElectricalContext=context, ReadingUnits=units, Reading=8500)
    (m,) = parse_redfish_pdu(json.dumps(doc)).measurements
    name, value, labels = expected
    assert (m.name, m.value, {k: v for k, v in m.labels.items() if k != "invalid"}) == (
        name,
        pytest.approx(value),
        {"sensor": "CurrentA", **labels},
    )


def test_it_reads_a_line_to_line_branch_circuit() -> None:
    a = {"circuit": "A", "circuit_type": "Branch"}
    assert table("redfish_pdu", "redfish-pdu/dmtf-pdu-TransferSwitches-1-Branches-A.json") == [
        ("branch_power_w", 1050.5, "W", a),
        ("phase_power_w", 1050.5, "W", {"phase": "L1-L2", **a}),
        ("rated_current_a", 16.0, "A", a),
        ("phase_current_a", 5.19, "A", {"phase": "L1", **a}),
        ("line_voltage_v", 202.4, "V", {"phase": "L1-L2", **a}),
        ("breaker_state", "Normal", "", a),
    ]
    doc = json.loads((FIXTURES / "redfish-pdu/dmtf-pdu-TransferSwitches-1-Branches-A.json").read_text(encoding="utf-8"))
    del doc["PowerWatts"]  # the branch's power is then its line-to-line load's
    rows = [(m.name, m.value, m.labels) for m in parse_redfish_pdu(json.dumps(doc)).measurements]
    assert rows[0] == ("branch_power_w", 1050.5, {"source": "sum of PolyPhasePowerWatts Line*ToLine*", **a})


def test_it_reads_a_plain_voltage_of_a_circuit_without_neutral_as_line_to_line() -> None:
    doc = json.loads((FIXTURES / "redfish-pdu/dmtf-pdu-TransferSwitches-1-Branches-A.json").read_text(encoding="utf-8"))
    doc["Voltage"] = doc.pop("PolyPhaseVoltage")["Line1ToLine2"]  # TwoPhase3Wire: L1, L2, PE
    rows = [(m.name, m.value, m.labels) for m in parse_redfish_pdu(json.dumps(doc)).measurements]
    a = {"circuit": "A", "circuit_type": "Branch"}
    assert ("line_voltage_v", 202.4, {"phase": "L1-L2", "source": "Voltage", **a}) in rows
    assert not [r for r in rows if r[0] == "phase_voltage_v"]


# --- redfish_cdu -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("relative", "loop", "supply", "ret", "flow", "delta", "heat"),
    [
        ("redfish-cdu/dmtf-cdu-PrimaryCoolantConnectors-1.json", "primary", 30.0, 40.0, 42.0, 10.0, 25480.0),
        ("power/redfish_cdu_dmtf_SecondaryCoolantConnectors-1.json", "secondary", 30.0, 48.0, 42.0, 18.0, 25310.0),
    ],
)
def test_it_reads_a_coolant_connector_with_heat_in_watts(
    relative: str, loop: str, supply: float, ret: float, flow: float, delta: float, heat: float
) -> None:
    c = {"loop": loop, "connector": "1"}
    assert table("redfish_cdu", relative) == [
        ("coolant_supply_c", supply, "C", c),
        ("coolant_return_c", ret, "C", c),
        ("coolant_flow_lpm", flow, "L/min", c),
        ("coolant_delta_c", delta, "C", c),
        ("rated_flow_lpm", 50.0, "L/min", c),
        ("heat_removal_w", pytest.approx(heat), "W", {"source_unit": "kW", **c}),
    ]


def test_it_reads_the_cooling_unit_its_fluid_and_its_health() -> None:
    fluid = [
        ("coolant_density_kg_m3", 1030.0, "kg/m3", {"cdu": "1", "coolant": "Water"}),
        ("coolant_specific_heat_kj_kgk", 3.974, "kJ/(kg K)", {"cdu": "1", "coolant": "Water"}),
    ]
    assert table("redfish_cdu", "redfish-cdu/dmtf-cdu-2024.1-CDUs-1-healthy.json") == [
        *fluid,
        ("cdu_health", "OK", "", {"cdu": "1"}),
    ]
    conditions = "The pump subsystem health is Critical.; Pump '2' has failed."
    assert table("redfish_cdu", "power/redfish_cdu_dmtf_CDUs-1-warning.json") == [
        *fluid,
        ("cdu_health", "Warning", "", {"cdu": "1", "rollup": "Critical", "conditions": conditions}),
    ]


def test_it_reads_pumps_leak_detectors_and_the_environment() -> None:
    assert table("redfish_cdu", "redfish-cdu/dmtf-cdu-Pumps-2-failed.json") == [
        ("pump_speed_pct", 0.0, "%", {"pump": "2"}),
        ("pump_health", "Critical", "", {"pump": "2", "state": "UnavailableOffline"}),
    ]
    assert table("redfish_cdu", "power/redfish_cdu_dmtf_Pumps-1-ok.json") == [
        ("pump_speed_pct", 38.5, "%", {"pump": "1"}),
        ("pump_health", "OK", "", {"pump": "1", "state": "Enabled"}),
    ]
    group = "Detectors in the CDU"
    assert table("redfish_cdu", "redfish-cdu/dmtf-cdu-LeakDetection.json") == [
        ("leak_detector", "OK", "", {"detector": "Moisture Leak Detector", "group": group}),
        ("leak_detector", "OK", "", {"detector": "Fluid Level Overflow", "group": group}),
    ]
    assert table("redfish_cdu", "power/redfish_cdu_dmtf_CDUs-1-EnvironmentMetrics.json") == [
        ("ambient_c", 24.0, "C", {}),
        ("humidity_pct", 26.0, "%", {}),
    ]


def test_it_reads_cdu_sensors() -> None:
    assert table("redfish_cdu", "power/redfish_cdu_dmtf_Sensor-PrimaryFlow.json") == [
        ("coolant_flow_lpm", 42.0, "L/min", {"sensor": "PrimaryFlow"})
    ]
    assert table("redfish_cdu", "power/redfish_cdu_dmtf_Sensor-PrimaryHeatLoad.json") == [
        ("heat_removal_w", 25480.0, "W", {"sensor": "PrimaryHeatLoad", "source_unit": "kW"})
    ]
    assert table("redfish_cdu", "power/redfish_cdu_dmtf_Sensor-SecondarySupplyTemp.json") == [
        ("coolant_supply_c", 30.0, "C", {"sensor": "SecondarySupplyTemp"})
    ]


def _flow_sensor(reading: float, units: str | None, kind: str = "LiquidFlowLPM") -> str:
    doc = {"@odata.type": "#Sensor.v1_12_0.Sensor", "Id": "Flow", "ReadingType": kind, "Reading": reading}
    return json.dumps({**doc, "ReadingUnits": units} if units is not None else doc)


@pytest.mark.parametrize(
    ("reading", "units", "kind", "lpm", "source"),
    [
        (42.0, "L/min", "LiquidFlowLPM", 42.0, None),
        (0.7, "L/s", "LiquidFlow", 42.0, "L/s"),
        (0.7, None, "LiquidFlow", 42.0, "L/s"),  # LiquidFlow is L/s by definition
        (2.52, "m3/h", "LiquidFlowLPM", 42.0, "m3/h"),
        (10.0, "[gal_us]/min", "LiquidFlowLPM", 37.85411784, "[gal_us]/min"),
    ],
)
def test_it_converts_liquid_flow_to_litres_per_minute(
    reading: float, units: str | None, kind: str, lpm: float, source: str | None
) -> None:
    (m,) = parse_redfish_cdu(_flow_sensor(reading, units, kind)).measurements
    assert (m.name, m.unit) == ("coolant_flow_lpm", "L/min")
    assert m.value == pytest.approx(lpm)
    assert m.labels.get("source_unit") == source


def test_it_records_a_flow_in_an_unknown_unit_as_missing() -> None:
    (m,) = parse_redfish_cdu(_flow_sensor(42.0, "furlong/fortnight")).measurements
    assert m.value is None
    assert m.labels["missing"] == "ReadingUnits 'furlong/fortnight' unknown: cannot convert to L/min"


# --- impossible values: flagged, and named by the rules the power-soak check declares ------------


def _connector(**readings: Any) -> str:
    doc: dict[str, Any] = {
        "@odata.type": "#CoolantConnector.v1_3_0.CoolantConnector",
        "@odata.id": "/redfish/v1/ThermalEquipment/CDUs/1/PrimaryCoolantConnectors/1",
        "Id": "1",
    }
    return json.dumps({**doc, **{k: {"Reading": v} for k, v in readings.items()}})


@pytest.mark.parametrize(
    ("kind", "text", "name"),
    [
        ("redfish_cdu", _connector(FlowLitersPerMinute=-3.0), "coolant_flow_lpm"),
        ("redfish_cdu", _connector(HeatRemovedkW=1e6), "heat_removal_w"),  # 1 GW
        ("redfish_cdu", _connector(SupplyTemperatureCelsius=900.0), "coolant_supply_c"),
        ("redfish_cdu", _connector(ReturnTemperatureCelsius=float("nan")), "coolant_return_c"),
        (
            "redfish_pdu",
            json.dumps({"@odata.type": "#Circuit.v1_9_0.Circuit", "PolyPhaseCurrentAmps": {"Line2": {"Reading": 1e6}}}),
            "phase_current_a",
        ),
        (
            "redfish_pdu",
            json.dumps({"@odata.type": "#Outlet.v1_4_0.Outlet", "Id": "A1", "Voltage": {"Reading": 11000}}),
            "outlet_voltage_v",
        ),
        (
            "redfish_pdu",
            json.dumps({"@odata.type": "#Outlet.v1_4_0.Outlet", "Id": "A1", "PowerWatts": {"Reading": -200}}),
            "outlet_power_w",
        ),
        ("redfish_power", '{"PowerControl": [{"PowerConsumedWatts": Infinity}]}', "power_w"),
        ("redfish_power", '{"PowerSupplies": [{"PowerInputWatts": 1e308}]}', "psu_input_w"),
        (
            "redfish_pdu",
            json.dumps(
                {"@odata.type": "#Sensor.v1_12_0.Sensor", "ReadingType": "Current", "ElectricalContext": "Line2"}
                | {"Reading": 1e6, "ReadingUnits": "A"}
            ),
            "phase_current_a",
        ),
        (
            "redfish_pdu",
            json.dumps(
                {"@odata.type": "#Sensor.v1_12_0.Sensor", "ReadingType": "Voltage", "ElectricalContext": "Line1ToLine2"}
                | {"Reading": 11, "ReadingUnits": "kV"}
            ),
            "line_voltage_v",
        ),
    ],
    ids=[
        "negative-flow",
        "gigawatt-heat",
        "900C",
        "nan-return",
        "MA-phase",
        "11kV",
        "negative-W",
        "inf-W",
        "1e308-W",
        "MA-sensor",
        "11kV-line-sensor",
    ],
)
def test_it_flags_an_impossible_value(kind: str, text: str, name: str) -> None:
    parsed = parse_output(kind, text)
    (m,) = [m for m in parsed.measurements if m.name == name]
    assert "invalid" in m.labels
    assert evidence.reason(evidence.problems([m], EVIDENCE)).startswith("impossible evidence: ")


def test_it_keeps_a_multi_megawatt_cdu_and_a_zero_amp_idle_outlet_possible() -> None:
    # 2.5 MW is a real CDU (above the W unit's 1 MW bound, hence its own rule); an idle outlet's
    # 0 A / 0 W is the real Enlogic capture in tests/fixtures/power.
    big = parse_output("redfish_cdu", _connector(HeatRemovedkW=2500.0)).measurements
    assert [m.labels.get("invalid") for m in big if m.name == "heat_removal_w"] == [None]
    idle = parse_output("redfish_pdu", (FIXTURES / "power/redfish_pdu_enlogic_EN6850_outlet3_idle.json").read_text())
    assert not evidence.problems(idle.measurements, EVIDENCE)


def test_it_flags_an_impossible_coolant_property() -> None:
    doc = {
        "@odata.type": "#CoolingUnit.v1_5_0.CoolingUnit",
        "Id": "1",
        "Coolant": {"DensityKgPerCubicMeter": 10, "SpecificHeatkJoulesPerKgK": 41.8},
    }
    parsed = parse_output("redfish_cdu", json.dumps(doc))
    assert [m.name for m in parsed.measurements if "invalid" in m.labels] == [
        "coolant_density_kg_m3",
        "coolant_specific_heat_kj_kgk",
    ]


def test_flag_impossible_counts_and_keeps_an_earlier_reason() -> None:
    ms = [Measurement(name="phase_current_a", value=-1.0, unit="A"), Measurement(name="power_w", value=5.0, unit="W")]
    ms[0].labels["invalid"] = "earlier"
    assert flag_impossible(ms) == 0
    assert ms[0].labels["invalid"] == "earlier"
    assert flag_impossible([Measurement(name="humidity_pct", value=101.0, unit="%")]) == 1


# --- documents that hold nothing, or are not what they claim ---------------------------------------


@pytest.mark.parametrize(
    ("kind", "doc"),
    [
        ("redfish_pdu", {"@odata.type": "#Sensor.v1_12_0.Sensor", "ReadingType": "Current", "ElectricalContext": [1]}),
        ("redfish_pdu", {"@odata.type": "#Sensor.v1_12_0.Sensor", "ReadingType": "Voltage", "ReadingUnits": {"x": 1}}),
        ("redfish_pdu", {"@odata.type": "#Sensor.v1_12_0.Sensor", "ReadingType": "Power", "Reading": "many"}),
        ("redfish_power", {"PowerSupplies": [{"Status": {"State": "Absent"}}, {"Status": "Absent"}, "Absent"]}),
        ("redfish_power", {"@odata.type": "#PowerSupply.v1_6_0.PowerSupply", "Status": {"State": "Absent"}}),
    ],
    ids=["context-list", "units-object", "reading-text", "odd-absent-members", "absent-untitled-bay"],
)
def test_it_never_passes_a_hostile_variant_of_the_new_forms(kind: str, doc: dict[str, Any]) -> None:
    try:
        parsed = parse_output(kind, json.dumps(doc))
    except EvidenceError:
        return
    assert all(m.value is None for m in parsed.measurements)  # nothing here is a reading


NESTED = '{"PowerControl": ' + "[" * 100_000 + "]" * 100_000 + "}"


@pytest.mark.parametrize("kind", ["redfish_power", "redfish_pdu", "redfish_cdu"])
@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "not JSON"),
        ("\x89PNG\r\n\x1a\n\x00\x00", "not JSON"),
        ('{"@odata.type": "#Power.v1_7_3.Power", "PowerControl": [{"PowerConsumedWatts": 3', "not JSON"),
        ("[1, 2, 3]", "not a JSON object"),
        (NESTED, "nested too deeply"),
        ('{"@odata.type": "#ComputerSystem.v1_20_0.ComputerSystem", "Id": "1"}', "is not one of"),
        ("{}", "is not one of"),
    ],
    ids=["empty", "binary", "truncated", "array", "nested", "other-type", "untyped-empty"],
)
def test_it_refuses_a_redfish_document_it_cannot_read(kind: str, text: str, why: str) -> None:
    with pytest.raises(EvidenceError, match=why):
        parse_output(kind, text)


@pytest.mark.parametrize(
    ("kind", "doc"),
    [
        ("redfish_power", {"@odata.type": "#Power.v1_7_3.Power", "Voltages": []}),
        ("redfish_power", {"@odata.type": "#Sensor.v1_12_0.Sensor", "ReadingType": "Temperature", "Reading": 30}),
        ("redfish_cdu", {"@odata.type": "#Sensor.v1_12_0.Sensor", "ReadingType": "Humidity", "Reading": 30}),
        ("redfish_cdu", {"@odata.type": "#EnvironmentMetrics.v1_5_0.EnvironmentMetrics"}),
        ("redfish_cdu", {"@odata.type": "#LeakDetection.v1_2_0.LeakDetection", "LeakDetectorGroups": []}),
        ("redfish_pdu", {"@odata.type": "#PowerDistribution.v1_6_0.PowerDistribution", "Id": "1"}),
        ("redfish_pdu", {"@odata.type": "#Sensor.v1_12_0.Sensor", "ReadingType": "Humidity", "Reading": 30}),
    ],
    ids=[
        "power-no-arrays",
        "power-sensor-wrong-type",
        "cdu-sensor-wrong-type",
        "empty-env",
        "no-detectors",
        "bare-pdu",
        "pdu-sensor-wrong-type",
    ],
)
def test_it_refuses_a_document_with_no_reading(kind: str, doc: dict[str, Any]) -> None:
    with pytest.raises(EvidenceError):
        parse_output(kind, json.dumps(doc))

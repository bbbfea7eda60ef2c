"""The power and cooling parsers (checks/power_readings.py, power_redfish.py, power_facility.py)
on every real output in tests/fixtures (value by value), on unit conversions, and on inputs that
must never read as a reading: a deactivated DCMI reading, a Redfish document with no reading,
impossible numbers, cut, empty, binary and deeply nested inputs. Hostile inputs built here stay
here; every fixture file is a real output (or a DMTF mockup) with its .source.txt."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from checks import evidence
from checks.base import EvidenceError, Measurement
from checks.parsers import PARSERS, parse_output
from checks.power_facility import parse_redfish_cdu, parse_redfish_pdu
from checks.power_readings import (
    EVIDENCE,
    POWER_KINDS,
    flag_impossible,
    parse_ipmitool_dcmi_power,
    parse_ipmitool_sdr_power,
)
from checks.power_redfish import parse_redfish_power

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"

Row = tuple[str, Any, str, dict[str, str]]


def table(kind: str, relative: str) -> list[Row]:
    """(name, value or text, unit, labels) of every measurement of one fixture, in order."""
    parsed = parse_output(kind, (FIXTURES / relative).read_text(encoding="utf-8"))
    return [
        (m.name, m.value if m.value is not None else (m.text or None), m.unit, m.labels) for m in parsed.measurements
    ]


def numbers(measurements: list[Measurement]) -> dict[str, float | None]:
    return {m.name: m.value for m in measurements}


def test_it_registers_every_power_kind() -> None:
    assert set(POWER_KINDS) <= set(PARSERS)
    assert [PARSERS[kind] for kind in POWER_KINDS] == [
        parse_ipmitool_dcmi_power,
        parse_ipmitool_sdr_power,
        parse_redfish_power,
        parse_redfish_pdu,
        parse_redfish_cdu,
    ]


# --- ipmitool dcmi power reading: real outputs ---------------------------------------------------

DCMI_ACTIVATED = [
    ("ipmitool-dcmi/dcmi-power-reading-activated-lovoo-18.txt", (215.0, 162.0, 276.0, 176.0, 1131466.0)),
    ("ipmitool-dcmi/dcmi-power-reading-activated-rabe-zabbix-101.txt", (197.0, 175.0, 242.0, 190.0, 123893.0)),
    ("power/dcmi_power_reading_activated_telegraf-1566.txt", (167.0, 124.0, 422.0, 156.0, 699043.0)),
]


@pytest.mark.parametrize(("relative", "expected"), DCMI_ACTIVATED)
def test_it_reads_an_activated_dcmi_power_reading(relative: str, expected: tuple[float, ...]) -> None:
    now, low, high, avg, period = expected
    assert table("ipmitool_dcmi_power", relative) == [
        ("power_w", now, "W", {}),
        ("power_w_min", low, "W", {}),
        ("power_w_max", high, "W", {}),
        ("power_w_avg", avg, "W", {}),
        ("sampling_period_s", period, "s", {}),
        ("power_reading_state", "activated", "", {}),
    ]


@pytest.mark.parametrize(
    ("relative", "watts"),
    [
        ("ipmitool-dcmi/dcmi-power-reading-deactivated-openbmc-witherspoon-3257.txt", "319 W"),
        ("power/dcmi_power_reading_deactivated_0W_phosphor-host-ipmid-167.txt", "0 W"),
    ],
)
def test_it_never_turns_a_deactivated_dcmi_reading_into_watts(relative: str, watts: str) -> None:
    text = (FIXTURES / relative).read_text()
    parsed = parse_output("ipmitool_dcmi_power", text)
    by_name = {m.name: m for m in parsed.measurements}
    for name in ("power_w", "power_w_min", "power_w_max", "power_w_avg"):
        assert by_name[name].value is None
        assert by_name[name].labels["reported"] == watts
        assert by_name[name].labels["missing"].startswith("Power reading state is: deactivated")
    assert by_name["sampling_period_s"].value is None
    assert by_name["sampling_period_s"].labels["reported"] == "0 s"
    assert by_name["power_reading_state"].text == "deactivated"
    assert parsed.warnings == ["DCMI power reading state is deactivated: no power measurement"]
    assert not [m for m in parsed.measurements if isinstance(m.value, float)]


# --- ipmitool dcmi: layouts and hostile text (built here) ----------------------------------------

DCMI_TEMPLATE = """
    Instantaneous power reading:                   {now} Watts
    Minimum during sampling period:                162 Watts
    Maximum during sampling period:                276 Watts
    Average power reading over sample period:      176 Watts
    IPMI timestamp:                           Wed Feb 15 12:49:51 2017
    Sampling period:                          {period}
    Power reading state is:                   activated

"""


def test_it_reads_a_timestamp_printed_without_its_newline() -> None:
    # Some ipmitool builds print the timestamp with no newline, so the sampling period follows it on
    # the same line (a Supermicro BMC in ateodorescu/home-assistant-ipmi#13 shows this layout).
    text = DCMI_TEMPLATE.format(now=109, period="00065530 Seconds.").replace("2017\n    Sampling", "2017    Sampling")
    assert numbers(parse_ipmitool_dcmi_power(text).measurements)["sampling_period_s"] == 65530.0


@pytest.mark.parametrize(
    ("period", "seconds"), [("00000005 Seconds.", 5.0), ("5 sec", 5.0), ("1 min", 60.0), ("1 hour", 3600.0)]
)
def test_it_converts_the_sampling_period_to_seconds(period: str, seconds: float) -> None:
    parsed = parse_ipmitool_dcmi_power(DCMI_TEMPLATE.format(now=215, period=period))
    assert numbers(parsed.measurements)["sampling_period_s"] == seconds


@pytest.mark.parametrize("now", ["-1", "70000000", "nan", "inf"])
def test_it_flags_an_impossible_dcmi_reading(now: str) -> None:
    parsed = parse_output("ipmitool_dcmi_power", DCMI_TEMPLATE.format(now=now, period="00000001 Seconds."))
    power = next(m for m in parsed.measurements if m.name == "power_w")
    assert "invalid" in power.labels
    assert evidence.problems([power], EVIDENCE)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "no DCMI power reading"),
        ("\x00\xff" * 500, "no DCMI power reading"),
        ("Error: DCMI request failed because: Invalid command (c1)\n", "Invalid command"),
        (DCMI_TEMPLATE.format(now=215, period="1 sec").split("IPMI timestamp")[0], "incomplete"),
        (DCMI_TEMPLATE.format(now=215, period="1 sec").replace("    Maximum during", "    Maxim"), "Maximum"),
        (DCMI_TEMPLATE.format(now="abc", period="1 sec"), "not a number"),
    ],
    ids=["empty", "binary", "dcmi-unsupported", "cut", "line-missing", "garbage-number"],
)
def test_it_refuses_dcmi_output_it_cannot_trust(text: str, why: str) -> None:
    with pytest.raises(EvidenceError, match=why):
        parse_output("ipmitool_dcmi_power", text)


# --- ipmitool sdr / sensor ------------------------------------------------------------------------


def test_it_reads_psu_input_power_from_sdr_elist() -> None:
    assert table("ipmitool_sdr_power", "ipmitool-dcmi/sdr-elist-psu-power-in-ibm-ha-ipmi-13.txt") == [
        ("psu_input_w", 132.0, "W", {"psu": "PS1 Power In"}),
        ("psu_input_w", 160.0, "W", {"psu": "PS2 Power In"}),
    ]


def test_it_reads_power_supply_states_without_inventing_watts() -> None:
    relative = "ipmitool-dcmi/sdr-power-supply-dgx1-ac-lost.txt"
    assert table("ipmitool_sdr_power", relative) == [
        ("psu_status", "Non-Redundant: Insufficient Resources", "", {"psu": "PSU Redundancy"}),
        ("psu_status", "Presence detected, Power Supply AC lost", "", {"psu": "PSU1 Status"}),
        ("psu_status", "Presence detected, Power Supply AC lost", "", {"psu": "PSU2 Status"}),
        ("psu_status", "Presence detected", "", {"psu": "PSU3 Status"}),
        ("psu_status", "Presence detected", "", {"psu": "PSU4 Status"}),
    ]
    warnings = parse_output("ipmitool_sdr_power", (FIXTURES / relative).read_text()).warnings
    assert warnings == ["PSU Alert: no reading (status ns)", "no power sensor in Watts among 6 rows"]


@pytest.mark.parametrize(
    ("relative", "expected", "warnings"),
    [
        ("power/sdr_type_current_dell_pwr_consumption_ha-ipmi-13.txt", ("Pwr Consumption", 98.0), []),
        (
            "power/sdr_type_current_system_level_ns_ha-ipmi-13.txt",
            ("System Level", 105.0),
            ["Current: no reading (status ns)"],
        ),
    ],
)
def test_it_reads_a_system_power_sensor_and_skips_one_with_no_reading(
    relative: str, expected: tuple[str, float], warnings: list[str]
) -> None:
    parsed = parse_output("ipmitool_sdr_power", (FIXTURES / relative).read_text())
    assert [(m.name, m.value, m.unit, m.labels) for m in parsed.measurements] == [
        ("power_w", expected[1], "W", {"sensor": expected[0]})
    ]
    assert parsed.warnings == warnings


def test_it_reads_the_watt_sensor_of_a_compact_sdr() -> None:
    rows = table("ipmitool_sdr_power", "ipmitool/ipmitool_sdr_compact_server_telegraf.txt")
    assert rows[0] == ("power_w", 210.0, "W", {"sensor": "Avg Power"})
    assert [r[0] for r in rows[1:]] == ["psu_status"] * 14
    assert rows[1] == ("psu_status", "0x00", "", {"psu": "Power Supply 1"})


def test_it_reads_ipmitool_sensor_rows_and_tells_input_from_output() -> None:
    text = (
        "PS1 Input Power  | 152.000    | Watts      | ok    | na        | na        | na        | na\n"
        "PS1 Output Power | 140.000    | Watts      | ok    | na        | na        | na        | na\n"
        "PS2 Input Power  | na         | Watts      | na    | na        | na        | na        | na\n"
        "Pwr Consumption  | -5.000     | Watts      | ok    | na        | na        | na        | na\n"
    )
    parsed = parse_output("ipmitool_sdr_power", text)
    assert [(m.name, m.value, m.labels.get("psu") or m.labels.get("sensor")) for m in parsed.measurements] == [
        ("psu_input_w", 152.0, "PS1 Input Power"),
        ("psu_output_w", 140.0, "PS1 Output Power"),
        ("power_w", -5.0, "Pwr Consumption"),
    ]
    assert parsed.warnings == ["PS2 Input Power: no reading (status na)"]
    assert parsed.measurements[2].labels["invalid"].endswith("= -5 W (a power must be a number in 0..1e+06)")


@pytest.mark.parametrize(
    "text",
    [
        "",
        "\x00" * 4096,
        "PS1 Power In     | 52h | ns  | 10.1 | No Reading\nPS2 Power In     | 53h | ns  | 10.2 | No Reading\n",
        "Current 1        | 6Ah | ok  | 10.1 | 0.40 Amps\n",
        "Inlet Temp       | 04h | ok  |  7.1 | 23 degrees C\n",
    ],
    ids=["empty", "nul", "all-ns", "amps-only", "no-power-sensor"],
)
def test_it_refuses_sdr_output_with_no_power_reading(text: str) -> None:
    with pytest.raises(EvidenceError):
        parse_output("ipmitool_sdr_power", text)


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
    assert all(m.value is None and m.labels["missing"] for m in parsed.measurements)
    # Absent blades and bays are no reading at all; the four present controls and two supplies are missing.
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
    assert parsed.warnings == ["no power reading: no PowerConsumedWatts and no PowerInputWatts"]


def test_it_reads_a_power_sensor_in_kilowatts_and_an_untyped_legacy_document() -> None:
    sensor = {"@odata.type": "#Sensor.v1_12_0.Sensor", "Id": "TotalPower", "ReadingType": "Power"}
    parsed = parse_redfish_power(json.dumps({**sensor, "Reading": 1.2, "ReadingUnits": "kW"}))
    assert [(m.name, m.value, m.labels) for m in parsed.measurements] == [
        ("power_w", 1200.0, {"sensor": "TotalPower", "source_unit": "kW"})
    ]
    untyped = parse_redfish_power(json.dumps({"PowerControl": [{"PowerConsumedWatts": "69"}]}))
    assert [(m.name, m.value, m.labels) for m in untyped.measurements] == [("power_w", 69.0, {"control": "0"})]


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
    ],
    ids=["negative-flow", "gigawatt-heat", "900C", "nan-return", "MA-phase", "11kV", "negative-W", "inf-W", "1e308-W"],
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
    ],
    ids=[
        "power-no-arrays",
        "power-sensor-wrong-type",
        "cdu-sensor-wrong-type",
        "empty-env",
        "no-detectors",
        "bare-pdu",
    ],
)
def test_it_refuses_a_document_with_no_reading(kind: str, doc: dict[str, Any]) -> None:
    with pytest.raises(EvidenceError):
        parse_output(kind, json.dumps(doc))


# --- the command line ------------------------------------------------------------------------------

CLI_CASES = [
    ("ipmitool_dcmi_power", "ipmitool-dcmi/dcmi-power-reading-activated-lovoo-18.txt", "power_w", 215.0),
    ("ipmitool_sdr_power", "ipmitool-dcmi/sdr-elist-psu-power-in-ibm-ha-ipmi-13.txt", "psu_input_w", 132.0),
    ("redfish_power", "power/redfish_power_dell_idrac_iserver.json", "power_w", 396.0),
    ("redfish_pdu", "redfish-pdu/dmtf-pdu-RackPDUs-1-Mains-AC1.json", "phase_current_a", 8.02),
    ("redfish_cdu", "redfish-cdu/dmtf-cdu-PrimaryCoolantConnectors-1.json", "heat_removal_w", 25480.0),
]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "checks", *args], cwd=REPO, capture_output=True, text=True, timeout=60, check=False
    )


@pytest.mark.parametrize(("kind", "relative", "name", "value"), CLI_CASES)
def test_it_prints_the_named_measurements_on_the_command_line(
    kind: str, relative: str, name: str, value: float
) -> None:
    done = cli("parse", kind, str(FIXTURES / relative))
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["kind"] == kind
    first = next(m for m in out["measurements"] if m["name"] == name)
    assert first["value"] == pytest.approx(value)


def test_it_prints_a_deactivated_reading_as_null_with_what_the_bmc_said() -> None:
    relative = "ipmitool-dcmi/dcmi-power-reading-deactivated-openbmc-witherspoon-3257.txt"
    out = json.loads(cli("parse", "ipmitool_dcmi_power", str(FIXTURES / relative)).stdout)
    power = next(m for m in out["measurements"] if m["name"] == "power_w")
    assert power["value"] is None and power["labels"]["reported"] == "319 W"


def test_it_refuses_to_judge_a_power_kind_no_check_consumes_yet(tmp_path: Path) -> None:
    done = cli("judge", "redfish_pdu", str(FIXTURES / "redfish-pdu/dmtf-pdu-RackPDUs-1-Metrics.json"))
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.splitlines() == [
        "error: no check judges redfish_pdu outputs yet; `parse redfish_pdu FILE` prints its measurements"
    ]
    cut = tmp_path / "cut.txt"
    cut.write_text((FIXTURES / "ipmitool-dcmi/dcmi-power-reading-activated-lovoo-18.txt").read_text()[:200])
    done = cli("parse", "ipmitool_dcmi_power", str(cut))
    assert (done.returncode, done.stdout) == (2, "")
    assert "incomplete" in done.stderr and len(done.stderr.splitlines()) == 1

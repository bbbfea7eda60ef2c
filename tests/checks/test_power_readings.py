"""The power and cooling parsers: the ipmitool ones (checks/power/readings.py) on every real
output in tests/fixtures, value by value, on sampling-period conversions, and on inputs that must
never read as a reading (a deactivated DCMI reading, sensors with no reading, impossible, cut,
empty and binary text); every kind through `python -m checks parse`. The Redfish kinds are in
tests/checks/test_power_redfish.py. Hostile inputs built here stay here; every fixture file is a
real output (or a DMTF mockup) with its .source.txt."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from checks.core import evidence
from checks.core.base import EvidenceError, Measurement
from checks.core.parsers import PARSERS, parse_output
from checks.power.facility import parse_redfish_cdu, parse_redfish_pdu
from checks.power.readings import (
    EVIDENCE,
    POWER_KINDS,
    parse_ipmitool_dcmi_power,
    parse_ipmitool_sdr_power,
)
from checks.power.redfish import parse_redfish_power

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


def test_it_judges_a_power_kind_only_as_part_of_a_soak(tmp_path: Path) -> None:
    done = cli("judge", "redfish_pdu", str(FIXTURES / "redfish-pdu/dmtf-pdu-RackPDUs-1-Metrics.json"))
    out = json.loads(done.stdout)
    assert done.returncode == 0 and out["check"] == "power_soak"
    assert out["verdict"]["status"] == "error" and "whole-cluster soak" in out["note"]
    assert out["parsed"]["measurements"], "the reading itself is shown"
    cut = tmp_path / "cut.txt"
    cut.write_text((FIXTURES / "ipmitool-dcmi/dcmi-power-reading-activated-lovoo-18.txt").read_text()[:200])
    done = cli("parse", "ipmitool_dcmi_power", str(cut))
    assert (done.returncode, done.stdout) == (2, "")
    assert "incomplete" in done.stderr and len(done.stderr.splitlines()) == 1

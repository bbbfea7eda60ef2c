"""The probe's node power parsers and poller (checks/probe/probe.py "node power (BMC)"), held to the
same real ipmitool outputs as the portal's parsers (checks/power/readings.py)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from checks.core.base import EvidenceError
from checks.core.sampling_columns import NODE_POWER_RULE
from checks.power.readings import parse_ipmitool_dcmi_power, parse_ipmitool_sdr_power
from checks.probe import probe
from checks.soak.physics import MAX_NODE_POWER_W

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
DCMI = sorted(p for d in ("ipmitool-dcmi", "power") for p in (FIXTURES / d).glob("*dcmi*power*reading*.txt"))
SDR = sorted(
    p
    for d in ("ipmitool-dcmi", "power", "ipmitool")
    for p in (FIXTURES / d).glob("*.txt")
    if "sdr" in p.name and not p.name.endswith(".source.txt")
)
DCMI = [p for p in DCMI if not p.name.endswith(".source.txt")]
ACTIVATED = FIXTURES / "ipmitool-dcmi" / "dcmi-power-reading-activated-lovoo-18.txt"


def test_it_reads_the_fixtures_it_claims() -> None:
    assert len(DCMI) >= 5 and len(SDR) >= 5
    for path in DCMI + SDR:
        assert path.with_name(path.name.replace(".txt", ".source.txt")).exists()


def test_it_keeps_the_bounds_of_the_portal() -> None:
    assert probe.MAX_NODE_POWER_W == MAX_NODE_POWER_W == NODE_POWER_RULE.high
    assert probe.MIN_NODE_POWER_W == NODE_POWER_RULE.low


@pytest.mark.parametrize("path", DCMI, ids=lambda p: p.name)
def test_it_reads_dcmi_as_the_portal_does(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    portal = {m.name: m for m in parse_ipmitool_dcmi_power(text).measurements}
    watts, problem = probe.parse_dcmi_power(text)
    if portal["power_w"].value is None:  # deactivated: no measurement, whatever number is printed
        assert watts is None and problem is not None and problem[0] == probe.ABSENT
        assert "deactivated" in problem[1]
    else:
        assert (watts, problem) == (portal["power_w"].value, None)


@pytest.mark.parametrize("path", SDR, ids=lambda p: p.name)
def test_it_sums_psu_input_power_as_the_portal_reads_it(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    try:
        parsed = parse_ipmitool_sdr_power(text)
    except EvidenceError:
        measurements = []
    else:
        measurements = parsed.measurements
    inputs = [m.value for m in measurements if m.name == "psu_input_w"]
    watts, problem = probe.parse_sdr_psu_input(text)
    # (None of these outputs has a PSU input sensor without a reading: test_it_refuses_a_partial_psu_sum.)
    if inputs and all(v is not None for v in inputs):
        assert (watts, problem) == (sum(v for v in inputs if v is not None), None)
    else:
        assert watts is None and problem is not None


def test_it_sums_the_ibm_power_supplies() -> None:
    text = (FIXTURES / "ipmitool-dcmi" / "sdr-elist-psu-power-in-ibm-ha-ipmi-13.txt").read_text(encoding="utf-8")
    assert probe.parse_sdr_psu_input(text) == (292.0, None)


def test_it_finds_no_psu_input_where_there_is_none() -> None:
    text = (FIXTURES / "power" / "sdr_type_current_dell_pwr_consumption_ha-ipmi-13.txt").read_text(encoding="utf-8")
    watts, problem = probe.parse_sdr_psu_input(text)
    assert watts is None and problem is not None and problem[0] == probe.UNAVAILABLE


def test_it_refuses_a_partial_psu_sum() -> None:
    text = "PS1 Power In     | 52h | ok  | 10.1 | 132 Watts\nPS2 Power In     | 53h | ns  | 10.2 | No Reading\n"
    watts, problem = probe.parse_sdr_psu_input(text)
    assert watts is None and problem is not None and problem[0] == probe.TRANSIENT
    assert problem[1] == "sdr: PS2 Power In has no reading (No Reading): the PSU sum would be partial"


@pytest.mark.parametrize("value", ["nan", "inf", "-5", "0", "100001", "1e400"])
def test_it_turns_impossible_dcmi_values_into_no_reading(value: str) -> None:
    text = ACTIVATED.read_text(encoding="utf-8").replace("  215 Watts", f"  {value} Watts")
    watts, problem = probe.parse_dcmi_power(text)
    assert watts is None and problem is not None and problem[0] == probe.TRANSIENT
    assert "finite" in problem[1] or "impossible" in problem[1]


@pytest.mark.parametrize("value", ["nan", "-3", "200000"])
def test_it_turns_an_impossible_psu_value_into_no_reading(value: str) -> None:
    text = f"PS1 Power In     | 52h | ok  | 10.1 | 132 Watts\nPS2 Power In     | 53h | ok  | 10.2 | {value} Watts\n"
    watts, problem = probe.parse_sdr_psu_input(text)
    assert watts is None and problem is not None and "impossible" in problem[1]


def test_it_calls_a_cut_dcmi_answer_garbled() -> None:
    text = ACTIVATED.read_text(encoding="utf-8")
    cut = text[: text.index("Maximum")] + "Maximum during sa\x00\x07#$%junk\n"
    watts, problem = probe.parse_dcmi_power(cut)
    assert watts is None and problem is not None and problem[0] == probe.TRANSIENT
    assert problem[1] == "dcmi: garbled answer: no 'Maximum during sampling period' line"
    no_state = text[: text.index("Power reading state")]
    assert probe.parse_dcmi_power(no_state)[1] == (
        probe.TRANSIENT,
        "dcmi: garbled answer: the closing 'Power reading state is:' line is missing",
    )
    with pytest.raises(EvidenceError):
        parse_ipmitool_dcmi_power(no_state)  # the portal refuses it too


@pytest.mark.parametrize(
    ("argv", "stderr", "kind"),
    [
        (probe.DCMI_ARGV, "\n    DCMI request failed because: Invalid command (c1)\n", "absent"),
        (probe.DCMI_ARGV, "DCMI request failed because: Node busy (c0)", "transient"),
        (probe.SDR_ARGV, "Could not open device at /dev/ipmi0 or /dev/ipmi/0: No such file", "unavailable"),
        (probe.SDR_ARGV, "Invalid command (c1)", "transient"),
    ],
)  # fmt: skip
def test_it_tells_an_absent_bmc_feature_from_a_passing_failure(argv: tuple[str, ...], stderr: str, kind: str) -> None:
    assert probe.ipmitool_failure(argv, 1, stderr)[0] == kind


def test_it_gives_a_sample_only_a_fresh_reading() -> None:
    power = probe._NodePower(interval=1.0, timeout=5.0)
    assert power.take(100.0) is None  # nothing read yet
    power.latest = (100.0, 6843.0)
    assert power.take(100.4) == 6843.0
    assert power.take(101.0) == 6843.0  # exactly one interval old
    assert power.take(101.01) is None  # stale: no reading, never the old one


def test_it_counts_repeated_errors_once_each() -> None:
    power = probe._NodePower(interval=1.0, timeout=5.0)
    for why in ("dcmi: a", "dcmi: b", "dcmi: a"):
        power._error(why)
    assert power.document()["errors"] == ["dcmi: a (2 times)", "dcmi: b"]
    assert math.isclose(power.document()["timeout_s"], 5.0)

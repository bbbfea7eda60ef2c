"""NVSwitch SXid lines in the kernel log: code, switch PCI address, device and link, one event per
multi-line report, and the Xid/SXid severity rules (checks/gpu/xid.py) through ecc_health."""

from __future__ import annotations

import pytest

from checks import get_check, run_check
from checks.core.base import FAIL, CommandOutput, NodeContext
from checks.core.parsers import parse_output
from checks.core.profiles import resolve_thresholds
from checks.gpu.xid import CRITICAL, KERNEL_LOG_MARK, WARN, kernel_log_command, parse_kernel_log
from tests.checks.probe_docs import REPO, gpu_doc, output, probe_doc

FIXTURE = REPO / "tests/fixtures/dmesg-xid/dmesg_sxid_nvswitch_ltssm_xid79_gpud.txt"
# A real head line (leptonai/gpud sxid README) and a real continuation, reused in other stamp styles.
HEAD = "nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 20034, Fatal, Link 48 LTSSM Fault Up"


def events(text: str) -> list[tuple[str, int, str, str, str, str]]:
    found, _ = parse_kernel_log(text)
    return [(e.kind, e.code, e.pci, e.device, e.link, e.severity) for e in found]


def test_it_reads_sxid_code_switch_pci_device_and_link_from_a_real_log() -> None:
    assert events(FIXTURE.read_text()) == [
        ("xid", 79, "0000:91:00", "", "", CRITICAL),
        ("sxid", 20034, "0000:06:00", "nvswitch1", "48", CRITICAL),
        ("sxid", 20034, "0000:05:00", "nvswitch0", "63", CRITICAL),
        # nvswitch2's "Severity 1 Engine instance 60" line has no head line in the excerpt: it is
        # kept as its own event (its port from the engine instance), never dropped.
        ("sxid", 20034, "0000:07:00", "nvswitch2", "60", CRITICAL),
        ("sxid", 20034, "0000:07:00", "nvswitch2", "37", CRITICAL),
        ("sxid", 20034, "0000:05:00", "nvswitch0", "62", CRITICAL),
    ]


def test_it_folds_a_reports_severity_and_data_lines_into_its_head_event() -> None:
    found, recognised = parse_kernel_log(FIXTURE.read_text())
    assert recognised == 13
    link63 = next(e for e in found if e.link == "63")
    assert link63.message == "Fatal, Link 63 LTSSM Fault Up"
    assert link63.detail.startswith("Data {0x10000000, 0x10000000,")
    link62 = next(e for e in found if e.link == "62")
    assert link62.detail == "Severity 1 Engine instance 62 Sub-engine instance 00"


def test_it_does_not_fold_another_ports_continuation_into_a_head() -> None:
    log = (
        "[10.0] nvidia-nvswitch2: SXid (PCI:0000:07:00.0): 20034, Fatal, Link 37 LTSSM Fault Up\n"
        "[10.1] nvidia-nvswitch2: SXid (PCI:0000:07:00.0): 20034, Severity 1 Engine instance 60 "
        "Sub-engine instance 00\n"
    )
    assert [e[4] for e in events(log)] == ["37", "60"]


@pytest.mark.parametrize(
    "line",
    [
        f"[6781753.400584] {HEAD}",  # dmesg
        f"[Fri Aug 30 11:43:09 2024] {HEAD}",  # dmesg -T
        f"2025-01-21T04:41:44,283302+00:00 {HEAD}",  # dmesg --time-format iso
        f"2026-11-30T15:00:00+0000 gpu001 kernel: {HEAD}",  # journalctl -o short-iso
        f"Nov 30 15:00:00 gpu001 kernel: [6781753.400584] {HEAD}",  # syslog
        f"<3>[6781753.400584] {HEAD}",  # dmesg -r (raw priority prefix)
        HEAD,  # no stamp at all
    ],
)
def test_it_extracts_code_and_switch_pci_in_every_stamp_style(line: str) -> None:
    assert events(line) == [("sxid", 20034, "0000:06:00", "nvswitch1", "48", CRITICAL)]


def test_it_takes_the_drivers_fatal_word_over_a_milder_catalogue_entry() -> None:
    # 12028 is catalogued as a warning (non-fatal egress PRIV error); a Fatal report is never milder.
    non_fatal = "[1.0] nvidia-nvswitch2: SXid (PCI:0000:85:00.0): 12028, Non-fatal, Link 61 egress PRIV error"
    fatal = non_fatal.replace("Non-fatal", "Fatal")
    assert events(non_fatal)[0][5] == WARN
    assert events(fatal)[0][5] == CRITICAL


def test_it_judges_an_uncatalogued_sxid_by_its_head_line_only() -> None:
    log = (
        "[1.0] nvidia-nvswitch0: SXid (PCI:0000:c3:00.0): 24007, Fatal, Link 30 sourcetrack timeout error\n"
        "[1.1] nvidia-nvswitch0: SXid (PCI:0000:c3:00.0): 24007, Severity 1 Engine instance 30 Sub-engine instance 00\n"
        "[1.2] nvidia-nvswitch0: SXid (PCI:0000:c3:00.0): 24007, Data {0x00000001}\n"
    )
    # One fatal event: the continuation lines (which do not say Fatal) add no milder duplicate.
    assert events(log) == [("sxid", 24007, "0000:c3:00", "nvswitch0", "30", CRITICAL)]


def test_it_fails_ecc_health_on_the_nvswitch_sxids_naming_each_switch() -> None:
    log = FIXTURE.read_text() + f"\n{KERNEL_LOG_MARK} source=dmesg rc=0\n"
    # gpu_doc puts GPU i at PCI bus 0x18 + i: the Xid 79 at 0000:91:00 maps to no GPU of this probe.
    kernel = CommandOutput(command=kernel_log_command(None), stdout=log, stderr="", exit_code=0)
    outputs = [*output(probe_doc(8, gpus=[gpu_doc(i) for i in range(8)])), kernel]
    thresholds = resolve_thresholds("ecc_health", "H100-SXM-8")
    measurements, verdict = run_check(get_check("ecc_health"), None, thresholds, outputs, NodeContext("gpu001"))
    assert verdict.status == FAIL
    for switch in ("0000:05:00", "0000:06:00", "0000:07:00"):
        assert f"NVSwitch {switch}: SXid 20034 (NVSwitch LTSSM fault (NVLink link down))" in verdict.reason
    sxids = [m for m in measurements if m.name == "sxid"]
    assert len(sxids) == 5
    assert all(m.ok is False for m in sxids)


def test_it_parses_the_fixture_through_the_cli_guard() -> None:
    parsed = parse_output("dmesg", FIXTURE.read_text())
    assert [m.labels.get("device") for m in parsed.measurements if m.labels["kind"] == "sxid"] == [
        "nvswitch1",
        "nvswitch0",
        "nvswitch2",
        "nvswitch2",
        "nvswitch0",
    ]


def test_each_nvswitch_event_is_an_sxid_measurement_with_code_switch_and_driver_severity() -> None:
    parsed = parse_output("dmesg", FIXTURE.read_text())
    assert [m.name for m in parsed.measurements] == ["xid", "sxid", "sxid", "sxid", "sxid", "sxid"]
    first = parsed.measurements[1]
    assert (first.value, first.gpu, first.text) == (20034.0, None, "Fatal, Link 48 LTSSM Fault Up")
    assert {k: first.labels[k] for k in ("kind", "pci", "device", "link", "severity", "driver_severity")} == {
        "kind": "sxid",
        "pci": "0000:06:00",
        "device": "nvswitch1",
        "link": "48",
        "severity": CRITICAL,
        "driver_severity": "Fatal",
    }
    # The headless "Severity 1 Engine instance 60" report says neither Fatal nor Non-fatal.
    assert "driver_severity" not in parsed.measurements[3].labels


@pytest.mark.parametrize(
    ("code", "word", "severity", "meaning"),
    [
        # Fabric Manager guide via gpud sxid.go: a corrected single-bit ECC error, no workload impact.
        (19049, "Non-fatal", WARN, "NVSwitch single-bit ECC error (corrected by the switch)"),
        # ... and a fatal double-bit one: reboot, inspect the switch if it returns.
        (19054, "Fatal", CRITICAL, "NVSwitch HDR RAM double-bit ECC error"),
    ],
)
def test_it_takes_the_sxid_meaning_and_severity_from_the_fabric_manager_table(
    code: int, word: str, severity: str, meaning: str
) -> None:
    line = f"[1.0] nvidia-nvswitch3: SXid (PCI:0000:88:00.0): {code}, {word}, Link 12 whatever the driver says"
    (m,) = parse_output("dmesg", line).measurements
    assert (m.name, m.labels["severity"], m.labels["meaning"], m.labels["driver_severity"]) == (
        "sxid",
        severity,
        meaning,
        word,
    )

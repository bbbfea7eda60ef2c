"""Xid/SXid parsing on real kernel logs, and ecc_health's kernel-log evidence."""

from __future__ import annotations

from pathlib import Path

import pytest

from checks import get_check, run_check
from checks.core.base import ERROR, FAIL, PASS, WARN, Command, CommandOutput, EvidenceError, NodeContext
from checks.core.parsers import parse_output
from checks.core.profiles import resolve_thresholds
from checks.gpu.nvidia_smi import parse_page_retirement
from checks.gpu.xid import (
    CRITICAL,
    INFO,
    KERNEL_LOG_LABEL,
    XID_CATALOGUE,
    catalogue_entry,
    kernel_log_command,
    normalise_pci,
    parse_dmesg,
    read_kernel_log,
)
from tests.checks.probe_docs import REPO, gpu_doc, output, probe_doc

FIXTURES = REPO / "tests/fixtures/dmesg-xid"
NODE = NodeContext(hostname="gpu001")


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def kernel_output(stdout: str, *, since: float | None = None, stderr: str = "") -> CommandOutput:
    return CommandOutput(command=kernel_log_command(since), stdout=stdout, stderr=stderr, exit_code=0)


def judge(log: str, doc: dict | None = None, *, since: float | None = None, stderr: str = "", **overrides):
    outputs = [*output(doc or probe_doc()), kernel_output(log, since=since, stderr=stderr)]
    thresholds = resolve_thresholds("ecc_health", "H100-SXM-8", overrides)
    return run_check(get_check("ecc_health"), None, thresholds, outputs, NodeContext(hostname="gpu001", since=since))


JOURNAL_XID79 = (
    "2026-11-30T15:00:00+0000 gpu001 kernel: Linux version 5.15.0-122-generic\n"
    "2026-11-30T15:10:02+0000 gpu001 kernel: NVRM: Xid (PCI:0000:1b:00): 79, pid='<unknown>', "
    "name=<unknown>, GPU has fallen off the bus.\n"
    "\n@@kiln-kernel-log source=journalctl rc=0\n"
)


def test_it_parses_every_dmesg_fixture() -> None:
    names = sorted(p.name for p in FIXTURES.glob("*.txt") if not p.name.endswith(".source.txt"))
    assert len(names) == 5
    for name in names:
        assert parse_dmesg(fixture(name)).measurements, name


def test_it_reads_xid119_from_dmesg_ctime_style() -> None:
    ms = parse_dmesg(fixture("dmesg_T_xid119_gsp_timeout_gpud.txt")).measurements
    assert [int(m.value) for m in ms] == [119] * 5
    first = ms[0]
    assert first.labels["pci"] == "0000:9b:00"
    assert (first.labels["kind"], first.labels["severity"]) == ("xid", CRITICAL)
    assert (first.labels["time"], first.labels["time_format"]) == ("2025-02-23T16:24:18", "ctime")
    assert "Timeout after 6s of waiting for RPC response from GPU4 GSP" in first.text
    assert first.gpu is None


def test_it_reads_xid31_and_xid48_with_their_severities() -> None:
    ms = parse_dmesg(fixture("dmesg_T_xid31_xid48_gcm.txt")).measurements
    assert [(int(m.value), m.labels["severity"]) for m in ms] == [(31, "warn"), (48, "critical")]
    assert ms[0].labels["pci"] == "000d:00:00"


def test_it_reads_iso_decoded_dmesg_and_ignores_other_kernel_lines() -> None:
    ms = parse_dmesg(fixture("dmesg_decode_iso_xid13_gpud.txt")).measurements
    assert [int(m.value) for m in ms] == [13] * 16 + [43]
    assert ms[0].labels["time"] == "2025-01-21T04:41:44.283302+00:00"
    assert ms[-1].labels["pci"] == "0000:38:00"


def test_it_reads_monotonic_stamps_and_sxids() -> None:
    ms = parse_dmesg(fixture("dmesg_xid94_xid64_sxid_pcie_limited_imbue.txt")).measurements
    assert [(int(m.value), m.labels["kind"]) for m in ms] == [(94, "xid"), (64, "xid"), (12028, "sxid")]
    assert [m.name for m in ms] == ["xid", "xid", "sxid"]  # the NVSwitch event is its own measurement
    assert ms[1].labels["severity"] == CRITICAL  # all reserved rows remapped: RMA candidate
    assert (ms[2].labels["pci"], ms[2].labels["severity"]) == ("0000:85:00", "warn")
    assert ms[0].labels["time"] == "2397166.983093"


def test_it_registers_the_dmesg_parser_and_rejects_non_logs() -> None:
    xids = parse_output("dmesg", fixture("dmesg_T_xid31_xid48_gcm.txt")).measurements
    assert [m.value for m in xids if m.name == "xid"] == [31.0, 48.0]
    with pytest.raises(EvidenceError, match="not a kernel log"):
        parse_dmesg("Segmentation fault\n")


def test_it_catalogues_every_required_xid_with_a_source() -> None:
    required = {13, 31, 43, 45, 48, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95, 109, 119, 120, 121, 140, 143, 149, 154}
    assert required <= set(XID_CATALOGUE)
    assert all(info.meaning and info.action and info.source for info in XID_CATALOGUE.values())
    assert {c for c in (48, 74, 79, 95, 119, 120) if XID_CATALOGUE[c].severity == CRITICAL} == {
        48,
        74,
        79,
        95,
        119,
        120,
    }


def test_it_follows_the_xid_catalogs_immediate_action_for_corrected_codes() -> None:
    # NVIDIA Xid catalog (docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html), column
    # "Resolution Bucket (Immediate Action)": IGNORE -> info, RESTART_APP -> warn, RESET_GPU /
    # CHECK_MECHANICALS / WORKFLOW_NVLINK5_ERR -> critical.
    expected = {
        43: INFO,  # IGNORE (was warn)
        63: "warn",  # IGNORE for a fleet; kept a warning at acceptance (new hardware should not remap)
        92: "warn",  # IGNORE for a fleet; kept a warning at acceptance
        121: INFO,  # IGNORE (was warn)
        137: INFO,  # IGNORE
        94: "warn",  # RESTART_APP
        139: "warn",  # RESTART_APP
        109: CRITICAL,  # RESET_GPU (was warn)
        54: CRITICAL,  # CHECK_MECHANICALS
        110: CRITICAL,  # RESET_GPU
        136: CRITICAL,  # RESET_GPU
        144: CRITICAL,  # WORKFLOW_NVLINK5_ERR (undecoded; see the 144-150 decode tests)
        147: "warn",  # undecoded; every row the decode sheet lists for it is IGNORE
        148: "warn",  # undecoded; every row the decode sheet lists for it is IGNORE
        150: CRITICAL,  # WORKFLOW_NVLINK5_ERR: every status in the decode is RESET_GPU
        155: CRITICAL,  # RESET_GPU
        158: CRITICAL,  # RESET_GPU
    }
    assert {code: XID_CATALOGUE[code].severity for code in expected} == expected
    # Without a message to decode: 145 as the workflow's worst case; 147 (never a reset) a warning.
    assert catalogue_entry("xid", 145).severity == CRITICAL
    assert catalogue_entry("xid", 147).severity == "warn"


# --- Xid 144-149: the catalog's "Xid 144-150 Decode" sheet -----------------------------------------
# Where a line comes from:
#   gpud-1174:  leptonai/gpud PR #1174 description ("kmsg input"), full 6-register lines
#   gpud-test:  leptonai/gpud components/accelerator/nvidia/xid tests (kmsg lines in test tables)
#   gpud-1160:  leptonai/gpud PR #1160 description
#   ffdg:       an NVIDIA field-diag (FFDG) procedure list quoting a GB200 FTS failure string
#   built:      constructed in the driver's format (as the lines above) with IntrInfo set to the
#               sheet's V1 (<R575, IntrInfo[9:0]) or V2 (>=R575, IntrInfo[6:0]) mask
NVL5_CASES = [
    # gpud-1174 (real V1 line): RLW_RXPIPE, IntrInfo 0x0409a0c2 (bits[9:0] 0011000010), status 0x8:
    # IGNORE / Non-fatal.
    (
        "145, RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2 0x00000008 0x00000001 0x00000000 0x00100000 0x00000004)",
        INFO,
        "IGNORE",
    ),
    # built from the gpud-1174 line, status 0x1 with bit 10 clear: IGNORE ...
    (
        "145, RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2 0x00000001 0x00000001 0x00000000 0x00100000 0x00000004)",
        INFO,
        "IGNORE",
    ),
    # ... and with bit 10 set ("Decode for action 2" 10011000010): RESET_GPU even though Nonfatal.
    (
        "145, RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a4c2 0x00000001 0x00000001 0x00000000 0x00100000 0x00000004)",
        CRITICAL,
        "RESET_GPU",
    ),
    # gpud-test (V2 IntrInfo 0x4 = RLW_REMAP): status 0x1 is XID_154_EVAL (RESTART_APP without a 154).
    ("145, RLW_REMAP Nonfatal XC0 i0 Link 00 (0x00000004 0x00000001 0x00000000 0x00000000)", "warn", "XID_154_EVAL"),
    # built (V2): RLW_REMAP status 0x40 is RESET_GPU / Fatal.
    ("145, RLW_REMAP Fatal XC0 i0 Link 00 (0x00000004 0x00000040 0x00000000 0x00000000)", CRITICAL, "RESET_GPU"),
    # built (V1 SAW_MVB 0000100001): status 0x4 IGNORE, 0x2 RESET_GPU.
    (
        "144, SAW_MVB Nonfatal XC0 i0 Link 07 (0x00000021 0x00000004 0x00000000 0x00000000 0x00000000 0x00000000)",
        INFO,
        "IGNORE",
    ),
    (
        "144, SAW_MVB Fatal XC0 i0 Link 07 (0x00000021 0x00000002 0x00000000 0x00000000 0x00000000 0x00000000)",
        CRITICAL,
        "RESET_GPU",
    ),
    # built (V2 TLW_RX_PIPE0 0001010): status 0x2 IGNORE, 0x4 RESET_GPU.
    ("146, TLW_RX_PIPE0 Nonfatal XC0 i0 Link 03 (0x0000000a 0x00000002 0x00000000 0x00000000)", INFO, "IGNORE"),
    ("146, TLW_RX_PIPE0 Fatal XC0 i0 Link 03 (0x0000000a 0x00000004 0x00000000 0x00000000)", CRITICAL, "RESET_GPU"),
    # built (V1 TREX 0110000100 / NVLPW_CTRL 0000000101): the only rows, both IGNORE.
    ("147, TREX Nonfatal XC0 i0 Link 02 (0x00000184 0x00000001 0x00000000 0x00000000)", INFO, "IGNORE"),
    ("148, NVLPW_CTRL Nonfatal XC0 i0 Link 02 (0x00000005 0x80000000 0x00000000 0x00000000)", INFO, "IGNORE"),
    # gpud-test (real V1 line, extra spaces as printed): NETIR_LINK_EVT, reason 100001 -> RESET_GPU.
    (
        "149, NETIR_LINK_EVT  Fatal   XC0 i0 Link 01 "
        "(0x021425c6 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)",
        CRITICAL,
        "RESET_GPU",
    ),
    # ffdg (real): NETIR_LINK_EVT reason 000000 -> RESET_GPU.
    (
        "149, NETIR_LINK_EVT Fatal XC0 i0 Link 17 (0x000625c6 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)",
        CRITICAL,
        "RESET_GPU",
    ),
    # gpud-1174 (real): NETIR (NETIR_INT, V1 0000000110) -> RESET_GPU.
    (
        "149, NETIR Fatal XC0 i0 Link -1 (0x000fe406 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)",
        CRITICAL,
        "RESET_GPU",
    ),
    # gpud-1160: reason 100110 is IGNORE in the sheet, but "Link Fatal": the driver says Fatal, so critical.
    (
        "149, NETIR_LINK_EVT Fatal XC0 i0 Link 00 (0x026001c6 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)",
        CRITICAL,
        "IGNORE",
    ),
    # built (V1 NETIR_BER_EVENT 1000100110): status 0x1 IGNORE / Non-fatal.
    (
        "149, NETIR_BER_EVENT Nonfatal XC0 i0 Link 05 "
        "(0x00000226 0x00000001 0x00000000 0x00000000 0x00000000 0x00000000)",
        INFO,
        "IGNORE",
    ),
]


@pytest.mark.parametrize(("message", "severity", "bucket"), NVL5_CASES)
def test_it_judges_nvlink5_xids_by_the_catalogs_144_150_decode(message: str, severity: str, bucket: str) -> None:
    line = f"[171167.620236] NVRM: Xid (PCI:0018:01:00): {message}"
    m = parse_dmesg(line).measurements[0]
    assert m.labels["severity"] == severity
    assert catalogue_entry("xid", int(m.value), m.text).action.startswith(f"{bucket} per the catalog's Xid 144-150")


@pytest.mark.parametrize(
    "message",
    [
        "RLW_REMAP Nonfatal XC0 i0 Link 00",  # no registers
        "RLW_REMAP Nonfatal XC0 i0 Link 00 (0x00000004)",  # no error status
        "RLW_REMAP Nonfatal XC0 i0 Link 00 (0x00000004 0x00000400 0x00000000 0x00000000)",  # status not listed
        "RLW_REMAP Nonfatal XC0 i0 Link 00 (0x0000000a 0x00000100 0x00000000 0x00000000)",  # IntrInfo: TLW_RX_PIPE0
        "RLW_NEWUNIT Nonfatal XC0 i0 Link 00 (0x00000004 0x00000100 0x00000000 0x00000000)",  # unknown unit
        "pid=1, NVLink error",  # not the NVLink5 format
    ],
)
def test_it_keeps_an_undecodable_xid145_critical(message: str) -> None:
    m = parse_dmesg(f"[1.0] NVRM: Xid (PCI:0018:01:00): 145, {message}").measurements[0]
    assert m.labels["severity"] == CRITICAL
    assert catalogue_entry("xid", 145, m.text) == XID_CATALOGUE[145]


def test_it_passes_ecc_on_an_ignorable_nvlink5_xid_and_fails_on_a_reset_one() -> None:
    ignorable = "[1.0] NVRM: Xid (PCI:0000:18:00): " + NVL5_CASES[0][0]
    _, verdict = judge(ignorable + "\n@@kiln-kernel-log source=dmesg rc=0\n")
    assert verdict.status == PASS
    fatal = "[2.0] NVRM: Xid (PCI:0000:18:00): " + NVL5_CASES[2][0]
    _, verdict = judge(ignorable + "\n" + fatal + "\n@@kiln-kernel-log source=dmesg rc=0\n")
    assert (verdict.status, verdict.reason) == (FAIL, "GPU 0: Xid 145 (NVLink RLW error) at 2.0")


def test_it_passes_ignored_xids_and_fails_a_context_switch_timeout() -> None:
    log = (
        "[1.0] NVRM: Xid (PCI:0000:18:00): 43, pid=1, Ch 00000010\n"
        "[2.0] NVRM: Xid (PCI:0000:18:00): 121, pid=1, C2C link corrected error\n"
        "@@kiln-kernel-log source=dmesg rc=0\n"
    )
    measurements, verdict = judge(log)
    assert verdict.status == PASS
    assert [(int(m.value), m.ok) for m in measurements if m.name == "xid"] == [(43, True), (121, True)]
    log = "[1.0] NVRM: Xid (PCI:0000:18:00): 109, pid=1, Ch 00000008\n@@kiln-kernel-log source=dmesg rc=0\n"
    _, verdict = judge(log)
    assert (verdict.status, verdict.reason) == (FAIL, "GPU 0: Xid 109 (Context switch timeout) at 1.0")


def test_it_clears_xid154_when_the_recovery_action_is_none() -> None:
    line = (
        "[  10.0] NVRM: Xid (PCI:0000:18:00): 154, GPU recovery action changed from 0x1 "
        "(GPU Reset Required) to 0x0 (None)"
    )
    assert parse_dmesg(line).measurements[0].labels["severity"] == "info"


def test_it_normalises_pci_addresses_from_nvml_and_xid_lines() -> None:
    assert normalise_pci("00000000:1B:00.0") == normalise_pci("PCI:0000:1b:00") == "0000:1b:00"


def test_it_parses_page_retirement_text_fixtures() -> None:
    folder = REPO / "tests/fixtures/nvidia-smi"
    bad = parse_page_retirement((folder / "nvsmi_q_page_retirement_8xGPU_bad.txt").read_text()).measurements
    clean = parse_page_retirement((folder / "nvsmi_q_page_retirement_8xGPU_clean.txt").read_text()).measurements
    assert len(bad) == len(clean) == 24
    gpu1 = {m.name: m.value for m in bad if m.gpu == 1}
    assert gpu1 == {"retired_pages_single_bit": 2, "retired_pages_double_bit": 61, "retired_pages_pending": 1}
    assert all(m.value == 0 for m in clean)


# --- ecc_health with the kernel log ----------------------------------------------------------------


def test_it_fails_ecc_naming_the_gpu_of_an_xid79() -> None:
    doc = probe_doc(8, gpus=[gpu_doc(i) for i in range(8)])  # gpu_doc: bus 0x18 + index -> GPU 3 at 1b
    measurements, verdict = judge(JOURNAL_XID79, doc)
    assert verdict.status == FAIL
    assert verdict.reason == "GPU 3: Xid 79 (GPU has fallen off the bus) at 2026-11-30T15:10:02+00:00"
    xid = next(m for m in measurements if m.name == "xid")
    assert (xid.gpu, xid.value, xid.ok) == (3, 79, False)
    assert next(m for m in measurements if m.name == "kernel_log").text == "journalctl"


def test_it_passes_with_a_clean_kernel_log_and_says_so() -> None:
    _, verdict = judge("-- No entries --\n\n@@kiln-kernel-log source=journalctl rc=0\n", since=1.7e9)
    assert verdict.status == PASS
    assert verdict.reason.endswith("; no Xid events in the kernel log (journalctl)")


def test_it_warns_on_application_xids_and_ignores_listed_codes() -> None:
    log = (
        "[1.0] NVRM: Xid (PCI:0000:18:00): 13, pid=1, Graphics SM Warp Exception\n@@kiln-kernel-log source=dmesg rc=0\n"
    )
    _, verdict = judge(log)
    assert (verdict.status, verdict.reason) == (WARN, "GPU 0: Xid 13 (Graphics engine exception) at 1.0")
    _, verdict = judge(log, xid_ignore_codes="13, 31")
    assert verdict.status == PASS


def test_it_fails_extra_codes_named_in_xid_fail_codes() -> None:
    log = "[1.0] NVRM: Xid (PCI:0000:18:00): 94, pid=1, Ch 00000008\n@@kiln-kernel-log source=dmesg rc=0\n"
    assert judge(log)[1].status == WARN
    assert judge(log, xid_fail_codes="94")[1].status == FAIL


def test_it_rejects_badly_written_code_lists() -> None:
    from checks.core.base import ParamsError

    with pytest.raises(ParamsError, match="xid_fail_codes"):
        resolve_thresholds("ecc_health", None, {"xid_fail_codes": "79;48"})


def test_it_drops_dmesg_events_from_before_the_run() -> None:
    log = (
        "2026-11-30T14:00:00,000000+00:00 NVRM: Xid (PCI:0000:18:00): 79, old\n"
        "2026-11-30T15:30:00,000000+00:00 NVRM: Xid (PCI:0000:19:00): 48, new\n"
        "@@kiln-kernel-log source=dmesg rc=0\n"
    )
    since = 1796050800.0  # 2026-11-30T15:00:00Z
    measurements, verdict = judge(log, since=since)
    assert [int(m.value) for m in measurements if m.name == "xid"] == [48]
    assert verdict.reason.startswith("GPU 1: Xid 48 (Double-bit ECC error (DBE))")


def test_it_fails_rather_than_errors_for_a_gpu_silent_after_a_critical_xid() -> None:
    gpus = [gpu_doc(i) for i in range(8)]
    gpus[3] = {"index": 3, "pci_bus_id": "00000000:1B:00.0", "errors": {"handle": "GPU is lost"}}
    _, verdict = judge(JOURNAL_XID79, probe_doc(8, gpus=gpus))
    assert verdict.status == FAIL
    assert "GPU 3: not responding after Xid 79 (GPU is lost)" in verdict.reason


@pytest.mark.parametrize(
    ("stdout", "stderr", "expected"),
    [
        (
            "-- No entries --\n@@kiln-kernel-log source=journalctl rc=0\n@@kiln-kernel-log source=dmesg rc=1\n",
            "Hint: You are currently not seeing messages from other users and the system.\n"
            "dmesg: read kernel buffer failed: Operation not permitted\n",
            "kernel log unreadable: journalctl: Hint: You are currently not seeing messages from other users "
            "and the system.; dmesg exited 1: dmesg: read kernel buffer failed: Operation not permitted",
        ),
        (
            "@@kiln-kernel-log source=dmesg rc=127\n",
            "dmesg: command not found\n",
            "kernel log unreadable: dmesg exited 127: dmesg: command not found",
        ),
        ("", "sh: 1: cannot fork\n", "kernel log unreadable: the reader printed no end marker: sh: 1: cannot fork"),
    ],
)
def test_it_errors_when_the_kernel_log_is_unreadable(stdout: str, stderr: str, expected: str) -> None:
    measurements, verdict = judge(stdout, stderr=stderr)
    assert (verdict.status, verdict.reason) == (ERROR, expected)
    assert measurements == []


def test_it_builds_the_kernel_log_command_as_argv_with_the_run_start() -> None:
    commands = get_check("ecc_health").commands(
        get_check("ecc_health").make_params(None), NodeContext("n", since=1.5e9)
    )
    kernel = commands[-1]
    assert kernel.label == KERNEL_LOG_LABEL
    assert kernel.argv[:2] == ("sh", "-c") and kernel.argv[3:] == ("sh", "1500000000")
    assert "journalctl -k --since" in kernel.argv[2]
    assert kernel_log_command(None).argv[-1] == ""


def test_it_treats_a_log_with_no_timestamps_as_unreadable() -> None:
    out = CommandOutput(
        Command(("sh",), 5, label=KERNEL_LOG_LABEL), "garbage\n@@kiln-kernel-log source=dmesg rc=0\n", "", 0
    )
    with pytest.raises(EvidenceError, match="dmesg printed no kernel log lines"):
        read_kernel_log(out)


# --- the simulators, end to end through the real local transport -----------------------------------


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory):
    from testbed.sim import build_simulator

    return build_simulator(tmp_path_factory.mktemp("sim"))


def run_on_sim(sim, tmp_path: Path, kind: str, *, since: float | None, path: str | None = None, **faults):
    from testbed.sim import node_env, write_state
    from worker.ssh import LocalTransport, NodeTarget

    state = tmp_path / "gpu01" / "state"
    write_state(state, node="gpu01", **faults)
    env = node_env(sim, state)
    if path is not None:
        env["PATH"] = path
    transport = LocalTransport(NodeTarget(hostname="gpu01", transport="local", local_env=env))
    check = get_check(kind)
    node = NodeContext(hostname="gpu01", since=since)
    outputs = [transport.run(c) for c in check.commands(check.make_params(None), node)]
    return run_check(check, None, resolve_thresholds(kind, "H100-SXM-8"), outputs, node)


def test_it_passes_ecc_on_a_healthy_simulated_node(sim, tmp_path: Path) -> None:
    import time

    pytest.importorskip("pynvml")
    _, verdict = run_on_sim(sim, tmp_path, "ecc_health", since=time.time() - 2)
    assert verdict.status == PASS, verdict.reason
    assert "(journalctl)" in verdict.reason


def test_it_fails_ecc_on_a_simulated_xid79(sim, tmp_path: Path) -> None:
    import time

    pytest.importorskip("pynvml")
    measurements, verdict = run_on_sim(sim, tmp_path, "ecc_health", since=time.time() - 2, xid=79, xid_gpu=3)
    assert verdict.status == FAIL
    assert verdict.reason.startswith("GPU 3: Xid 79 (GPU has fallen off the bus) at ")
    assert [m.gpu for m in measurements if m.name == "xid"] == [3]


def test_it_falls_back_to_dmesg_without_journalctl(sim, tmp_path: Path) -> None:
    import os
    import sys
    import time

    pytest.importorskip("pynvml")
    bare = tmp_path / "bin"
    bare.mkdir()
    for tool in ("dmesg", "nvidia-smi"):
        os.symlink(sim.bin_dir / tool, bare / tool)
    os.symlink("/bin/sh", bare / "sh")
    path = f"{bare}:{Path(sys.executable).parent}"
    measurements, verdict = run_on_sim(sim, tmp_path, "ecc_health", since=time.time() - 2, path=path, xid=48, xid_gpu=1)
    assert verdict.status == FAIL
    assert verdict.reason.startswith("GPU 1: Xid 48 (Double-bit ECC error (DBE)) at ")
    assert next(m for m in measurements if m.name == "kernel_log").text == "dmesg"
    # Boot messages an hour old are before the run start: only the Xid remains.
    assert len([m for m in measurements if m.name == "xid"]) == 1

"""Every captured output of a supported kind parses through `python -m checks parse`.

Each fixture is also pinned value by value in its check's own tests; this guards the whole set:
a new fixture of a supported kind that does not parse fails here, and every shared fixture of a
supported kind must be copied into tests/fixtures with its .source.txt.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from checks.__main__ import main as checks_cli

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
SHARED = REPO.parent / "shared" / "fixtures"

# fixture file (glob, under tests/fixtures) -> parser kind
KINDS: dict[str, str] = {
    "dcgmi/*.json": "dcgmi_diag",
    "dcgmi/*.txt": "dcgmi_diag",
    "dmesg-xid/*.txt": "dmesg",
    "elbencho/*.txt": "elbencho",
    "enroot/*.txt": "enroot_version",
    "fio/*.json": "fio",
    "gpu-burn/*.txt": "gpu_burn",
    "ibstat/*.txt": "ibstat",
    "ior/*.txt": "ior",
    "lspci/*.txt": "lspci_acs",
    "ipmitool/*.txt": "ipmitool_sdr",
    "ipmitool-fru/*.txt": "ipmitool_fru",
    "ipmitool-dcmi/dcmi-*.txt": "ipmitool_dcmi_power",
    "ipmitool-dcmi/sdr-*.txt": "ipmitool_sdr_power",
    "power/dcmi_*.txt": "ipmitool_dcmi_power",
    "power/sdr_*.txt": "ipmitool_sdr_power",
    "power/redfish_cdu_*.json": "redfish_cdu",
    "power/redfish_pdu_*.json": "redfish_pdu",
    "power/redfish_power_*.json": "redfish_power",
    "mdtest/*.txt": "mdtest",
    "nccl-tests/*_perf_*.txt": "nccl",
    "nccl-alltoall/*.txt": "nccl",
    "nvbandwidth/*.txt": "nvbandwidth",
    "perftest/*.txt": "perftest",
    "nvidia-smi/*.xml": "nvidia_smi_xml",
    "nvidia-smi-topo/*.txt": "nvidia_smi_topo",
    "nvidia-smi/nvsmi_nvlink_status_*.txt": "nvlink_status",
    "nvidia-smi/nvsmi_q_page_retirement_*.txt": "nvsmi_page_retirement",
    "nvidia-smi-fabric/nvidia-smi-q-*.txt": "nvidia_smi_fabric",
    "nvidia-smi-fabric/nvidia-smi-q-h100x8-*.txt": "nvidia_smi_q",
    "nvidia-smi-fabric/fabricmanager-log-*.log": "fabricmanager_log",
    "ofed_info/*.txt": "ofed_info",
    "proc-cmdline/*.txt": "kernel_cmdline",
    "pyxis/*.txt": "srun_container",
    "redfish/*.json": "redfish_thermal",
    "redfish-cdu/*.json": "redfish_cdu",
    "redfish-pdu/*.json": "redfish_pdu",
    "redfish-power/*.json": "redfish_power",
    "slurm-version/*.txt": "slurm_version",
    "ucx_info/*.txt": "ucx_info",
}
# Captures with nothing to trust, and the CLI must say so (exit 2): fixture -> (kind, what it says). A
# crashed tool; two perftest captures transcribed one line short of perftest's closing dashed line (their
# -complete twins carry it), which Kiln cannot tell from a cut table; an IO500 summary, whose mdtest
# phases are whole-phase kIOPS totals, not mdtest's per-operation table.
UNPARSEABLE: dict[str, tuple[str, str]] = {
    "mdtest/io500-sc20_v3-exascaler-cloud-azure-64tasks.txt": ("mdtest", "an IO500 summary, not mdtest output"),
    "nccl-tests/mpirun_not_enough_slots_failure_gcm.txt": ("nccl", "not enough slots"),
    "perftest/ib_read_lat-roce-sriov-vf-cpufreq-warnings-spiderpool.txt": ("perftest", "table not closed"),
    "perftest/ib_write_bw-a-use_cuda-dmabuf-roce100g-gpu-operator-docs.txt": ("perftest", "table not closed"),
}
SUPPORTED_DIRS = {pattern.split("/")[0] for pattern in KINDS}


def cases() -> list[tuple[str, str]]:
    found = []
    for pattern, kind in KINDS.items():
        for path in sorted(FIXTURES.glob(pattern)):
            relative = str(path.relative_to(FIXTURES))
            if not path.name.endswith(".source.txt") and relative not in UNPARSEABLE:
                found.append((relative, kind))
    return found


def parse_in_a_process(kind: str, path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "checks", "parse", kind, str(path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def parse(kind: str, path: Path) -> subprocess.CompletedProcess[str]:
    """`python -m checks parse KIND PATH`, its `main` called in this process (a new interpreter per
    fixture cost 0.2 s of CPU each); test_the_command_line_parses_as_its_own_process runs it as one."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = checks_cli(["parse", kind, str(path)])
    return subprocess.CompletedProcess(["checks", "parse", kind, str(path)], code, out.getvalue(), err.getvalue())


@pytest.mark.parametrize(("relative", "kind"), cases())
def test_it_parses_every_fixture_of_a_supported_kind(relative: str, kind: str) -> None:
    result = parse(kind, FIXTURES / relative)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["kind"] == kind
    assert out["measurements"], f"{relative}: no measurements"
    for m in out["measurements"]:
        assert set(m) == {"name", "value", "unit", "gpu", "labels"}


@pytest.mark.parametrize(("relative", "kind", "reason"), sorted((r, k, why) for r, (k, why) in UNPARSEABLE.items()))
def test_it_exits_2_with_a_reason_on_a_crashed_run(relative: str, kind: str, reason: str) -> None:
    result = parse(kind, FIXTURES / relative)
    assert result.returncode == 2
    assert result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1
    assert reason in result.stderr


def test_the_command_line_parses_as_its_own_process() -> None:
    (relative, kind), [(crashed, (crashed_kind, reason))] = cases()[0], sorted(UNPARSEABLE.items())[:1]
    assert parse_in_a_process(kind, FIXTURES / relative).stdout == parse(kind, FIXTURES / relative).stdout
    failed = parse_in_a_process(crashed_kind, FIXTURES / crashed)
    assert (failed.returncode, failed.stdout) == (2, "") and reason in failed.stderr


def test_it_has_copied_every_shared_fixture_of_a_supported_kind_with_its_source() -> None:
    if not SHARED.is_dir():
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true and no shared fixtures at {SHARED}")
        pytest.skip(f"no shared fixtures at {SHARED}")
    missing = [
        str(path.relative_to(SHARED))
        for path in SHARED.rglob("*")
        if path.is_file() and path.parent.name in SUPPORTED_DIRS and not (FIXTURES / path.relative_to(SHARED)).exists()
    ]
    assert not missing
    covered = {relative for relative, _ in cases()} | set(UNPARSEABLE)
    for relative in covered:
        source = (FIXTURES / relative).with_suffix(".source.txt")
        assert source.exists(), f"{relative} has no .source.txt"
    uncovered = [
        str(p.relative_to(FIXTURES))
        for d in SUPPORTED_DIRS
        for p in (FIXTURES / d).iterdir()
        if not p.name.endswith(".source.txt") and str(p.relative_to(FIXTURES)) not in covered
    ]
    assert not uncovered, f"fixtures no parser covers: {uncovered}"

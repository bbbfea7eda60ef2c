"""`python -m checks` as a user who scripts would run it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from checks import REGISTRY
from checks.__main__ import main
from checks.core.parsers import PARSERS
from checks.core.raw_outputs import RAW_JUDGES
from tests.checks.probe_docs import A100_MIG, REPO, fixture, probe_doc
from tests.checks.test_parser_fuzz import fixtures


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "checks", *args], cwd=REPO, capture_output=True, text=True, timeout=60, check=False
    )


def test_it_parses_probe_json_with_default_thresholds(tmp_path: Path) -> None:
    doc = probe_doc(7)
    path = tmp_path / "probe.json"
    path.write_text(json.dumps(doc))
    result = run("parse", "gpu_inventory", str(path))
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["kind"] == "gpu_inventory"
    assert out["verdict"]["status"] == "pass"  # no profile: 7 GPUs is fine
    assert {"name": "gpu_count", "value": 7.0}.items() <= out["measurements"][0].items()

    result = run("parse", "gpu_inventory", str(path), "--profile", "H100-SXM-8")
    verdict = json.loads(result.stdout)["verdict"]
    assert (verdict["status"], verdict["reason"]) == ("fail", "expected 8 GPUs, found 7")


def test_it_reports_unusable_output_as_an_error_verdict(tmp_path: Path) -> None:
    path = tmp_path / "garbage.txt"
    path.write_text("Segmentation fault\n")
    out = json.loads(run("parse", "ecc_health", str(path)).stdout)
    assert out["verdict"]["status"] == "error"
    assert out["measurements"] == []


def test_it_converts_nvidia_smi_xml_for_every_probe_check() -> None:
    pytest.importorskip("checks.probe.probe")
    result = run("judge", "nvidia_smi_xml", str(fixture(A100_MIG)), "--profile", "H100-SXM-8")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["kind"] == "nvidia_smi_xml"
    assert out["probe"]["driver_version"] == "535.54.03"
    statuses = {c["kind"]: c["verdict"]["status"] for c in out["checks"]}
    # MIG hides row remapping (error), the A100 is not an H100 (fail); the other probe checks lack
    # the rest of their evidence in a lone XML file (error), never a pass.
    assert statuses["ecc_health"] == "error" and statuses["gpu_inventory"] == "fail"
    assert "pass" not in statuses.values()


def test_it_judges_xml_given_to_a_check_kind() -> None:
    pytest.importorskip("checks.probe.probe")
    out = json.loads(run("parse", "ecc_health", str(fixture(A100_MIG))).stdout)
    assert out["kind"] == "ecc_health"
    assert out["verdict"]["status"] == "error"


def test_it_lists_kinds_with_defaults() -> None:
    result = run("list", "--profile", "H100-SXM-8")
    assert result.returncode == 0
    kinds = json.loads(result.stdout)["kinds"]
    assert kinds["ecc_health"]["params"] == {"timeout_s": 60}
    assert kinds["gpu_inventory"]["thresholds"]["expected_gpu_count"] == 8


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("parse", "nccl_allreduce_x", "x.json"), "unknown kind 'nccl_allreduce_x'"),
        (("parse", "ecc_health", "/nonexistent/probe.json"), "cannot read /nonexistent/probe.json"),
        (("parse", "ecc_health", "x.json", "--profile", "H100"), "unknown profile 'H100'"),
    ],
)
def test_it_exits_2_with_a_clear_message(args: tuple[str, ...], message: str) -> None:
    result = run(*args)
    assert result.returncode == 2
    assert message in result.stderr
    assert result.stdout == ""


def test_it_exits_2_on_a_file_that_is_not_nvidia_smi_xml(tmp_path: Path) -> None:
    pytest.importorskip("checks.probe.probe")
    path = tmp_path / "x.xml"
    path.write_text("<?xml version='1.0'?><other/>")
    result = run("parse", "nvidia_smi_xml", str(path))
    assert result.returncode == 2
    assert "not nvidia-smi XML" in result.stderr


# --- every parser kind, judged or refused in one line -------------------------------------------


def test_it_judges_raw_gpu_burn_and_ibstat_which_it_used_to_call_unknown() -> None:
    burn = run("judge", "gpu_burn", str(REPO / "tests/fixtures/gpu-burn/gpu_burn_8xA100-80GB_doubles_tc.txt"))
    assert burn.returncode == 0, burn.stderr
    out = json.loads(burn.stdout)
    assert (out["kind"], out["check"]) == ("gpu_burn", "burn_in")
    # gpu_burn's own results are read, but burn_in also needs NVML telemetry: error, never pass.
    assert out["verdict"]["status"] == "error"
    assert out["verdict"]["reason"].startswith("no telemetry samples during the burn")
    assert len([m for m in out["measurements"] if m["name"] == "gflops"]) == 8
    assert "telemetry" in out["note"]

    ib = run("judge", "ibstat", str(REPO / "tests/fixtures/ibstat/ibstat_H100_node_all_active_roce.txt"))
    assert ib.returncode == 0, ib.stderr
    out = json.loads(ib.stdout)
    assert (out["kind"], out["check"]) == ("ibstat", "ib_ports")
    assert any(m["name"] == "port_state" for m in out["measurements"])


@pytest.mark.parametrize("kind", sorted(RAW_JUDGES))
def test_it_accepts_every_parser_kind_for_judge(kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    name, text = fixtures(kind)[0]
    path = tmp_path / name
    path.write_text(text)
    assert main(["judge", kind, str(path)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["kind"] == kind and out["check"] in REGISTRY
    assert out["verdict"]["status"] in ("pass", "warn", "fail", "error")
    if out["verdict"]["status"] == "pass":
        assert not RAW_JUDGES[kind].note, f"{kind}: passed on one output though its check needs more"
    if not out["measurements"]:  # the check could not use the output alone: the parser's view is shown
        assert out["parsed"]


def test_it_covers_every_parser_kind_with_a_judge() -> None:
    assert set(RAW_JUDGES) | {"nvidia_smi_xml"} == set(PARSERS)
    assert all(judge.check in REGISTRY for judge in RAW_JUDGES.values())


def test_it_shows_the_xids_of_a_kernel_log_it_cannot_judge_alone() -> None:
    result = run("judge", "dmesg", str(REPO / "tests/fixtures/dmesg-xid/dmesg_T_xid31_xid48_gcm.txt"))
    out = json.loads(result.stdout)
    assert (out["check"], out["verdict"]["status"]) == ("ecc_health", "error")
    assert [m["value"] for m in out["parsed"]["measurements"]] == [31.0, 48.0]


@pytest.mark.parametrize(
    ("kind", "text", "message"),
    [
        ("redfish_thermal", "[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ("ipmitool_sdr", "garbage | garbage | garbage\nfoo\n", "no temperature or discrete sensor reading"),
        ("ior", "IOR-3.3.0: MPI Coordinated Test of Parallel I/O\n", "has no write/read bandwidth"),
    ],
    # Short ids: pytest puts the id in PYTEST_CURRENT_TEST, and a 200 kB one makes exec fail (E2BIG).
    ids=["redfish_thermal-deep-nesting", "ipmitool_sdr-garbage", "ior-no-bandwidth"],
)
def test_it_exits_2_in_one_line_where_it_used_to_crash_or_pass(
    kind: str, text: str, message: str, tmp_path: Path
) -> None:
    path = tmp_path / "input"
    path.write_text(text)
    result = run("parse", kind, str(path))
    assert (result.returncode, result.stdout) == (2, "")
    assert len(result.stderr.splitlines()) == 1 and message in result.stderr


def test_it_prints_a_non_finite_value_as_null_naming_it(tmp_path: Path) -> None:
    text = (REPO / "tests/fixtures/ior/ior-3.x_summary_only_3reps_jubench.txt").read_text()
    path = tmp_path / "ior.txt"
    path.write_text(text.replace("9744.95", "inf", 1))
    result = run("parse", "ior", str(path))
    assert result.returncode == 0, result.stderr
    read = next(m for m in json.loads(result.stdout)["measurements"] if m["name"] == "read_bw_max")
    assert (read["value"], read["labels"]["invalid"]) == (None, "not a finite number: inf")
    assert "Infinity" not in result.stdout and "NaN" not in result.stdout


def test_it_parses_a_clean_kernel_log_as_no_events(tmp_path: Path) -> None:
    path = tmp_path / "dmesg.txt"
    path.write_text("[    0.000000] Linux version 6.8.0-45-generic\n[    5.100000] nvidia: module loaded\n")
    result = run("parse", "dmesg", str(path))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"kind": "dmesg", "measurements": [], "warnings": ["no Xid or SXid events"]}


def test_it_lists_which_check_judges_each_parser_kind() -> None:
    parsers = json.loads(run("list").stdout)["parsers"]
    assert parsers["gpu_burn"]["check"] == "burn_in" and parsers["ibstat"] == {"check": "ib_ports", "note": ""}

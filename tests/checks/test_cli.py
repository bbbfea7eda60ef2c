"""`python -m checks` as a user who scripts would run it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.checks.probe_docs import A100_MIG, REPO, fixture, probe_doc


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

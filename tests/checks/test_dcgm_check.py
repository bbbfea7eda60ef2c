"""dcgm_diag: Fail fails, Warn warns, Skip/Not Run are never a pass."""

from __future__ import annotations

import json
from pathlib import Path

from checks import run_check
from checks.core.base import ERROR, FAIL, PASS, WARN, Command, CommandOutput, NodeContext
from checks.gpu.dcgm import DcgmDiag
from tests.checks.test_dcgm_parser import DCGM4, GCM_FAIL, NVVS_31

NODE = NodeContext(hostname="gpu001")


def judge(stdout: str, exit_code: int = 0, **thresholds: object):
    command = DcgmDiag().commands(DcgmDiag.make_params({"level": 3}), NODE)[0]
    out = CommandOutput(command=command, stdout=stdout, stderr="", exit_code=exit_code)
    return run_check(DcgmDiag, {"level": 3}, dict(thresholds), [out], NODE)


def test_it_runs_dcgmi_diag_as_argv_with_a_level_timeout() -> None:
    command = DcgmDiag().commands(DcgmDiag.make_params({"level": 3}), NODE)[0]
    assert command == Command(argv=("dcgmi", "diag", "-r", "3", "-j"), timeout=3600.0, label="dcgmi diag")


def test_it_passes_the_all_pass_real_output() -> None:
    _, verdict = judge(Path(NVVS_31).read_text())
    assert verdict.status == PASS
    assert verdict.reason == "80 DCGM test results passed (10 tests)"


def test_it_fails_on_fail_even_when_dcgmi_exits_nonzero() -> None:
    measurements, verdict = judge(Path(GCM_FAIL).read_text(), exit_code=226)
    assert verdict.status == FAIL
    assert verdict.reason == "test Persistence Mode failed on all GPUs"
    assert any(f.status == WARN and "Environment Variables" in f.reason for f in verdict.findings)
    failed = next(m for m in measurements if m.labels.get("test") == "Persistence Mode")
    assert (failed.ok, failed.threshold) == (False, "Pass")


def test_it_errors_on_a_skipped_test_naming_it_and_the_gpu() -> None:
    doc = json.loads(json.dumps(DCGM4))
    doc["DCGM Diagnostic"]["test_categories"][0]["tests"].pop(0)  # only the skipped pcie test left
    doc["DCGM Diagnostic"]["test_categories"][0]["tests"].append(
        {"name": "memory", "results": [{"entity_group": "GPU", "entity_group_id": 1, "entity_id": 0, "status": "Pass"}]}
    )
    _, verdict = judge(json.dumps(doc))
    assert verdict.status == ERROR
    assert verdict.reason == "test pcie skipped on GPU 0: DCGM did not test it"


def test_it_never_passes_when_everything_was_skipped_even_if_allowed() -> None:
    result = {"entity_group": "GPU", "entity_group_id": 1, "entity_id": 0, "status": "Not Run"}
    tests = [{"name": "pcie", "results": [result]}]
    doc = {"DCGM Diagnostic": {"test_categories": [{"category": "x", "tests": tests}]}}
    _, verdict = judge(json.dumps(doc), allow_skipped=True)
    assert (verdict.status, verdict.reason) == (ERROR, "DCGM ran no test (every test skipped or not run)")


def test_it_fails_the_4x_memory_failure_with_its_warning() -> None:
    _, verdict = judge(json.dumps(DCGM4), allow_skipped=True)
    assert (verdict.status, verdict.reason) == (FAIL, "test memory failed on GPU 1: DBE")


def test_it_errors_when_dcgmi_cannot_reach_the_host_engine() -> None:
    _, verdict = judge("Error: unable to establish a connection to the specified host: localhost\n", exit_code=255)
    assert verdict.status == ERROR
    assert "no test results" in verdict.reason and "exit code 255" in verdict.reason

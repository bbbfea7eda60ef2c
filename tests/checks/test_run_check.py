"""run_check: the one place where timeouts, exit codes and bad output become `error`."""

from __future__ import annotations

import json

import pytest

from checks import REGISTRY, get_check, run_check
from checks.core.base import ERROR, PASS, Command, CommandOutput, EvidenceError, NodeContext, ParamsError
from checks.core.probe_check import ProbeParams
from tests.checks.probe_docs import output, probe_doc

NODE = NodeContext(hostname="gpu001")
PROBE_CHECKS = ["ecc_health", "gpu_inventory"]


def test_it_registers_both_probe_checks() -> None:
    assert {"ecc_health", "gpu_inventory"} <= set(REGISTRY)


@pytest.mark.parametrize("kind", PROBE_CHECKS)
def test_it_passes_a_healthy_probe(kind: str) -> None:
    measurements, verdict = run_check(get_check(kind), None, None, output(probe_doc()), NODE)
    assert verdict.status == PASS, verdict.reason
    assert measurements


@pytest.mark.parametrize("kind", PROBE_CHECKS)
def test_it_errors_on_a_timed_out_probe(kind: str) -> None:
    outs = output("", exit_code=None, timed_out=True, timeout=60)
    measurements, verdict = run_check(get_check(kind), None, None, outs, NODE)
    assert (verdict.status, verdict.reason) == (ERROR, "probe.py timed out after 60s")
    assert measurements == []


@pytest.mark.parametrize("kind", PROBE_CHECKS)
def test_it_errors_on_a_nonzero_exit_with_the_probes_own_errors(kind: str) -> None:
    doc = probe_doc(0, source="none", errors=["nvml: NVMLError_LibraryNotFound: NVML Shared Library Not Found"])
    measurements, verdict = run_check(get_check(kind), None, None, output(doc, exit_code=3), NODE)
    assert verdict.status == ERROR
    assert verdict.reason.startswith(
        "probe.py exited 3: probe could not read the GPUs: nvml: NVMLError_LibraryNotFound"
    )
    assert measurements == []


def test_it_errors_on_a_nonzero_exit_with_stderr_when_stdout_is_not_json() -> None:
    outs = output("", exit_code=127, stderr="bash: line 1: python3: command not found\n")
    _, verdict = run_check(get_check("ecc_health"), None, None, outs, NODE)
    assert verdict.reason == "probe.py exited 127: bash: line 1: python3: command not found"


def test_it_errors_when_the_exit_code_is_missing() -> None:
    _, verdict = run_check(get_check("ecc_health"), None, None, output(probe_doc(), exit_code=None), NODE)
    assert verdict.status == ERROR
    assert "no exit code" in verdict.reason


def test_it_errors_when_nothing_ran() -> None:
    measurements, verdict = run_check(get_check("ecc_health"), None, None, [], NODE)
    assert verdict.status == ERROR and measurements == []


@pytest.mark.parametrize(
    ("stdout", "expected"),
    [
        ("", "probe printed nothing on stdout"),
        ("   \n", "probe printed nothing on stdout"),
        ("Traceback (most recent call last):\n  boom", "probe output is not JSON"),
        ("[1, 2]", "probe output is JSON but not an object: list"),
        (json.dumps(probe_doc(schema=2)), "probe schema 2, expected 1"),
        (json.dumps({"schema": 1}), "probe output has no 'gpus' list"),
        (json.dumps(probe_doc(gpus=[{"name": "x"}])), "probe GPU entry #0 has no valid 'index'"),
        (json.dumps(probe_doc(gpu_count="8")), "probe gpu_count is '8'"),
        (json.dumps(probe_doc(errors="oops")), "probe 'errors' is str"),
    ],
)
@pytest.mark.parametrize("kind", PROBE_CHECKS)
def test_it_errors_with_no_measurements_on_unusable_stdout(kind: str, stdout: str, expected: str) -> None:
    measurements, verdict = run_check(get_check(kind), None, None, output(stdout), NODE)
    assert verdict.status == ERROR
    assert verdict.reason.startswith(expected), verdict.reason
    assert measurements == []


def test_it_errors_on_a_duplicated_gpu_index() -> None:
    doc = probe_doc(2)
    doc["gpus"][1]["index"] = 0
    _, verdict = run_check(get_check("ecc_health"), None, None, output(doc), NODE)
    assert verdict.reason == "probe lists GPU 0 twice"


def test_it_errors_on_a_badly_typed_counter() -> None:
    doc = probe_doc(1)
    doc["gpus"][0]["ecc_errors"]["volatile"]["uncorrected"] = "2"
    measurements, verdict = run_check(get_check("ecc_health"), None, None, output(doc), NODE)
    assert verdict.status == ERROR
    assert verdict.reason == "probe GPU 0: ecc_errors.volatile.uncorrected is '2', expected a number"
    assert measurements == []


def test_it_errors_when_the_probe_read_nothing_but_exited_0() -> None:
    doc = probe_doc(0, source="none", errors=["nvidia-smi: not found"])
    _, verdict = run_check(get_check("gpu_inventory"), None, None, output(doc), NODE)
    assert (verdict.status, verdict.reason) == (ERROR, "probe could not read the GPUs: nvidia-smi: not found")


def test_it_turns_a_parser_crash_into_error_not_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    check = get_check("ecc_health")

    def boom(probe: object) -> list:
        raise ZeroDivisionError("bug")

    monkeypatch.setattr(check, "measure", boom)
    measurements, verdict = run_check(check, None, None, output(probe_doc()), NODE)
    assert verdict.status == ERROR
    assert verdict.reason == "internal error in ecc_health parser: ZeroDivisionError: bug"
    assert measurements == []


def test_it_accepts_a_check_class_and_dict_thresholds() -> None:
    _, verdict = run_check(
        REGISTRY["gpu_inventory"], {"timeout_s": 30}, {"expected_gpu_count": "8"}, output(probe_doc()), NODE
    )
    assert verdict.status == PASS


def test_it_rejects_unknown_threshold_keys_before_judging() -> None:
    with pytest.raises(ParamsError, match="unknown threshold"):
        run_check(get_check("ecc_health"), None, {"max_volatile_uncorected": 0}, output(probe_doc()), NODE)


def test_it_builds_one_probe_command_from_params() -> None:
    from checks.probe import probe_source

    commands = get_check("gpu_inventory").commands(ProbeParams(timeout_s=45), NODE)
    assert [c.label for c in commands] == ["probe.py", "dmi", "bmc fru"]  # the probe, then the identities
    command = commands[0]
    assert command.argv == ("python3", "-")
    assert command.stdin == probe_source()
    assert (command.timeout, command.label) == (45.0, "probe.py")
    # The probe's 60 s, then the DMI read's 10 s and the BMC FRU read's 25 s (checks/gpu/bmc_fru.py).
    assert get_check("gpu_inventory").timeout(ProbeParams()) == 95.0


def test_it_exposes_evidence_error_for_parsers() -> None:
    assert issubclass(EvidenceError, Exception) and not issubclass(EvidenceError, ValueError)


@pytest.mark.parametrize("kind", sorted(REGISTRY))
def test_it_errors_without_crashing_when_a_failed_commands_output_cannot_be_described(kind):
    """describe_failure reads the output of a command that exited non-zero: hostile output there
    (JSON nested past the recursion limit) is still an error verdict, never an exception."""
    check = REGISTRY[kind]()
    nested = "[" * 200_000 + "]" * 200_000
    command = Command(argv=("tool",), timeout=5, label="tool")
    out = CommandOutput(command=command, stdout=nested, stderr=nested, exit_code=1)
    _, verdict = run_check(check, None, None, [out], NodeContext(hostname="n1"))
    assert verdict.status == "error"

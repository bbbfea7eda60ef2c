"""burn_in / gpu_burn: completion marker, wrapped error counters, impossible telemetry.

Before: gpu_burn output without its closing "Tested N GPUs:" list passed with a warning; the
error column of wilicc/gpu-burn issue 12 (negative counts followed by "(WARNING!)") left every
count after the first null and lost all temperatures; NaN Gflop/s became "no Gflop/s"; a negative
ECC counter in the telemetry read as "no new errors".
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from checks import get_check, run_check
from checks.burnin.gpu_burn import ERRORS_WRAPPED, parse_gpu_burn
from checks.core.base import ERROR, FAIL, PASS, Command, CommandOutput, EvidenceError, NodeContext
from checks.core.profiles import resolve_thresholds
from checks.core.raw_outputs import RAW_JUDGES
from checks.core.sampling import SAMPLING_LABEL, SAMPLING_SCHEMA
from checks.core.sampling_columns import ROWS_SCHEMA

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "gpu-burn"
A100 = "gpu_burn_8xA100-80GB_doubles_tc.txt"
ISSUE_12 = "gpu_burn_16gpu_negative_error_counts_warning_issue12.txt"
WRAPPED_GPUS = [1, 2, 3, 4, 9, 11, 14]  # "-524288000  (WARNING!)" in wilicc/gpu-burn issue 12's error column


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def by(measurements, name: str, gpu: int | None = None):
    return next(m for m in measurements if m.name == name and m.gpu == gpu)


def sampling_doc(stdout: str, gpus: int, **overrides: Any) -> dict[str, Any]:
    """A sampling probe document around a real gpu_burn stdout: healthy telemetry on `gpus` GPUs,
    one object per sample (sampling schema 1, as older probes printed it; `columnar` turns it into
    what the probe prints now), so tests can edit one reading of one sample."""
    probe = {
        "schema": 1,
        "gpu_count": gpus,
        "gpus": [
            {
                "index": i,
                "ecc_errors": {"volatile": {"uncorrected": 0, "corrected": 0}},
                "remapped_rows": {"correctable": 0, "uncorrectable": 0},
            }
            for i in range(gpus)
        ],
    }
    sample = {
        "index": 0,
        "temp_gpu": 55,
        "temp_memory": 60,
        "power_w": 350.0,
        "sm_clock_mhz": 1410,
        "clock_event_reasons": 4,  # sw_power_cap: expected at full load, not judged
        "ecc_volatile_uncorrected": 0,
        "ecc_volatile_corrected": 0,
    }
    doc = {
        "schema": ROWS_SCHEMA,
        "mode": "sample",
        "interval_s": 1.0,
        "errors": [],
        "samples": [{"t": float(t), "gpus": [{**sample, "index": i} for i in range(gpus)]} for t in range(5)],
        "before": probe,
        "after": json.loads(json.dumps(probe)),
        "child": {"argv": ["gpu_burn", "-d", "-tc", "60"], "exit_code": 0, "stdout": stdout, "stderr": "",
                  "duration_s": 60.0},
    }  # fmt: skip
    doc.update(overrides)
    return doc


def columnar(doc: dict[str, Any]) -> dict[str, Any]:
    """The same document with its samples as arrays per GPU (sampling schema 2)."""
    rows = doc["samples"]
    indices = sorted({g["index"] for sample in rows for g in sample["gpus"]})
    fields = [k for k in rows[0]["gpus"][0] if k != "index"] if rows else []
    gpus = [
        {"index": i, **{f: [next(g.get(f) for g in s["gpus"] if g["index"] == i) for s in rows] for f in fields}}
        for i in indices
    ]
    return {**doc, "schema": SAMPLING_SCHEMA, "samples": {"t": [s["t"] for s in rows], "gpus": gpus}}


def laid_out(doc: dict[str, Any], layout: str) -> dict[str, Any]:
    return columnar(doc) if layout == "columns" else doc


LAYOUTS = pytest.mark.parametrize("layout", ["rows", "columns"])


def judge(doc: dict[str, Any], profile: str = "A100-SXM-8", gpus: int | None = None):
    cmd = Command(argv=("python3", "-", "--sample", "1", "--", "gpu_burn"), timeout=300, label=SAMPLING_LABEL)
    outputs = [CommandOutput(command=cmd, stdout=json.dumps(doc), stderr="", exit_code=0)]
    node = NodeContext(hostname="gpu001", expected_gpus=gpus)
    return run_check(get_check("burn_in"), None, resolve_thresholds("burn_in", profile), outputs, node)


@LAYOUTS
def test_the_real_a100_run_with_healthy_telemetry_passes(layout: str) -> None:
    _, verdict = judge(laid_out(sampling_doc(fixture(A100), 8), layout))
    assert verdict.status == PASS, verdict.reason


def test_it_errors_output_incomplete_without_the_tested_list() -> None:
    text = fixture(A100)
    cut = text[: text.index("Tested 8 GPUs")]
    measurements, verdict = judge(sampling_doc(cut, 8))
    assert verdict.status == ERROR
    assert verdict.reason.startswith("gpu_burn output incomplete: no closing 'Tested N GPUs:' list")
    assert measurements == []
    with pytest.raises(EvidenceError, match="output incomplete"):
        parse_gpu_burn(cut)


def test_it_reads_negative_error_counts_and_every_temperature_of_issue_12() -> None:
    ms = parse_gpu_burn(fixture(ISSUE_12)).measurements
    assert by(ms, "gpus").value == 16
    assert [by(ms, "temp_max", i).value for i in range(16)] == [
        51, 45, 48, 50, 49, 46, 46, 50, 51, 47, 46, 50, 50, 47, 47, 52,
    ]  # fmt: skip
    for i in range(16):
        errors = by(ms, "errors", i)
        if i in WRAPPED_GPUS:
            assert errors.value is None  # never a negative count in the evidence
            assert errors.labels == {"wrapped": "-524288000", "missing": f"{ERRORS_WRAPPED} (-524288000)"}
        else:
            assert (errors.value, errors.labels) == (0, {})
    assert [by(ms, "gflops", i).value for i in (0, 1, 15)] == [6311, 6440, 6439]
    assert {by(ms, "tool_verdict", i).text for i in range(16)} == {"FAULTY"}


def test_it_fails_the_gpus_whose_error_counter_wrapped() -> None:
    _, verdict = judge(sampling_doc(fixture(ISSUE_12), 16), "generic")
    assert verdict.status == FAIL
    findings = [f.reason for f in verdict.findings if f.status == FAIL]
    for i in WRAPPED_GPUS:
        assert (
            f"GPU {i}: compute errors (gpu_burn's error counter wrapped to -524288000 (WARNING!): "
            "more than it can count)" in findings
        )
    # The others carry gpu_burn's own FAULTY (the reporter's compare kernel always logged an error).
    assert "GPU 0: gpu_burn verdict FAULTY" in findings


def test_a_wrapped_counter_without_a_faulty_verdict_still_fails() -> None:
    text = fixture(ISSUE_12).replace("FAULTY", "OK")
    _, verdict = judge(sampling_doc(text, 16), "generic")
    assert verdict.status == FAIL
    assert verdict.reason.startswith("GPU 1: compute errors (gpu_burn's error counter wrapped to -524288000")


@pytest.mark.parametrize(
    ("value", "words"),
    [("nan", "GPU 3 gflops = nan Gflop/s (must be finite)"), ("inf", "GPU 3 gflops = inf Gflop/s (must be finite)")],
)
def test_it_errors_on_a_non_finite_rate(value: str, words: str) -> None:
    text = fixture(A100)
    start = text.rindex("proc'd:")  # the last progress record: GPU 3 is its fourth "(N Gflop/s)"
    record = text[start:]
    rates = re.findall(r"\(\d+ Gflop/s\)", record)
    assert rates[3] == "(16926 Gflop/s)"
    parts = record.split("Gflop/s)")
    parts[3] = re.sub(r"\(\d+ $", f"({value} ", parts[3])
    edited = text[:start] + "Gflop/s)".join(parts)
    _, verdict = judge(sampling_doc(edited, 8))
    assert verdict.status == ERROR
    assert verdict.reason.startswith("impossible evidence: ")
    assert words in verdict.reason


def test_it_errors_on_a_negative_ecc_counter_in_the_telemetry() -> None:
    doc = sampling_doc(fixture(A100), 8)
    doc["after"]["gpus"][5]["ecc_errors"]["volatile"]["uncorrected"] = -1
    _, verdict = judge(doc)
    assert (verdict.status, verdict.reason) == (
        ERROR,
        "impossible evidence: the 'after' probe, GPU 5 ecc_errors.volatile.uncorrected = -1 "
        "(a count must be a non-negative integer)",
    )


@LAYOUTS
def test_it_errors_on_a_fractional_ecc_count_in_the_telemetry(layout: str) -> None:
    doc = sampling_doc(fixture(A100), 8)
    doc["samples"][2]["gpus"][4]["ecc_volatile_uncorrected"] = 0.5
    _, verdict = judge(laid_out(doc, layout))
    assert verdict.status == ERROR
    assert "sample #2 GPU 4 ecc_volatile_uncorrected = 0.5" in verdict.reason


@LAYOUTS
def test_it_errors_on_an_impossible_temperature_in_the_telemetry(layout: str) -> None:
    doc = sampling_doc(fixture(A100), 8)
    doc["samples"][1]["gpus"][2]["temp_gpu"] = 900
    _, verdict = judge(laid_out(doc, layout))
    assert verdict.status == ERROR
    assert verdict.reason == (
        "impossible evidence: sample #1 GPU 2 temp_gpu = 900 (an NVML temperature must be a number in 0..150)"
    )


@LAYOUTS
def test_one_negative_nvml_temperature_cannot_hide_in_a_mean(layout: str) -> None:
    doc = sampling_doc(fixture(A100), 8)
    doc["samples"][3]["gpus"][6]["temp_memory"] = -1  # NVML temperatures are unsigned
    _, verdict = judge(laid_out(doc, layout))
    assert verdict.status == ERROR
    assert "sample #3 GPU 6 temp_memory = -1 (an NVML temperature must be a number in 0..150)" in verdict.reason


def test_it_errors_on_a_garbled_progress_record_instead_of_reading_half_of_it() -> None:
    # "inf C" stops the temperature column short: before, the GPUs after it silently lost a reading.
    text = fixture(A100)
    start = text.rindex("temps: ")
    garbled = text[:start] + text[start:].replace("60 C", "inf C", 1)
    with pytest.raises(
        EvidenceError, match=r"gpu_burn progress record \d+ is garbled \(8 rates, 8 error counts, 3 temp"
    ):
        parse_gpu_burn(garbled)
    _, verdict = judge(sampling_doc(garbled, 8))
    assert verdict.status == ERROR


def test_a_real_output_with_faulty_gpus_and_no_telemetry_fails_naming_the_missing_telemetry() -> None:
    """Judged as `python -m checks judge gpu_burn FILE` judges it (checks/core/raw_outputs.py): no
    telemetry at all. The GPUs gpu_burn proved faulty make it `fail` (the hardware action), not
    `error`; the reason still says the telemetry could not be judged."""
    text = fixture(ISSUE_12)
    raw = RAW_JUDGES["gpu_burn"]
    node = NodeContext(hostname="gpu001", expected_gpus=16)
    _, verdict = run_check(get_check(raw.check), None, resolve_thresholds(raw.check, "generic"), raw.build(text), node)
    assert verdict.status == FAIL
    assert verdict.reason.startswith("GPU 0: gpu_burn verdict FAULTY; GPU 1: compute errors (gpu_burn's error counter")
    assert verdict.reason.endswith(
        "; and could not tell: no telemetry samples during the burn (no telemetry: judged from a gpu_burn output "
        "file alone)"
    )
    assert [f.status for f in verdict.findings].count(FAIL) == 16
    assert [f.reason for f in verdict.findings if f.status == ERROR] == [
        "no telemetry samples during the burn (no telemetry: judged from a gpu_burn output file alone)"
    ]

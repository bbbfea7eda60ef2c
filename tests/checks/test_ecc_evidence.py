"""ecc_health on impossible counters: before checks/core/evidence.py, uncorrected = -1 passed on every
profile, 0.5 failed with the reason "0 uncorrectable", and NaN reached the crash path."""

from __future__ import annotations

import json
from typing import Any

import pytest

from checks import get_check, run_check
from checks.core.base import ERROR, PASS, NodeContext
from checks.core.profiles import PROFILES, resolve_thresholds
from tests.checks.probe_docs import gpu_doc, output, probe_doc

NODE = NodeContext(hostname="gpu001")


def judge(doc: dict[str, Any] | str, profile: str = "H100-SXM-8"):
    thresholds = resolve_thresholds("ecc_health", profile)
    return run_check(get_check("ecc_health"), None, thresholds, output(doc), NODE)


def with_gpu(index: int, **changes: Any) -> dict[str, Any]:
    return probe_doc(8, gpus=[gpu_doc(i, **changes) if i == index else gpu_doc(i) for i in range(8)])


@pytest.mark.parametrize("profile", sorted(PROFILES))
@pytest.mark.parametrize(
    ("value", "shown", "why"),
    [
        (-1, "-1", "a count must be a non-negative integer"),
        (0.5, "0.5", "a count must be a non-negative integer"),
        (float("nan"), "nan", "must be finite"),
        (float("inf"), "inf", "must be finite"),
    ],
    ids=["minus-one", "half", "nan", "inf"],
)
def test_it_errors_naming_an_impossible_uncorrected_count_on_every_profile(profile, value, shown, why) -> None:
    measurements, verdict = judge(with_gpu(3, ecc_errors__volatile__uncorrected=value), profile)
    assert (verdict.status, verdict.reason) == (
        ERROR,
        f"impossible evidence: GPU 3 ecc_volatile_uncorrected = {shown} ({why})",
    )
    assert measurements == []


def test_the_probe_json_really_carries_nan() -> None:
    text = output(with_gpu(3, ecc_errors__volatile__uncorrected=float("nan")))[0].stdout
    assert '"uncorrected": NaN' in text  # Python's json writes and reads NaN: the probe path sees it


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("ecc_errors__aggregate__uncorrected", "ecc_aggregate_uncorrected"),
        ("ecc_errors__volatile__corrected", "ecc_volatile_corrected"),
        ("remapped_rows__correctable", "remapped_rows_correctable"),
        ("remapped_rows__uncorrectable", "remapped_rows_uncorrectable"),
    ],
)
def test_it_errors_on_a_negative_count_even_where_no_threshold_applies(path: str, name: str) -> None:
    _, verdict = judge(with_gpu(6, **{path: -2}))
    assert verdict.status == ERROR
    assert f"GPU 6 {name} = -2" in verdict.reason


def test_it_errors_on_a_negative_retired_page_count() -> None:
    retired = {"single_bit": -3, "double_bit": 0, "pending": False}
    gpu = gpu_doc(2, remapped_rows=None, retired_pages=retired, errors={"remapped_rows": "Not Supported"})
    doc = probe_doc(8, gpus=[gpu if i == 2 else gpu_doc(i) for i in range(8)])
    _, verdict = judge(doc)
    assert verdict.status == ERROR
    assert "GPU 2 retired_pages_single_bit = -3 pages (a count must be a non-negative integer)" in verdict.reason


def test_it_errors_on_huge_numbers_beyond_a_float() -> None:
    text = json.dumps(with_gpu(1)).replace('"uncorrected": 0', '"uncorrected": 1e999', 1)
    _, verdict = judge(text)
    assert verdict.status == ERROR
    assert "ecc_volatile_uncorrected = inf (must be finite)" in verdict.reason


def test_healthy_gpus_still_pass() -> None:
    _, verdict = judge(probe_doc())
    assert verdict.status == PASS

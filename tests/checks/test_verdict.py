"""The verdict of several findings (checks/core/verdict.py): a proven fault outranks "could not tell",
and the missing evidence stays named beside it."""

from __future__ import annotations

import pytest

from checks.core.verdict import ALSO_UNTOLD, ERROR, FAIL, PASS, SKIPPED, WARN, Finding, Verdict, worst_status


def test_a_proven_fault_beside_missing_evidence_fails_naming_both() -> None:
    verdict = Verdict.from_findings(
        [
            Finding(ERROR, "no telemetry samples during the burn"),
            Finding(FAIL, "GPU 3: 12 compute errors"),
            Finding(PASS, "GPU 4 within spec"),
        ]
    )
    assert verdict.status == FAIL
    assert verdict.reason == f"GPU 3: 12 compute errors; {ALSO_UNTOLD}no telemetry samples during the burn"


def test_it_counts_the_untold_past_five() -> None:
    untold = [Finding(ERROR, f"GPU {i}: unreadable") for i in range(7)]
    verdict = Verdict.from_findings([*untold, Finding(FAIL, "GPU 9: FAULTY")])
    assert verdict.reason.startswith("GPU 9: FAULTY; and could not tell: GPU 0: unreadable; ")
    assert verdict.reason.endswith("GPU 4: unreadable; and 2 more")


def test_without_a_proven_fault_it_is_error_and_names_no_warning() -> None:
    verdict = Verdict.from_findings([Finding(WARN, "warm"), Finding(ERROR, "no telemetry")])
    assert (verdict.status, verdict.reason) == (ERROR, "no telemetry")


@pytest.mark.parametrize(
    ("statuses", "expected"),
    [
        ([ERROR, FAIL], FAIL),
        ([FAIL, ERROR, WARN], FAIL),
        ([ERROR, WARN, PASS], ERROR),
        ([WARN, PASS, SKIPPED], WARN),
        ([SKIPPED], SKIPPED),
        ([], ERROR),  # nothing judged is never a pass
    ],
)
def test_worst_status_ranks_fail_over_error(statuses: list[str], expected: str) -> None:
    assert worst_status(statuses) == expected

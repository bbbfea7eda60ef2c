"""IOR parsing: the summary-only output a benchmark harness keeps, incomplete and impossible tables."""

from __future__ import annotations

import math

import pytest

from checks.core.base import EvidenceError
from checks.core.parsers import parse_output
from checks.fs.io_benchmarks import parse_ior
from tests.checks.probe_docs import REPO

FIXTURES = REPO / "tests/fixtures/ior"
SUMMARY_ONLY = FIXTURES / "ior-3.x_summary_only_3reps_jubench.txt"
WITH_TABLES = FIXTURES / "ior-3.2.0_posix_write_16tasks_akrr.txt"


def values(text: str) -> dict[str, tuple[float | None, str]]:
    return {m.name: (m.value, m.labels["source"]) for m in parse_output("ior", text).measurements}


def test_it_parses_an_output_holding_only_the_summary_of_all_tests() -> None:
    assert values(SUMMARY_ONLY.read_text()) == {
        "write_bw_max": (6987.46, "summary table"),
        "write_bw_mean": (4181.27, "summary table"),
        "read_bw_max": (9744.95, "summary table"),
        "read_bw_mean": (8464.99, "summary table"),
    }


def test_it_prefers_the_max_lines_then_the_summary_then_the_results_rows() -> None:
    text = WITH_TABLES.read_text()
    assert values(text)["write_bw_max"] == (104.26, "summary")
    no_max = "\n".join(line for line in text.splitlines() if not line.startswith("Max "))
    assert values(no_max)["write_bw_max"] == (104.26, "summary table")
    results_only = no_max.split("Summary of all tests:")[0]
    assert parse_ior(results_only).measurements[0].labels["source"] == "table"


def test_it_refuses_a_run_cut_before_its_summary() -> None:
    results_only = WITH_TABLES.read_text().split("Max Write")[0]
    missing = "ior output incomplete: the 'Summary of all tests' table or a 'Max Write/Read' line is missing"
    with pytest.raises(EvidenceError, match=missing):
        parse_output("ior", results_only)


def test_it_flags_the_nan_ior_prints_for_iterations_that_never_ran() -> None:
    # hpc/ior issue 542: with maxTimeDuration reached, the summary statistics come out as -nan.
    text = SUMMARY_ONLY.read_text().replace("6987.46", "-nan", 1)
    parsed = parse_output("ior", text)
    peak = next(m for m in parsed.measurements if m.name == "write_bw_max")
    assert math.isnan(peak.value)
    assert peak.labels["invalid"] == "not a finite number: nan"
    assert next(m for m in parsed.measurements if m.name == "read_bw_max").labels.get("invalid") is None


def test_it_refuses_a_summary_row_cut_short_or_holding_words() -> None:
    lines = SUMMARY_ONLY.read_text().splitlines()
    with pytest.raises(EvidenceError, match="summary row cut short"):
        parse_ior("\n".join([*lines[:2], lines[2][:60]]))
    with pytest.raises(EvidenceError, match="summary write Max\\(MiB\\) is 'fast'"):
        parse_ior(SUMMARY_ONLY.read_text().replace("6987.46", "fast", 1))

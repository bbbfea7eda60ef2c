"""The dcgmi_diag parser on real outputs (tests/fixtures/dcgmi), DCGM 3.x and 4.x JSON and the text table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from checks.core.base import EvidenceError, Measurement
from checks.core.parsers import parse_output
from checks.gpu.dcgm import normalise_status, parse_dcgmi_diag

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "dcgmi"
GCM_FAIL = FIXTURES / "dcgmi_diag_r1_j_3x_fail_gcm.json"
TEXT_R4 = FIXTURES / "dcgmi_diag_r4_text_allpass_gcm.txt"
NVVS_31 = FIXTURES / "nvvs_json_3.1.0_8gpu_real_with_preamble.txt"

# DCGM 4.x shape, built from NVIDIA/DCGM testing/python3/dcgm_diag_schema.json (no real 4.x capture
# is in the shared fixtures): per-entity results, a per-test summary, metadata.version.
DCGM4 = {
    "DCGM Diagnostic": {
        "test_categories": [
            {
                "category": "Hardware",
                "tests": [
                    {
                        "name": "memory",
                        "results": [
                            {"entity_group": "GPU", "entity_group_id": 1, "entity_id": 0, "status": "Pass"},
                            {
                                "entity_group": "GPU",
                                "entity_group_id": 1,
                                "entity_id": 1,
                                "status": "Fail",
                                "warnings": [
                                    {"error_category": 3, "error_id": 77, "error_severity": 2, "warning": "DBE"}
                                ],
                            },
                        ],
                        "test_summary": {"status": "Fail"},
                    },
                    {
                        "name": "pcie",
                        "results": [{"entity_group": "GPU", "entity_group_id": 1, "entity_id": 0, "status": "Skip"}],
                        "test_summary": {"status": "Skip"},
                    },
                ],
            }
        ]
    },
    "entity_groups": [],
    "metadata": {"version": "4.1.1"},
}


def statuses(measurements: list[Measurement]) -> list[tuple[str, int | None, str]]:
    return [(m.labels["test"], m.gpu, m.text) for m in measurements if m.name == "test_status"]


def test_the_dcgmi_diag_kind_reads_the_failing_run() -> None:
    found = statuses(parse_output("dcgmi_diag", GCM_FAIL.read_text()).measurements)
    assert ("Persistence Mode", None, "Fail") in found


@pytest.mark.parametrize("path", sorted(p for p in FIXTURES.iterdir() if not p.name.endswith(".source.txt")))
def test_it_parses_every_fixture_with_its_source(path: Path) -> None:
    assert path.with_name(path.stem + ".source.txt").exists()
    assert statuses(parse_dcgmi_diag(path.read_text()).measurements)


def test_it_pins_the_3x_failing_run() -> None:
    found = statuses(parse_dcgmi_diag(GCM_FAIL.read_text()).measurements)
    assert len(found) == 9
    assert ("Persistence Mode", None, "Fail") in found
    assert ("Environment Variables", None, "Warn") in found
    assert sum(1 for _, _, s in found if s == "Pass") == 7


def test_it_skips_the_preamble_and_nulls_of_the_31_real_output() -> None:
    parsed = parse_dcgmi_diag(NVVS_31.read_text())
    found = statuses(parsed.measurements)
    # 9 deployment tests x 8 GPUs from "0,1,..,7" strings, plus "software" with int gpu_ids.
    assert len(found) == 9 * 8 + 8
    assert {s for _, _, s in found} == {"Pass"}
    assert ("software", 7, "Pass") in found
    assert next(m for m in parsed.measurements if m.name == "dcgm_version").text == "3.1.0"


def test_it_reads_the_text_table() -> None:
    found = statuses(parse_dcgmi_diag(TEXT_R4.read_text()).measurements)
    assert len(found) == 18
    assert ("Memtest", None, "Pass") in found
    assert ("Blacklist", None, "Pass") in found


def test_it_reads_a_per_gpu_failure_in_the_text_table() -> None:
    text = TEXT_R4.read_text().replace(
        "| SM Stress                 | Pass - All ", "| SM Stress                 | Fail - GPU: 3"
    )
    assert ("SM Stress", 3, "Fail") in statuses(parse_dcgmi_diag(text).measurements)


def test_it_reads_the_4x_schema_per_entity() -> None:
    parsed = parse_dcgmi_diag("Successfully ran diagnostic for group.\n" + json.dumps(DCGM4, indent=2))
    found = statuses(parsed.measurements)
    assert found == [("memory", 0, "Pass"), ("memory", 1, "Fail"), ("pcie", 0, "Skip")]
    failed = next(m for m in parsed.measurements if m.gpu == 1)
    assert failed.labels["detail"] == "DBE"


def test_it_normalises_status_spellings() -> None:
    assert [normalise_status(s) for s in ("PASS", "fail", "Warning", "SKIP", "NOT RUN", "Not Run")] == [
        "Pass", "Fail", "Warn", "Skip", "Not Run", "Not Run",
    ]  # fmt: skip


def test_it_raises_on_a_runtime_error_and_on_no_results() -> None:
    with pytest.raises(EvidenceError, match="did not run: host engine not running"):
        parse_dcgmi_diag(json.dumps({"DCGM Diagnostic": {"runtime_error": "host engine not running"}}))
    with pytest.raises(EvidenceError, match="no test results"):
        parse_dcgmi_diag("Error: unable to establish a connection to the specified host: localhost\n")

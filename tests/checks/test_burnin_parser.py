"""The gpu_burn parser on real outputs (tests/fixtures/gpu-burn) and on the format's corners."""

from __future__ import annotations

from pathlib import Path

import pytest

from checks.burnin.gpu_burn import parse_gpu_burn
from checks.core.base import EvidenceError, Measurement
from checks.core.parsers import parse_output

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "gpu-burn"
A100 = FIXTURES / "gpu_burn_8xA100-80GB_doubles_tc.txt"
ISSUE_124 = FIXTURES / "gpu_burn_newformat_no_progress_false_ok_issue124.txt"


def by(measurements: list[Measurement], name: str, gpu: int | None = None) -> Measurement:
    return next(m for m in measurements if m.name == name and m.gpu == gpu)


def test_the_gpu_burn_kind_parses_a_finished_run_and_refuses_a_cut_one() -> None:
    full = A100.read_text()
    assert by(parse_output("gpu_burn", full).measurements, "gpus").value == 8
    cut = full[: full.index("Tested ")]
    with pytest.raises(EvidenceError, match="incomplete"):
        parse_output("gpu_burn", cut)


@pytest.mark.parametrize("path", sorted(p for p in FIXTURES.iterdir() if not p.name.endswith(".source.txt")))
def test_it_parses_every_fixture_with_its_source(path: Path) -> None:
    assert path.with_name(path.stem + ".source.txt").exists()
    parsed = parse_gpu_burn(path.read_text())
    assert by(parsed.measurements, "gpus").value >= 1


def test_it_pins_the_a100_doubles_tensor_core_run() -> None:
    parsed = parse_gpu_burn(A100.read_text())
    ms = parsed.measurements
    assert by(ms, "gpus").value == 8
    assert by(ms, "progress_records").value == 196
    # The last record of each GPU, not the first (GPU 0 showed 7150 while the others initialised).
    assert [by(ms, "gflops", i).value for i in range(8)] == [
        16942.0, 17093.0, 16957.0, 16926.0, 16890.0, 16950.0, 17010.0, 16926.0,
    ]  # fmt: skip
    assert all(by(ms, "errors", i).value == 0 for i in range(8))
    assert [by(ms, "temp_max", i).value for i in range(8)] == [62, 59, 58, 60, 60, 59, 58, 61]
    assert {by(ms, "tool_verdict", i).text for i in range(8)} == {"OK"}
    assert parsed.warnings == []


def test_it_keeps_the_false_ok_of_issue_124_without_inventing_gflops() -> None:
    ms = parse_gpu_burn(ISSUE_124.read_text()).measurements
    assert by(ms, "gpus").value == 1
    assert by(ms, "tool_verdict", 0).text == "OK"
    gflops = by(ms, "gflops", 0)
    assert gflops.value is None
    assert gflops.labels["missing"] == "no progress line printed for this GPU"
    assert by(ms, "progress_records").value == 0


def test_it_sums_errors_across_summary_resets_and_reads_warnings_and_power() -> None:
    text = (
        "\r10.0%  proc'd: 100 (50000 Gflop/s) - 100 (50010 Gflop/s)   errors: 0 - 4  (WARNING!)   temps: 60 C - 61 C "
        "  power: 650 W - 655 W \n\tSummary at:   Thu\n\n"
        "\r20.0%  proc'd: 200 (50000 Gflop/s) - 200 (50010 Gflop/s)   errors: 0 - 2  (WARNING!)   temps: 60 C - -- "
        "  power: 650 W - 655 W \nTested 2 GPUs:\n\tGPU 0: OK\n\tGPU 1: FAULTY\n"
    )
    ms = parse_gpu_burn(text).measurements
    assert by(ms, "errors", 1).value == 6
    assert by(ms, "temp_max", 1).value == 61
    assert by(ms, "tool_verdict", 1).text == "FAULTY"
    assert by(ms, "iterations", 0).value == 200


def test_it_marks_a_died_worker() -> None:
    text = (
        "\r50.0%  proc'd: -1 (0 Gflop/s) - 300 (49000 Gflop/s)   errors: 0  (DIED!)- 0   temps: 40 C - 60 C "
        "\nKilling processes with SIGTERM (soft kill)\ndone\n\nTested 2 GPUs:\n\tGPU 0: OK\n\tGPU 1: OK\n"
    )
    ms = parse_gpu_burn(text).measurements
    assert by(ms, "iterations", 0).value == -1
    assert by(ms, "iterations", 0).labels == {"died": "1"}
    assert by(ms, "gflops", 1).value == 49000


def test_it_raises_on_text_with_no_gpu_burn_lines() -> None:
    with pytest.raises(EvidenceError, match="no progress line and no result"):
        parse_gpu_burn("bash: gpu_burn: command not found\n")

"""The `nccl` parser on every captured nccl-tests output (tests/fixtures/nccl-tests/)."""

from __future__ import annotations

from pathlib import Path

import pytest

from checks.core.base import EvidenceError, Measurement
from checks.core.parsers import parse_output
from checks.nccl.allreduce import format_size, parse_nccl, parse_report, parse_size

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nccl-tests"
TABLES = [
    "all_reduce_perf_2node_16xA100-80GB_pairwise_gcm.txt",
    "all_reduce_perf_2node_16xH100_gcp_a3mega.txt",
    "all_reduce_perf_8xA100-40GB_old_format_nocheck.txt",
    "all_reduce_perf_8xA100-80GB_single_node_gcm.txt",
]
SLOTS = "mpirun_not_enough_slots_failure_gcm.txt"


def text(name: str) -> str:
    return (FIXTURES / name).read_text()


def values(measurements: list[Measurement]) -> dict[str, float | str | None]:
    return {m.name: (m.text if m.name in ("collective", "hosts", "gpu_models", "nccl_version") else m.value)
            for m in measurements}  # fmt: skip


def test_the_nccl_kind_parses_a_finished_run_and_refuses_a_cut_one() -> None:
    full = text("all_reduce_perf_8xA100-80GB_single_node_gcm.txt")
    assert values(parse_output("nccl", full).measurements)["busbw_peak"] == 231.72
    cut = full[: full.index("# Avg bus bandwidth")]
    with pytest.raises(EvidenceError, match="incomplete"):
        parse_output("nccl", cut)


def test_it_has_a_source_note_for_every_fixture() -> None:
    for name in [*TABLES, SLOTS]:
        assert (FIXTURES / name.replace(".txt", ".source.txt")).read_text().startswith("Source: https://")


# (fixture, busbw_peak, algbw_peak, busbw_avg_reported, wrong, ranks, nodes, size_at_peak)
PINNED = [
    ("all_reduce_perf_2node_16xA100-80GB_pairwise_gcm.txt", 182.80, 97.50, 150.209, 0, 16, 2, 1 << 30),
    ("all_reduce_perf_2node_16xH100_gcp_a3mega.txt", 338.82, 180.71, 70.742, 0, 16, 2, 8 << 30),
    ("all_reduce_perf_8xA100-40GB_old_format_nocheck.txt", 235.26, 134.44, 68.4048, None, 8, 1, 8 << 30),
    ("all_reduce_perf_8xA100-80GB_single_node_gcm.txt", 231.72, 132.41, 210.99, 0, 8, 1, 1 << 30),
]


@pytest.mark.parametrize(("name", "busbw", "algbw", "avg", "wrong", "ranks", "nodes", "size"), PINNED)
def test_it_pins_every_fixture(name, busbw, algbw, avg, wrong, ranks, nodes, size) -> None:
    parsed = parse_nccl(text(name))
    got = values(parsed.measurements)
    assert got["busbw_peak"] == busbw
    assert got["algbw_peak"] == algbw
    assert got["busbw_avg_reported"] == avg
    assert got["wrong"] == wrong
    assert got["ranks"] == ranks
    assert got["nodes"] == nodes
    assert got["size_at_peak"] == size
    assert got["collective"] == "all_reduce"  # inferred: busbw/algbw = 2(n-1)/n
    assert parsed.warnings == []


def test_it_reads_hosts_models_and_version_from_the_new_format() -> None:
    got = values(parse_nccl(text("all_reduce_perf_2node_16xH100_gcp_a3mega.txt")).measurements)
    assert got["hosts"] == "ztan-mig-235z,ztan-mig-gq73"
    assert got["gpu_models"] == "NVIDIA H100 80GB HBM3"
    got = values(parse_nccl(text("all_reduce_perf_8xA100-80GB_single_node_gcm.txt")).measurements)
    assert got["nccl_version"] == "2.16.2+cuda11.6"


def test_it_reads_the_old_format_without_root_and_with_na_and_an_nccl_info_line() -> None:
    report = parse_report(text("all_reduce_perf_8xA100-40GB_old_format_nocheck.txt"))
    assert len(report.rows) == 34  # two 0-byte rows, then 4 B .. 8 GiB (32 sizes); the INFO line is skipped
    first, last = report.rows[0], report.rows[-1]
    assert (first.size, first.root, first.placements["in-place"].wrong) == (0, None, None)
    assert last.placements["in-place"].busbw == 235.03
    assert (report.out_of_bounds, report.out_of_bounds_failed) == (0, False)
    assert report.hosts == ["localhost"]
    wrong = next(m for m in parse_nccl(text(TABLES[2])).measurements if m.name == "wrong")
    assert wrong.labels["missing"] == "#wrong is N/A: results were not validated (run with -c 1)"


def test_it_reads_the_new_format_with_root_and_both_placements() -> None:
    report = parse_report(text("all_reduce_perf_2node_16xA100-80GB_pairwise_gcm.txt"))
    row = report.rows[-1]
    assert (row.size, row.count, row.dtype, row.redop, row.root) == (1 << 30, 268435456, "float", "sum", -1)
    assert row.placements["out-of-place"].time_us == 11013
    assert row.placements["in-place"].algbw == 96.74
    assert report.settings["minBytes"] == "33554432"


def test_it_takes_the_peak_from_the_better_placement() -> None:
    # 8 GiB row of the a3mega run: out-of-place 338.82 beats in-place 337.35; at 2 GiB in-place wins.
    peak = next(m for m in parse_nccl(text(TABLES[1])).measurements if m.name == "busbw_peak")
    assert peak.labels == {"peak_min_bytes": str(1 << 30), "size": str(8 << 30), "placement": "out-of-place"}


def test_it_raises_naming_the_mpirun_error_for_the_crashed_run() -> None:
    with pytest.raises(EvidenceError) as err:
        parse_nccl(text(SLOTS))
    assert str(err.value) == (
        "no nccl-tests result table: mpirun: There are not enough slots available in the system to satisfy "
        "the 16 slots that were requested by the application: /shared/home/abinesh/nccl-tests/build/all_reduce_perf"
    )


def test_it_raises_on_text_without_a_table() -> None:
    with pytest.raises(EvidenceError, match="no nccl-tests result table in the output"):
        parse_nccl("hello\n# nThread 1 nGpus 8\n")


def test_it_raises_on_a_crashed_test_even_with_rows() -> None:
    crashed = (
        text(TABLES[3]).split("# Out of bounds")[0] + "gpu01: Test NCCL failure common.cu:958 'unhandled cuda error'\n"
    )
    with pytest.raises(EvidenceError, match="the test crashed: Test NCCL failure common.cu:958 'unhandled cuda error'"):
        parse_nccl(crashed)


def test_it_refuses_an_output_without_its_closing_summary() -> None:
    cut = text(TABLES[3]).split("# Out of bounds")[0]
    with pytest.raises(EvidenceError, match=r"^output incomplete: no closing summary"):
        parse_nccl(cut)
    report = parse_report(cut)  # the table itself is still readable (for the busbw curve)
    assert (report.complete, len(report.rows)) == (False, 6)


def test_it_counts_wrong_values_from_rows_and_footer() -> None:
    lines = text(TABLES[3]).replace(
        "   8109.1  132.41  231.72      0   8109.7  132.40  231.70      0",
        "   8109.1  132.41  231.72      5   8109.7  132.40  231.70      7",
    )
    lines = lines.replace("# Out of bounds values : 0 OK", "# Out of bounds values : 12 FAILED")
    assert values(parse_nccl(lines).measurements)["wrong"] == 12


def test_it_reports_no_peak_when_no_size_reaches_the_floor() -> None:
    small = "\n".join(line for line in text(TABLES[3]).splitlines() if not line.startswith("  1073741824"))
    parsed = parse_nccl(small)
    peak = next(m for m in parsed.measurements if m.name == "busbw_peak")
    assert peak.value is None
    assert peak.labels["missing"] == (
        "largest size 512 MiB is below peak_min_bytes (1 GiB): cannot judge peak bandwidth"
    )


def test_it_parses_and_formats_sizes_like_nccl_tests() -> None:
    assert [parse_size(s) for s in ("8", "1K", "512M", "8G", "1g", 64)] == [8, 1024, 512 << 20, 8 << 30, 1 << 30, 64]
    assert [format_size(s) for s in (8, 1536, 1 << 20, 8 << 30)] == ["8 B", "1.5 KiB", "1 MiB", "8 GiB"]
    with pytest.raises(ValueError):
        parse_size("8X")


def test_it_ignores_nccl_warn_lines_in_a_completed_run() -> None:
    noisy = text(TABLES[3]).replace(
        "NCCL version 2.16.2+cuda11.6\n",
        "NCCL version 2.16.2+cuda11.6\ngpu01:66421:66500 [0] NCCL WARN NET/IB : Got async event : port error\n",
    )
    assert values(parse_nccl(noisy).measurements)["busbw_peak"] == 231.72


def test_it_reads_a_footer_without_hash_and_a_failed_average() -> None:
    old = text(TABLES[3]).replace("# Out of bounds values : 0 OK", " Out of bounds values : 0 OK")
    old = old.replace("# Avg bus bandwidth    : 210.99", " Avg bus bandwidth    : 210.99 FAILED")
    report = parse_report(old)
    assert (report.out_of_bounds, report.avg_busbw, report.avg_failed) == (0, 210.99, True)

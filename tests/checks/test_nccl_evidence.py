"""nccl-tests: impossible evidence, completion markers, repeated sizes, and the other 2.x collectives.

Each test here failed before checks/core/evidence.py and checks/nccl/nccl_tests.py: inf/1e308 busbw passed
every profile, NaN and negative busbw passed without a floor, #wrong 7 and -7 netted to 0, an
output without its closing summary passed, repeated sizes went unnoticed, all_gather_perf was
named reduce_scatter and broadcast_perf was not read at all.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from checks import get_check, run_check
from checks.core.base import ERROR, FAIL, PASS, WARN, Command, CommandOutput, EvidenceError, NodeContext
from checks.core.profiles import PROFILES, resolve_thresholds
from checks.nccl.allreduce import parse_nccl
from checks.nccl.nccl_tests import infer_collective, parse_report, table_problems

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nccl-tests"
A100_1NODE = "all_reduce_perf_8xA100-80GB_single_node_gcm.txt"
H100_2NODE = "all_reduce_perf_2node_16xH100_gcp_a3mega.txt"
ALL_GATHER_OLD = "all_gather_perf_8xA100-40GB_old_format_nocheck.txt"
ALL_GATHER_NEW = "all_gather_perf_2node_2xGB10_v2.18.5.txt"
BROADCAST_OLD = "broadcast_perf_8xA100-40GB_old_format_nocheck.txt"
NODE = NodeContext(hostname="gpu001", expected_gpus=8)
# The 1 GiB row of the single-node A100 fixture (the judged peak) and its 32 MiB row.
PEAK_ROW = "  1073741824     268435456     float     sum      -1   8109.1  132.41  231.72      0   8109.7  132.40  231.70      0"  # noqa: E501
SMALL_ROW = "    33554432       8388608     float     sum      -1    344.8   97.32  170.31      0    349.5   95.99  167.99      0"  # noqa: E501


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def judge(stdout: str, profile: str = "A100-SXM-8", binary: str = "all_reduce_perf"):
    cmd = Command(argv=(binary, "-b", "8", "-e", "8G"), timeout=300, label="all_reduce_perf")
    outputs = [CommandOutput(command=cmd, stdout=stdout, stderr="", exit_code=0)]
    return run_check(get_check("nccl_allreduce"), None, resolve_thresholds("nccl_allreduce", profile), outputs, NODE)


def with_peak_busbw(value: str) -> str:
    text = fixture(A100_1NODE)
    assert PEAK_ROW in text
    return text.replace(PEAK_ROW, PEAK_ROW.replace("  231.72      0   8109.7", f"  {value}      0   8109.7"))


def wrong_counts(out_of_place: object, in_place: object) -> str:
    """PEAK_ROW with its two #wrong cells replaced (right-aligned like nccl-tests prints them)."""
    return PEAK_ROW.replace("231.72      0   8109.7", f"231.72  {out_of_place!s:>5}   8109.7").replace(
        "231.70      0", f"231.70  {in_place!s:>5}"
    )


def test_the_rows_these_tests_edit_are_in_the_fixture() -> None:
    text = fixture(A100_1NODE)
    assert PEAK_ROW in text and SMALL_ROW in text


@pytest.mark.parametrize("profile", sorted(PROFILES))
@pytest.mark.parametrize("value", ["inf", "1e308"])
def test_it_errors_on_an_infinite_or_absurd_busbw_on_every_profile(value: str, profile: str) -> None:
    measurements, verdict = judge(with_peak_busbw(value), profile)
    assert verdict.status == ERROR, verdict.reason
    assert verdict.reason.startswith("impossible evidence: busbw = ")
    assert f"{float(value):g} GB/s at 1 GiB (out-of-place)" in verdict.reason
    assert measurements == []


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("nan", "nan GB/s at 1 GiB (out-of-place) (must be finite)"),
        ("-231.72", "-231.72 GB/s at 1 GiB (out-of-place) (a bandwidth must be a number in 0..20000)"),
    ],
)
def test_it_errors_on_nan_or_negative_busbw_without_a_floor(value: str, words: str) -> None:
    _, verdict = judge(with_peak_busbw(value), "generic")
    assert verdict.status == ERROR
    assert words in verdict.reason


def test_it_errors_on_an_impossible_value_in_a_row_that_is_not_the_peak() -> None:
    text = fixture(A100_1NODE).replace(SMALL_ROW, SMALL_ROW.replace("  170.31  ", "    -inf  "))
    _, verdict = judge(text)
    assert (verdict.status, verdict.reason) == (
        ERROR,
        "impossible evidence: busbw = -inf GB/s at 32 MiB (out-of-place) (must be finite)",
    )


def test_it_judges_wrong_per_row_so_seven_and_minus_seven_do_not_cancel() -> None:
    text = fixture(A100_1NODE).replace(PEAK_ROW, wrong_counts(7, -7))
    assert "231.72      7   8109.7  132.40  231.70     -7" in text
    _, verdict = judge(text)
    assert verdict.status == ERROR
    assert "#wrong = -7 at 1 GiB (in-place) (a count must be a non-negative integer)" in verdict.reason


def test_it_names_the_rows_with_wrong_results() -> None:
    text = fixture(A100_1NODE).replace(PEAK_ROW, wrong_counts(7, 0))
    text = text.replace("# Out of bounds values : 0 OK", "# Out of bounds values : 1 FAILED")
    _, verdict = judge(text)
    assert (verdict.status, verdict.reason) == (
        FAIL,
        "#wrong = 7 (results differ from the reference; 1 wrong, first at 1 GiB out-of-place: 7)",
    )


def test_it_errors_when_the_summary_contradicts_the_rows() -> None:
    text = fixture(A100_1NODE).replace(PEAK_ROW, wrong_counts(7, 0))
    _, verdict = judge(text)  # rows say 7 wrong, the summary still says "0 OK"
    assert verdict.status == ERROR
    assert "the summary says 0 out-of-bounds values but 1 results have #wrong > 0" in verdict.reason


@pytest.mark.parametrize(
    "cut",
    ["# Out of bounds values", "# Avg bus bandwidth"],
    ids=["no-summary", "no-average"],
)
def test_it_errors_output_incomplete_without_the_closing_summary(cut: str) -> None:
    text = fixture(A100_1NODE)
    text = text[: text.index(cut)]
    measurements, verdict = judge(text)
    assert verdict.status == ERROR
    assert verdict.reason.startswith("output incomplete: no closing summary")
    assert measurements == []


def test_it_errors_on_a_repeated_message_size() -> None:
    text = fixture(A100_1NODE).replace(PEAK_ROW, PEAK_ROW + "\n" + PEAK_ROW.replace("231.72", "240.00"))
    _, verdict = judge(text)
    assert verdict.status == ERROR
    assert "message size 1 GiB listed twice" in verdict.reason


def test_it_errors_on_two_outputs_glued_together() -> None:
    text = fixture(A100_1NODE)
    _, verdict = judge(text + text)
    assert verdict.status == ERROR
    assert "message size 32 MiB after 1 GiB (sizes out of order): two outputs glued together" in verdict.reason


def test_it_errors_on_sizes_out_of_order() -> None:
    text = fixture(A100_1NODE)
    rows = [line for line in text.splitlines() if line.strip() and line.split()[0].isdigit()]
    assert len(rows) == 6
    edited = text.replace(rows[1] + "\n", "").replace(rows[2], rows[2] + "\n" + rows[1])
    _, verdict = judge(edited)
    assert verdict.status == ERROR
    assert "message size 64 MiB after 128 MiB (sizes out of order)" in verdict.reason


def test_it_accepts_the_repeated_zero_byte_rows_nccl_tests_prints() -> None:
    # The old all_gather fixture has five 0-byte rows: sizes below one element per rank round to 0.
    report = parse_report(fixture(ALL_GATHER_OLD))
    assert [r.size for r in report.rows[:6]] == [0, 0, 0, 0, 0, 32]
    assert parse_nccl(fixture(ALL_GATHER_OLD)).measurements


def test_it_errors_on_an_unreadable_row_instead_of_dropping_it() -> None:
    text = fixture(A100_1NODE).replace(PEAK_ROW, wrong_counts("0.5", 0))
    _, verdict = judge(text)
    assert verdict.status == ERROR
    assert verdict.reason.startswith("impossible evidence: unreadable table row '1073741824")


def test_it_keeps_an_impossible_value_out_of_the_busbw_curve() -> None:
    cmd = Command(argv=("all_reduce_perf",), timeout=60, label="all_reduce_perf")
    out = CommandOutput(command=cmd, stdout=with_peak_busbw("inf").replace("231.70", "nan"), stderr="", exit_code=0)
    [series] = get_check("nccl_allreduce").series([out])
    assert series.y[series.x.index(float(1 << 30))] is None


def test_an_unchanged_fixture_still_passes() -> None:
    _, verdict = judge(fixture(A100_1NODE))
    assert (verdict.status, verdict.reason) == (PASS, "busbw 231.7 GB/s at 1 GiB (floor 228), #wrong 0")


def test_it_warns_not_judged_across_nodes_without_a_floor() -> None:
    check = get_check("nccl_allreduce_multi")
    cmd = Command(argv=("mpirun", "all_reduce_perf"), timeout=600, label="all_reduce_perf")
    outputs = [CommandOutput(command=cmd, stdout=fixture(H100_2NODE), stderr="", exit_code=0)]
    from checks.core.base import GroupContext, run_group_check

    nodes = (NodeContext("ztan-mig-235z", expected_gpus=8), NodeContext("ztan-mig-gq73", expected_gpus=8))
    group = GroupContext(nodes=nodes, launcher=nodes[0])
    _, verdict = run_group_check(check, None, resolve_thresholds("nccl_allreduce_multi", "generic"), outputs, group)
    assert verdict.status == WARN
    assert "not judged (no min_busbw_gbps floor set)" in verdict.reason


# --- the other collectives of nccl-tests 2.x -------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "collective", "busbw", "algbw", "avg", "ranks"),
    [
        (ALL_GATHER_OLD, "all_gather", 230.07, 262.94, 58.2651, 8),
        (ALL_GATHER_NEW, "all_gather", 22.98, 45.96, 22.9611, 2),
        (BROADCAST_OLD, "broadcast", 234.70, 234.70, 64.8653, 8),
    ],
)
def test_it_parses_and_names_the_other_collectives(name, collective, busbw, algbw, avg, ranks) -> None:
    measurements = parse_nccl(fixture(name)).measurements
    facts = {m.name: m for m in measurements}
    assert facts["collective"].text == collective
    assert (facts["busbw_peak"].value, facts["algbw_peak"].value) == (busbw, algbw)
    assert facts["busbw_avg_reported"].value == avg
    assert facts["ranks"].value == ranks
    assert (FIXTURES / name.replace(".txt", ".source.txt")).read_text().startswith("Source: https://")


def test_it_reads_the_old_broadcast_rows_by_their_header() -> None:
    report = parse_report(fixture(BROADCAST_OLD))
    assert len(report.rows) == 34
    last = report.rows[-1]
    assert (last.size, last.count, last.dtype, last.redop, last.root) == (8 << 30, 2147483648, "float", "", 0)
    assert last.placements["out-of-place"].time_us == 36896
    assert last.placements["in-place"].busbw == 234.70


def test_it_names_all_gather_from_the_table_when_the_output_does_not() -> None:
    report = parse_report(fixture(ALL_GATHER_OLD))
    assert report.named == ""  # pre-2.15: no "Collective test starting" line
    assert infer_collective(report) == "all_gather"  # not reduce_scatter: no redop column
    assert parse_report(fixture(ALL_GATHER_NEW)).named == "all_gather"


@pytest.mark.parametrize(
    ("name", "program"), [(ALL_GATHER_OLD, "all_gather_perf"), (ALL_GATHER_NEW, "all_gather_perf"),
                          (BROADCAST_OLD, "broadcast_perf")],
)  # fmt: skip
def test_the_all_reduce_check_refuses_another_collective(name: str, program: str) -> None:
    # Even when the command claims all_reduce_perf: the output's own table says otherwise.
    _, verdict = judge(fixture(name), "generic")
    assert verdict.status == ERROR
    assert f"the output is from {program}, not all_reduce_perf" in verdict.reason


def test_parse_raises_on_impossible_and_incomplete_outputs() -> None:
    with pytest.raises(EvidenceError, match="impossible evidence: busbw = inf GB/s"):
        parse_nccl(with_peak_busbw("inf"))
    text = fixture(ALL_GATHER_NEW)
    with pytest.raises(EvidenceError, match="output incomplete"):
        parse_nccl(text[: text.index("# Out of bounds")])


def test_algbw_is_only_held_finite_because_one_rank_makes_it_size_over_a_launch() -> None:
    # With one rank an in-place all-reduce is a no-op: algbw = size / kernel launch time can exceed
    # every physical bound while busbw (x 2(n-1)/n = 0) cannot.
    huge = PEAK_ROW.replace("132.41  231.72", "9999999.00  231.72")
    assert table_problems(parse_report(fixture(A100_1NODE).replace(PEAK_ROW, huge))) == []
    busy = PEAK_ROW.replace("132.41  231.72", "132.41  99999.00")
    assert table_problems(parse_report(fixture(A100_1NODE).replace(PEAK_ROW, busy))) == [
        "busbw = 99999 GB/s at 1 GiB (out-of-place) (a bandwidth must be a number in 0..20000)"
    ]

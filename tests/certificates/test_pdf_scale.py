"""The certificate at fleet size: per-node tables as aligned text lines (escaped, non-pass states
coloured, columns aligned across parts, GPUs of a node kept together) and charts that show a
distribution instead of one trace per node past a readable count."""

from __future__ import annotations

import math
from typing import Any

import pytest

from checks.core.presentation import CertificateChart
from portal.certificates import charts, pdf_tables


def _node(i: int, *, states: list[str] | None = None, gpus: int = 8, hostname: str = "") -> dict[str, Any]:
    return {
        "hostname": hostname or f"gpu{i:04d}", "serial": f"SN{i}", "rack": "r1", "position": i,
        "states": states or ["pass", "pass"],
        "gpus": [{"index": g, "uuid": f"GPU-{i}-{g}", "serial": f"S{i}{g}"} for g in range(gpus)],
    }  # fmt: skip


def _text(line: str) -> str:
    return line.replace('<span class="st-waived">', "").replace('<span class="st-fail">', "").replace("</span>", "")


def test_a_hostile_hostname_is_escaped_and_cannot_break_the_markup() -> None:
    nodes = [_node(1, hostname='<img src=x onerror="alert(1)">&')]
    widths = pdf_tables.states_widths(nodes, 2)
    table = pdf_tables.states_table(nodes, 2, widths=widths)
    [line] = table.blocks[0]
    assert "<img" not in line and "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;&amp;" in line
    gpus = pdf_tables.gpus_table(nodes, widths=pdf_tables.gpus_widths(nodes))
    assert all("<img" not in line for line in gpus.blocks[0])


def test_only_states_other_than_pass_are_marked_and_columns_stay_aligned() -> None:
    nodes = [_node(1, states=["pass", "waived"]), _node(22, states=["pass", "pass"], hostname="a-much-longer-name")]
    widths = pdf_tables.states_widths(nodes, 2)
    table = pdf_tables.states_table(nodes, 2, widths=widths)
    first, second = table.blocks[0]
    assert '<span class="st-waived">waived</span>' in first and "<span" not in second
    # The last column starts at the same character in the header and in every line.
    column = _text(table.header).index("C2")
    assert _text(first)[column:].startswith("waived") and _text(second)[column:].startswith("pass")


def test_parts_of_one_table_use_the_widths_of_the_whole_table() -> None:
    nodes = [_node(i) for i in range(4)] + [_node(99, hostname="x" * 40)]
    widths = pdf_tables.states_widths(nodes, 2)
    early = pdf_tables.states_table(nodes[:2], 2, widths=widths)
    late = pdf_tables.states_table(nodes[2:], 2, widths=widths)
    assert early.header == late.header and early.font_pt == late.font_pt
    assert _text(early.blocks[0][0]).index("pass") == _text(late.blocks[0][-1]).index("pass")
    assert _text(early.header).index("C1") == _text(early.blocks[0][0]).index("pass")


def test_a_wide_table_shrinks_its_font_to_fit_the_page_down_to_a_floor() -> None:
    assert pdf_tables.font_size(40) == pdf_tables.FONT_PT
    wide = pdf_tables.font_size(160)
    assert pdf_tables.MIN_FONT_PT < wide < pdf_tables.FONT_PT
    assert 160 * wide * pdf_tables.MONO_ADVANCE_EM <= pdf_tables.LINE_WIDTH_PT
    assert pdf_tables.font_size(10_000) == pdf_tables.MIN_FONT_PT  # past the floor the line wraps (pre-wrap)


def test_a_nodes_gpus_stay_in_one_block_and_every_gpu_is_listed_once() -> None:
    nodes = [_node(i) for i in range(10)] + [_node(10, gpus=0)]
    table = pdf_tables.gpus_table(nodes, widths=pdf_tables.gpus_widths(nodes))
    assert all(len(block) <= pdf_tables.LINES_PER_BLOCK for block in table.blocks)
    for block in table.blocks[:-1]:
        hosts = [line.split()[0] for line in block]
        assert all(hosts.count(h) == 8 for h in set(hosts)), "a node's GPUs were split across blocks"
    listed = [line for block in table.blocks for line in block]
    assert sum("GPU-" in line for line in listed) == 80
    assert "no GPU inventory in the cited evidence" in listed[-1]


def test_a_group_longer_than_a_block_is_split_rather_than_lost() -> None:
    lines = [[pdf_tables.mark_safe(str(i)) for i in range(pdf_tables.LINES_PER_BLOCK * 2 + 3)]]
    blocks = pdf_tables._blocks(lines)
    assert [len(b) for b in blocks] == [pdf_tables.LINES_PER_BLOCK, pdf_tables.LINES_PER_BLOCK, 3]
    assert [x for b in blocks for x in b] == lines[0]


def _curve(host: str, ys: list[float]) -> dict[str, Any]:
    return {"result__node__hostname": host, "result__item_key": "nccl", "x": [1.0, 2.0, 3.0][: len(ys)], "y": ys}


def test_the_envelope_is_lowest_median_highest_at_each_x_and_skips_broken_numbers() -> None:
    curves = [_curve("a", [1, 10, 5]), _curve("b", [3, math.nan, 7]), _curve("c", [2, 30, math.inf])]
    xs, low, mid, high = charts.envelope(curves)
    assert xs == [1.0, 2.0, 3.0]
    assert low == [1, 10, 5] and mid == [2, 20, 6] and high == [3, 30, 7]


CURVES = CertificateChart("busbw", "curves", ("busbw",), "GB/s", x_title="bytes", threshold="busbw_min_gbps")


@pytest.mark.parametrize(("nodes", "traces"), [(charts.MAX_CURVES, charts.MAX_CURVES), (charts.MAX_CURVES + 1, 3)])
def test_past_a_readable_count_the_curves_become_a_band(nodes: int, traces: int) -> None:
    curves = [_curve(f"n{i}", [float(i), float(i + 1), float(i + 2)]) for i in range(nodes)]
    fig = charts._curves_figure(CURVES, curves, {"nccl": {"busbw_min_gbps": "1.5"}})
    assert len(fig.data) == traces
    assert fig.layout.shapes[0].y0 == 1.5  # the threshold is drawn either way
    if traces == 3:
        assert [t.name for t in fig.data] == [f"highest of {nodes} nodes", f"lowest of {nodes} nodes", "median"]
        assert min(fig.data[1].y) == 0.0 and max(fig.data[0].y) == nodes + 1


BARS = CertificateChart("gflops", "bars", ("gflops",), "Gflop/s", x_title="node/GPU")


@pytest.mark.parametrize(("bars", "kind"), [(charts.MAX_BARS, "bar"), (charts.MAX_BARS + 1, "histogram")])
def test_past_a_readable_count_the_bars_become_a_histogram(bars: int, kind: str) -> None:
    rows = [{"result__node__hostname": f"n{i // 8}", "gpu": i % 8, "value": 1000.0 + i} for i in range(bars - 1)]
    rows.append({"result__node__hostname": "broken", "gpu": 0, "value": math.nan})
    fig = charts._bars_figure(BARS, {"gflops": rows})
    [trace] = fig.data
    assert trace.type == kind
    if kind == "histogram":
        assert len(trace.x) == bars - 1 and trace.name == f"gflops ({bars - 1})"  # NaN left out, counted honestly
        assert fig.layout.yaxis.title.text == "GPUs" and fig.layout.xaxis.title.text == "Gflop/s"

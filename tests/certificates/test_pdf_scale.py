"""The certificate at fleet size: per-node tables (escaped, non-pass states coloured, columns sized
over every node so that parts line up, GPUs of a node kept together) and charts that show a
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


def test_a_hostile_hostname_is_escaped_and_cannot_break_the_markup() -> None:
    nodes = [_node(1, hostname='<img src=x onerror="alert(1)">&')]
    [group] = pdf_tables.state_groups(nodes, 2)
    [row] = pdf_tables.state_rows(nodes, group)
    assert "<img" not in row and "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;&amp;" in row
    gpus = pdf_tables.gpus_table(nodes, widths=pdf_tables.gpus_widths(nodes))
    assert all("<img" not in line for line in gpus.blocks[0])


def test_only_states_other_than_pass_are_marked() -> None:
    nodes = [_node(1, states=["pass", "waived"]), _node(22, states=["pass", "pass"], hostname="a-much-longer-name")]
    [group] = pdf_tables.state_groups(nodes, 2)
    first, second = pdf_tables.state_rows(nodes, group)
    assert '<td class="st-waived">waived</td>' in first and "class=" not in second
    assert pdf_tables.state_header(group) == ["Node", "Serial", "Rack/pos", "C1", "C2"]


def test_the_parts_of_one_table_share_the_widths_of_its_widest_cells() -> None:
    """The columns are sized over every node, so a part (NODES_PER_PART nodes) without the long
    hostname still lines up with the one that has it."""
    nodes = [_node(i) for i in range(4)] + [_node(99, hostname="x" * 40)]
    [group] = pdf_tables.state_groups(nodes, 2)
    [alone] = pdf_tables.state_groups(nodes[:4], 2)
    assert group.widths_pt[0] > alone.widths_pt[0] and group.widths_pt[1:] == alone.widths_pt[1:]
    assert group.widths_pt[0] >= 40 * pdf_tables.MONO_ADVANCE_EM * group.font_pt


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


@pytest.mark.parametrize(("nodes", "gpus"), [(8, 8), (30, 8), (64, 1), (300, 1)])
def test_bar_labels_name_each_node_once_and_never_collide(nodes: int, gpus: int) -> None:
    rows = [
        {"result__node__hostname": f"gpu-node-{n:03d}", "gpu": g if gpus > 1 else None, "value": 1000.0}
        for n in range(nodes)
        for g in range(gpus)
    ]
    fig = charts._bars_figure(BARS, {"gflops": rows}, {"gflops": "Throughput per GPU"})
    axis = fig.layout.xaxis
    values, texts = list(axis.tickvals), list(axis.ticktext)
    assert axis.tickangle == 0 and texts and len(set(texts)) == len(texts)  # level, and a node named once
    per_bar = charts.PLOT_WIDTH_PX / (nodes * gpus)
    spans = [
        ((v + 0.5) * per_bar - len(t) * charts.TICK_CHAR_PX / 2, (v + 0.5) * per_bar + len(t) * charts.TICK_CHAR_PX / 2)
        for v, t in zip(values, texts, strict=True)
    ]
    assert all(0 <= left and right <= charts.PLOT_WIDTH_PX for left, right in spans)  # inside the plot
    assert all(b[0] - a[1] >= charts.TICK_GAP_PX - 1e-9 for a, b in zip(spans, spans[1:], strict=False))  # apart
    for value, text in zip(values, texts, strict=True):  # under the middle of that node's bars
        mine = [i for i, row in enumerate(rows) if row["result__node__hostname"] == text]
        assert value == (mine[0] + mine[-1]) / 2
    if gpus == 8 and nodes == 8:
        assert len(texts) == nodes  # every node named when they all fit


def test_grouped_bars_are_named_by_their_labels() -> None:
    chart = CertificateChart("fs", "bars", ("write_bw", "read_bw"), "GB/s", scale=1e9, grouped=True)
    rows = {name: [{"result__node__hostname": "n1", "gpu": None, "value": 5e9}] for name in chart.names}
    fig = charts._bars_figure(chart, rows, {"write_bw": "Write bandwidth", "read_bw": "Read bandwidth"})
    assert [t.name for t in fig.data] == ["Write bandwidth", "Read bandwidth"]


def test_grouped_bars_share_one_place_per_node_whatever_rows_each_name_has() -> None:
    chart = CertificateChart("fs", "bars", ("write_bw", "read_bw"), "GB/s", scale=1e9, grouped=True)
    write = [{"result__node__hostname": h, "gpu": None, "value": 5e9} for h in ("n1", "n2", "n3")]
    read = [{"result__node__hostname": h, "gpu": None, "value": 6e9} for h in ("n1", "n3")]  # n2 read nothing
    fig = charts._bars_figure(chart, {"write_bw": write, "read_bw": read})
    assert list(fig.data[0].x) == [0, 1, 2] and list(fig.data[1].x) == [0, 2]

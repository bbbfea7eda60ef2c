"""The "matrix" chart family: heatmaps drawn from what a check kind declares (checks/core/presentation.py
MatrixChart), on results of topology, host_bw and rdma_bw judged by their real checks from real tool
outputs and recorded through the run services, as the worker records them."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.core.cache import cache
from django.urls import reverse

from checks.core.base import FAIL
from checks.core.presentation import MatrixChart, Presentation
from checks.topology.check import RANK_NAMES
from portal.charts.figures.matrix import FAIL_SCALE, MAX_OUTLINES, PASS_SCALE, margin_pct, matrix_figure
from portal.charts.selectors.matrix import Cell, MatrixResult, build_matrix, matrix_result
from portal.runs.models import CheckResult, Run, Scope
from portal.runs.models import Measurement as Row
from tests.checks import test_host_bw as host_bw
from tests.portal.matrix_helpers import (
    H100_TOPO,
    HOSTILE,
    HOSTS,
    SLOW_H2D,
    far_nic,
    matrix_run,
    record_host_bw_one_slow,
    record_node,
    record_rdma,
    record_topology,
)

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _clear_cache():
    cache.clear()


@pytest.fixture
def run(cluster) -> Run:
    return matrix_run(cluster)


@pytest.fixture
def viewer(client, make_user):
    client.force_login(make_user("vera", "viewer"))
    return client


def figure_of(viewer, result: CheckResult) -> dict[str, Any]:
    response = viewer.get(reverse("charts:result_figure", args=[result.pk]))
    assert response.status_code == 200
    return response.json()


def heatmaps(figure: dict[str, Any]) -> list[dict[str, Any]]:
    return [t for t in figure["data"] if t["type"] == "heatmap"]


def marks(figure: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(axis, column, row) of every red outline, read back through its heatmap's categories."""
    by_axis = {t["xaxis"]: t for t in heatmaps(figure)}
    out = []
    for shape in figure["layout"].get("shapes", []):
        heat = by_axis[shape["xref"]]
        assert shape["yref"] == heat["yaxis"] and shape["line"]["color"] == "#cf222e"
        out.append((shape["xref"], heat["x"][round(shape["x0"] + 0.5)], heat["y"][round(shape["y0"] + 0.5)]))
    return out


def cell(trace: dict[str, Any], row: str, col: str, field: str = "z") -> Any:
    return trace[field][trace["y"].index(row)][trace["x"].index(col)]


# --- the three kinds -----------------------------------------------------------------------------------


def test_it_draws_the_topology_matrix_with_the_far_nics_marked(viewer, run) -> None:
    result = record_topology(run, far_nic())
    assert result.status == FAIL and "GPU3's nearest NICs mlx5_0, mlx5_1, mlx5_2 and 1 more are NODE" in result.reason

    page = viewer.get(reverse("runs:result_detail", args=[result.pk])).content.decode()
    figure = figure_of(viewer, result)

    assert reverse("charts:result_figure", args=[result.pk]) in page and reverse("plotly_js") in page
    assert 'id="result-chart"' in page and "<script>" not in page.split('id="result-charts"')[1]
    (heat,) = heatmaps(figure)
    assert heat["y"] == [f"GPU {g}" for g in range(8)]
    assert heat["x"] == [f"mlx5_{n}" for n in range(8)]
    assert (cell(heat, "GPU 0", "mlx5_0"), cell(heat, "GPU 0", "mlx5_0", "text")) == (2, "PIX")
    assert (cell(heat, "GPU 3", "mlx5_3"), cell(heat, "GPU 3", "mlx5_3", "text")) == (5, "NODE")
    assert cell(heat, "GPU 0", "mlx5_4", "text") == "SYS"
    assert heat["colorbar"]["ticktext"] == list(RANK_NAMES) and (heat["zmin"], heat["zmax"]) == (-0.5, 6.5)
    assert marks(figure) == [("x", f"mlx5_{n}", "GPU 3") for n in range(4)]
    hover = cell(heat, "GPU 3", "mlx5_2", "hovertext")
    assert "out of spec: gpu_nearest_nic_link NODE (&lt;= PXB)" in hover
    assert "out of spec" not in cell(heat, "GPU 3", "mlx5_4", "hovertext")
    assert "outlined in red: out of spec (4)" in figure["layout"]["annotations"][0]["text"]
    assert figure["layout"]["yaxis"]["autorange"] == "reversed"


def test_a_healthy_topology_has_no_mark(viewer, run) -> None:
    figure = figure_of(viewer, record_topology(run, H100_TOPO))
    assert marks(figure) == []
    assert "out of spec" not in figure["layout"]["annotations"][0]["text"]


def test_it_draws_host_bandwidth_per_gpu_and_peer_copies_with_the_slow_ones_marked(viewer, run) -> None:
    measurements, verdict = host_bw.judge(
        host_bw.text(host_bw.T4), gpus=4, profile=None, min_h2d_gbps=12.32, min_d2h_gbps=10.0, min_d2d_gbps=10.2
    )
    result = record_node(run, "n02", "host-bw", verdict, measurements)
    assert result.status == FAIL

    figure = figure_of(viewer, result)

    host, peers = heatmaps(figure)
    assert host["x"] == ["host to device", "device to host"] and host["y"] == [f"GPU {g}" for g in range(4)]
    assert cell(host, "GPU 0", "host to device", "customdata") == 12.35
    assert cell(host, "GPU 2", "host to device", "text") == "12.3"
    assert "threshold: &gt;= 12.32" in cell(host, "GPU 2", "host to device", "hovertext")
    assert peers["x"] == peers["y"] == ["0", "1", "2", "3"]
    assert cell(peers, "0", "0") is None, "a GPU with itself is no measurement"
    assert cell(host, "GPU 2", "host to device") < 0 < cell(host, "GPU 0", "host to device"), "by the floor"
    assert cell(peers, "3", "0") < 0 < cell(peers, "0", "1")
    assert host["zmin"] == -host["zmax"] and peers["zmin"] == -peers["zmax"], "centred on the threshold"
    assert "vs threshold" in host["colorbar"]["title"]["text"]
    crosses = marks(figure)
    assert ("x", "host to device", "GPU 2") in crosses
    slow_pairs = {(src, dst) for axis, dst, src in crosses if axis == "x2"}
    assert slow_pairs == {("3", "0"), ("1", "0"), ("0", "2"), ("2", "0")}  # the check's reason names these
    titles = [a["text"] for a in figure["layout"]["annotations"]]
    assert titles[0].startswith("Host copy bandwidth per GPU (GB/s)") and titles[1].startswith("GPU peer copy")


def test_a_host_copy_10_percent_under_its_floor_is_on_the_failing_side_of_the_scale(viewer, run) -> None:
    host, _ = heatmaps(figure_of(viewer, record_host_bw_one_slow(run)))

    assert cell(host, "GPU 2", "host to device") == pytest.approx(-10.0), "10% short of 12.30"
    assert all(0 < cell(host, f"GPU {g}", "host to device") < 1 for g in (0, 1, 3)), "just over the floor"
    scale = host["colorscale"]
    assert (host["zmin"], host["zmax"]) == (-40, 40) and scale[0] == [0.0, FAIL_SCALE[0]], "d2h 31% over: a span of 40%"
    assert scale[1][0] < 0.5 and scale[2] == [0.5, PASS_SCALE[0]], "red stops just short of the threshold"
    assert host["colorbar"]["ticktext"][2] == "threshold"
    assert host["colorbar"]["title"]["text"] == "vs threshold<br>&gt;= 10 GB/s<br>&gt;= 12.3 GB/s"
    hover = cell(host, "GPU 2", "host to device", "hovertext")
    assert f"{SLOW_H2D} GB/s" in hover and "threshold: &gt;= 12.3" in hover and "10.0% short of" in hover


def test_it_draws_rdma_bandwidth_per_port_with_the_slow_pair_marked(viewer, run) -> None:
    result = record_rdma(run, {("n02", "n03", "mlx5_1"): 98.04})
    assert result.status == FAIL and result.scope == Scope.GROUP

    page = viewer.get(reverse("runs:result_detail", args=[result.pk])).content.decode()
    figure = figure_of(viewer, result)

    assert reverse("charts:result_figure", args=[result.pk]) in page
    bandwidth, latency, per_gpu = heatmaps(figure)
    assert bandwidth["y"] == HOSTS and bandwidth["x"] == [f"mlx5_{n}" for n in range(8)]
    assert cell(bandwidth, "n02", "mlx5_1", "customdata") == 98.04
    assert cell(bandwidth, "n01", "mlx5_1", "customdata") == 392.34
    assert cell(bandwidth, "n02", "mlx5_1") == pytest.approx(98.04 / 360 * 100 - 100), "% short of 360"
    assert bandwidth["colorbar"]["title"]["text"] == "vs threshold<br>&gt;= 360 Gb/s"
    hover = cell(bandwidth, "n02", "mlx5_1", "hovertext")
    assert "server: n03" in hover and "threshold: &gt;= 360" in hover and "98.04 Gb/s" in hover
    assert ("x", "mlx5_1", "n02") in marks(figure)
    assert cell(latency, "n01", "mlx5_0", "customdata") == 0.98
    assert cell(latency, "n01", "mlx5_0") > 0, "under its latency ceiling: to spare"
    assert per_gpu["x"] == ["per GPU"] and per_gpu["y"] == HOSTS
    assert figure["layout"]["title"]["text"] == f"rdma-bw on {run.node_set}"


# --- escaping, bounds, queries --------------------------------------------------------------------------


def test_it_shows_a_hostile_nic_name_as_text(viewer, run) -> None:
    result = record_topology(run, far_nic().replace("NIC0: mlx5_0", f"NIC0: {HOSTILE}"))

    raw = viewer.get(reverse("charts:result_figure", args=[result.pk])).content.decode()
    page = viewer.get(reverse("runs:result_detail", args=[result.pk])).content.decode()

    assert "<img" not in json.loads(raw).__repr__() and "<img" not in page
    (heat,) = heatmaps(json.loads(raw))
    assert heat["x"][0] == "&lt;img/src=x/onerror=alert(1)&gt;"
    assert ("x", heat["x"][0], "GPU 3") in marks(json.loads(raw)), "a mark finds the escaped column"


def test_it_caps_a_large_matrix_and_says_what_it_left_out(viewer, run) -> None:
    result = record_topology(run, H100_TOPO)
    Row.objects.bulk_create(
        Row(result=result, name="gpu_nic_link", value=6.0, text="SYS", gpu=g, labels={"nic": f"nic{n}"})
        for g in range(100)
        for n in range(70)
    )
    Row.objects.create(result=result, name="gpu_nic_link", value=6.0, gpu=99, labels={"nic": "nic69"}, ok=False)

    figure = figure_of(viewer, result)

    (heat,) = heatmaps(figure)
    assert len(heat["y"]) == 64 and len(heat["x"]) == 64
    assert heat["y"][:3] == ["GPU 0", "GPU 1", "GPU 2"] and heat["y"][-1] == "GPU 63", "natural order"
    assert "text" not in heat, "no cell text on a large matrix"
    note = figure["layout"]["annotations"][0]["text"]
    assert "showing the first 64 of 100 rows and 64 of 78 columns" in note
    assert "1 out-of-spec cells not shown" in note
    assert len(json.dumps(figure)) < 1_500_000
    assert figure["layout"]["height"] < 2000


def test_it_reads_a_bounded_number_of_measurements_in_one_query(run, django_assert_num_queries) -> None:
    result = CheckResult.objects.select_related("node").get(pk=record_topology(run, far_nic()).pk)

    with django_assert_num_queries(1):
        data = matrix_result(result=result)
    assert not data.truncated and len(data.matrices[0].cells) == 64
    with django_assert_num_queries(1):
        cut = matrix_result(result=result, max_read=10)
    assert cut.truncated and len(cut.matrices[0].cells) < 10


def test_a_kind_without_a_chart_has_no_figure(viewer, run) -> None:
    result = CheckResult.objects.get(run=run, node__hostname="n03", item_key="gpu-inventory")
    assert viewer.get(reverse("charts:result_figure", args=[result.pk])).status_code == 404
    page = viewer.get(reverse("runs:result_detail", args=[result.pk])).content.decode()
    assert 'id="result-chart"' not in page


def test_it_needs_a_viewer(client, make_user, run) -> None:
    result = record_topology(run, H100_TOPO)
    url = reverse("charts:result_figure", args=[result.pk])
    assert client.get(url).status_code == 302
    client.force_login(make_user("nobody"))
    assert client.get(url).status_code == 403


# --- the builder and the declaration, without a database ---------------------------------------------------


def row(name: str, value: float | None, **fields: Any) -> dict[str, Any]:
    base = {"name": name, "gpu": None, "value": value, "text": "", "unit": "", "threshold": "", "ok": None}
    return {**base, "labels": {}, **fields}


def test_it_shows_a_missing_value_as_an_empty_cell_with_its_reason() -> None:
    chart = MatrixChart("m", ("h2d_gbps", "d2h_gbps"), "gpu", column_titles=("in", "out"))
    rows = {
        "h2d_gbps": [row("h2d_gbps", None, gpu=0, labels={"missing": "nvbandwidth printed N/A"})],
        "d2h_gbps": [row("d2h_gbps", 13.1, gpu=0, unit="GB/s"), row("d2h_gbps", 13.0, gpu=1, unit="GB/s")],
    }
    data = build_matrix(chart, rows)
    assert (data.rows, data.cols, data.unit) == (["GPU 0", "GPU 1"], ["in", "out"], "GB/s")
    assert data.cells[("GPU 0", "in")].value is None
    assert data.cells[("GPU 0", "in")].extra == [("missing", "nvbandwidth printed N/A")]
    assert ("GPU 1", "in") not in data.cells


def test_two_values_for_one_cell_show_the_out_of_spec_one() -> None:
    chart = MatrixChart("m", ("d2d_gbps",), "src", "dst")
    rows = {
        "d2d_gbps": [
            row("d2d_gbps", 370.0, labels={"src": "0", "dst": "1", "test": "read"}, ok=True),
            row("d2d_gbps", 12.0, labels={"src": "0", "dst": "1", "test": "write"}, ok=False, threshold=">= 335"),
            row("d2d_gbps", 9.0, labels={"src": "0"}),  # no column: not a cell
        ]
    }
    data = build_matrix(chart, rows, max_side=1)
    assert data.cells[("0", "1")].value == 12.0 and data.cells[("0", "1")].marked
    assert data.cells[("0", "1")].why == ["out of spec (>= 335)"]


def test_it_outlines_a_bounded_number_of_cells() -> None:
    chart = MatrixChart("m", ("d2d_gbps",), "src", "dst", unit="GB/s")
    cells = [
        row("d2d_gbps", 1.0, labels={"src": str(s), "dst": str(d)}, ok=False) for s in range(30) for d in range(30)
    ]
    data = build_matrix(chart, {"d2d_gbps": cells})
    figure = matrix_figure(MatrixResult(title="t", matrices=[data, data]))
    assert len(figure["layout"]["shapes"]) == MAX_OUTLINES
    assert "outlined in red: out of spec (900)" in figure["layout"]["annotations"][1]["text"]
    assert "out of spec" in figure["data"][1]["hovertext"][29][29], "every out-of-spec cell says so in its hover"


def test_a_margin_is_past_a_floor_or_under_a_ceiling() -> None:
    assert margin_pct(Cell(11.0, threshold=">= 10")) == pytest.approx(10.0)
    assert margin_pct(Cell(9.0, threshold=">= 10")) == pytest.approx(-10.0)
    assert margin_pct(Cell(4.0, threshold="<= 5")) == pytest.approx(20.0), "a latency under its ceiling"
    assert margin_pct(Cell(6.0, threshold="<= 5")) == pytest.approx(-20.0)
    assert margin_pct(Cell(-9.0, threshold=">= -10")) == pytest.approx(10.0), "a negative bound keeps the side"
    for no in (Cell(3.0, threshold=">= 0"), Cell(3.0, threshold="PXB"), Cell(None, threshold=">= 1"), Cell(3.0)):
        assert margin_pct(no) is None


def test_a_matrix_without_thresholds_keeps_its_scale_from_zero() -> None:
    chart = MatrixChart("m", ("d2d_gbps",), "src", "dst", unit="GB/s")
    rows = [
        row("d2d_gbps", 5.0, labels={"src": "0", "dst": "1"}),
        row("d2d_gbps", 9.0, labels={"src": "1", "dst": "0"}),
    ]
    heat = matrix_figure(MatrixResult(title="t", matrices=[build_matrix(chart, {"d2d_gbps": rows})]))["data"][0]
    assert (heat["zmin"], heat["zmax"], heat["z"][0][1]) == (0.0, 9.0, 5.0), "the value from 0"
    assert heat["colorscale"][0] == [0.0, "rgb(247,251,255)"] and heat["colorbar"]["title"]["text"] == "GB/s"


def test_an_out_of_spec_cell_is_red_whatever_its_margin_and_far_cells_are_clipped() -> None:
    chart = MatrixChart("m", ("d2d_gbps",), "src", "dst", unit="GB/s")
    rows = [
        row("d2d_gbps", 10.0, labels={"src": "0", "dst": "1"}, threshold="> 10", ok=False),  # met exactly
        row("d2d_gbps", 900.0, labels={"src": "1", "dst": "0"}, threshold="> 10", ok=True),
    ]
    heat = matrix_figure(MatrixResult(title="t", matrices=[build_matrix(chart, {"d2d_gbps": rows})]))["data"][0]
    assert (heat["zmin"], heat["zmax"]) == (-100, 100) and heat["z"][1][0] == 100, "clipped at +100%"
    assert heat["colorbar"]["ticktext"][-1] == "\u2265 +100%"
    assert -1 < heat["z"][0][1] < 0, "on the red side, near the threshold"


def test_a_declaration_is_checked_when_it_is_made() -> None:
    with pytest.raises(ValueError, match="colour_by"):
        MatrixChart("m", ("x",), "gpu", colour_by="heat")
    with pytest.raises(ValueError, match="names its ranks"):
        MatrixChart("m", ("x",), "gpu", colour_by="rank")
    with pytest.raises(ValueError, match="several measurements"):
        MatrixChart("m", ("x", "y"), "gpu", "nic")
    with pytest.raises(ValueError, match="one column title per measurement"):
        MatrixChart("m", ("x", "y"), "gpu", column_titles=("a",))
    with pytest.raises(ValueError, match="go together"):
        Presentation(chart="matrix")
    with pytest.raises(ValueError, match="go together"):
        Presentation(matrices=(MatrixChart("m", ("x",), "gpu"),))

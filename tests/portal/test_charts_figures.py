"""Figure builders (pure): the traces, axes and threshold lines each chart promises."""

from __future__ import annotations

import json

from portal.charts import figures
from portal.charts.selectors import (
    BurnInData,
    Curve,
    Distribution,
    DlcData,
    FsData,
    NcclData,
    Point,
    RackCell,
    RackData,
    ThrottleSpan,
    Trace,
    metric_direction,
    robust_z,
)

SIZES = [float(2**e) for e in range(20, 31)]


def hlines(figure: dict) -> list[float]:
    return [s["y0"] for s in figure["layout"].get("shapes", []) if s.get("type") == "line" and s["y0"] == s["y1"]]


def test_it_draws_nccl_busbw_per_node_on_a_log_axis_with_the_floor() -> None:
    data = NcclData(
        title="nccl",
        curves=[
            Curve("n01", SIZES, [10.0 * i for i in range(11)], threshold=460.0),
            Curve("n02", SIZES, [9.0 * i for i in range(11)], threshold=460.0),
        ],
    )

    figure = figures.nccl_figure(data)

    assert [t["name"] for t in figure["data"]] == ["n01", "n02"]
    assert figure["layout"]["xaxis"]["type"] == "log"
    assert "1 MiB" in figure["layout"]["xaxis"]["ticktext"] and "1 GiB" in figure["layout"]["xaxis"]["ticktext"]
    assert hlines(figure) == [460.0]
    assert "template" not in figure["layout"]
    assert len(json.dumps(figure)) < 10_000


def test_it_names_sizes_in_binary_units() -> None:
    assert figures.binary_size(1024) == "1 KiB"
    assert figures.binary_size(1048576) == "1 MiB"
    assert figures.binary_size(3 * 2**30) == "3 GiB"
    assert figures.binary_size(8) == "8 B"


def test_it_leaves_the_nccl_floor_out_when_the_plan_has_none() -> None:
    figure = figures.nccl_figure(NcclData("x", [Curve("n01", SIZES[:2], [1.0, 2.0], threshold=None)]))
    assert hlines(figure) == []


def burn_in(throttles: list[ThrottleSpan]) -> BurnInData:
    x = [0.0, 1.0, 2.0, 3.0]
    panels = [
        (name, label, unit, [Trace(gpu, x, [float(gpu + v) for v in range(4)], 4) for gpu in range(8)])
        for name, label, unit in (("temp_gpu", "temp", "C"), ("power_w", "power", "W"), ("sm_clock_mhz", "clk", "MHz"))
    ]
    return BurnInData("burn", panels, throttles, slowdown_c=87.0, max_points=1500, spans_panel="sm_clock_mhz")


def test_it_stacks_burn_in_panels_with_one_trace_per_gpu_and_the_slowdown_line() -> None:
    figure = figures.burn_in_figure(burn_in([]))

    lines = [t for t in figure["data"] if t["mode"] == "lines"]
    assert len(lines) == 24
    assert {t["yaxis"] for t in lines} == {"y", "y2", "y3"}
    # GPU 3 has one colour on every panel, and one legend entry.
    gpu3 = [t for t in lines if t["name"] == "GPU 3"]
    assert len({t["line"]["color"] for t in gpu3}) == 1
    assert sum(t["showlegend"] for t in gpu3) == 1
    slowdown = [s for s in figure["layout"]["shapes"] if s["type"] == "line"]
    assert [(s["y0"], s["yref"]) for s in slowdown] == [(87.0, "y")]  # on the temperature panel
    # The panels share the bottom panel's time axis (zooming one zooms all).
    layout = figure["layout"]
    assert (layout["xaxis"]["matches"], layout["xaxis2"]["matches"], layout["xaxis3"].get("matches")) == (
        "x3",
        "x3",
        None,
    )


def test_it_marks_throttle_events_across_the_panels() -> None:
    figure = figures.burn_in_figure(burn_in([ThrottleSpan(3, "hw_slowdown", 1.0, 2.0), ThrottleSpan(5, "x", 3.0, 3.0)]))

    spans = [s for s in figure["layout"]["shapes"] if s["type"] == "rect"]
    assert [(s["x0"], s["yref"]) for s in spans] == [(1.0, "paper"), (3.0, "paper")]
    assert spans[1]["x1"] > spans[1]["x0"]  # a one-sample event still has a width
    markers = [t for t in figure["data"] if t["name"] == "throttle"]
    assert markers[0]["x"] == [1.0, 3.0]
    assert "GPU 3: hw_slowdown" in markers[0]["text"][0]


def test_it_draws_dlc_idle_and_load_per_gpu_with_threshold_and_sibling_deltas() -> None:
    data = DlcData(
        title="dlc",
        gpus=[0, 1, 2],
        idle=[30.0, 31.0, 32.0],
        load=[60.0, 61.0, 75.0],
        slowdown=[87.0, 87.0, 87.0],
        margin_c=10.0,
        sibling_delta=[-0.5, 0.5, 14.5],
        max_sibling_delta_c=8.0,
    )

    figure = figures.dlc_figure(data)

    names = [t.get("name") for t in figure["data"]]
    assert names[:3] == ["idle", "load", "slowdown threshold"]
    assert figure["data"][2]["y"] == [87.0, 87.0, 87.0]
    assert sorted(hlines(figure)) == [8.0, 77.0]  # sibling limit, slowdown - margin
    delta = figure["data"][3]
    assert delta["marker"]["color"][2] == figures.THRESHOLD_COLOUR  # the hot GPU stands out
    assert delta["marker"]["color"][0] != figures.THRESHOLD_COLOUR


def test_it_draws_filesystem_bars_per_node_with_floors_and_the_aggregate() -> None:
    data = FsData(
        title="fs",
        nodes=["n01", "n02"],
        write=[5.0, 1.5],
        read=[6.0, 6.0],
        concurrent_write=[4.0, 4.0],
        concurrent_read=[None, None],
        aggregate_write=8.0,
        aggregate_read=None,
        min_write=2.0,
        min_read=4.0,
        min_aggregate_write=10.0,
        min_aggregate_read=None,
        has_aggregate=True,
    )

    figure = figures.fs_figure(data)

    bars = {t["name"]: t for t in figure["data"]}
    assert set(bars) == {"write (alone)", "read (alone)", "write (all nodes at once)", "aggregate"}
    assert bars["write (alone)"]["x"] == ["n01", "n02"]
    assert bars["aggregate"]["y"] == [8.0, None]
    assert sorted(hlines(figure)) == [2.0, 4.0, 10.0]


def test_it_labels_distribution_outliers_with_their_node() -> None:
    values = [470.0, 468.0, 471.0, 469.0, 472.0, 380.0]
    zs = robust_z(values)
    points = [Point(f"n0{i}", v, z=z, median=469.5) for i, (v, z) in enumerate(zip(values, zs, strict=True))]
    data = Distribution("d", "nccl", "busbw_peak", "", "GB/s", "node", "", points, threshold=">= 460")

    figure = figures.distribution_figure(data)

    box, normal, odd = figure["data"]
    assert box["type"] == "box"
    assert len(normal["y"]) == 5
    assert odd["text"] == ["n05"] and odd["y"] == [380.0]
    assert "text" in odd["mode"]
    assert hlines(figure) == [460.0]


def test_it_scores_robustly_and_ignores_a_flat_fleet() -> None:
    zs = robust_z([10.0, 10.0, 11.0, 9.0, 30.0])
    assert zs[4] is not None and zs[4] > 3.5
    assert all(abs(z) < 3.5 for z in zs[:4])
    assert robust_z([5.0, 5.0, 5.0]) == [None, None, None]
    assert robust_z([1.0, 2.0]) == [None, None]


def test_it_folds_per_gpu_metrics_as_each_kind_declares() -> None:
    def fold(kind: str, metric: str) -> tuple[str, str]:
        declared = metric_direction(kind=kind, metric=metric)
        return declared.better, declared.gpu_agg

    assert fold("burn_in", "gflops") == ("higher", "min")
    assert fold("nccl_allreduce", "busbw_peak") == ("higher", "min")
    assert fold("dlc_temperature", "temp_gpu_steady") == ("lower", "max")
    assert fold("ecc_health", "ecc_volatile_uncorrected") == ("lower", "sum")
    # Names that read like "worse when higher" but whose kinds say otherwise.
    assert fold("gpu_power_limit", "power_limit_w") == ("higher", "min")
    assert fold("topology", "gpu_nearest_nic_link") == ("lower", "max")


def rack(metric: str = "status") -> RackData:
    cells = [
        RackCell("n01", "R1", "1", "pass", 1.0, "/results/1/"),
        RackCell("n02", "R1", "2", "fail", 2.0, "/results/2/"),
        RackCell("n03", "R2", "1", "error", None, "/results/3/"),
        RackCell("n04", "unracked", "", "pass", 4.0, "/results/4/"),
        RackCell("n05", "unracked", "", "warn", 5.0, "/results/5/"),
    ]
    return RackData("rack", metric, "GB/s", cells)


def test_it_places_nodes_by_rack_and_position_with_unracked_last() -> None:
    racks, rows, placed = figures.rack_layout(rack().cells)

    assert racks == ["R1", "R2", "unracked"]
    assert placed["n02"] == ("R1", "2")
    assert placed["n04"] == ("unracked", "slot 1") and placed["n05"] == ("unracked", "slot 2")
    assert len(set(placed.values())) == 5  # no node hides another


def test_it_colours_the_rack_heatmap_by_status_with_badge_colours_and_click_urls() -> None:
    figure = figures.rack_figure(rack())

    heat = figure["data"][0]
    racks, rows = heat["x"], heat["y"]
    cell = {
        heat["text"][i][j]: (heat["z"][i][j], heat["customdata"][i][j])
        for i in range(len(rows))
        for j in range(len(racks))
    }
    statuses = list(figures.STATUS_ORDER)
    assert cell["n02"] == (statuses.index("fail"), "/results/2/")
    assert cell["n03"][0] == statuses.index("error")
    fail = statuses.index("fail")
    assert heat["colorscale"][2 * fail][1] == heat["colorscale"][2 * fail + 1][1] == figures.BADGE_HEX["red"]
    assert heat["colorscale"][2 * statuses.index("pass")][1] == figures.BADGE_HEX["green"]
    assert heat["colorbar"]["ticktext"] == statuses


def test_it_colours_the_rack_heatmap_by_a_metric() -> None:
    figure = figures.rack_figure(rack("fs:write_bw_sum"))

    heat = figure["data"][0]
    values = sorted(v for row in heat["z"] for v in row if v is not None)
    assert values == [1.0, 2.0, 4.0, 5.0]
    assert "n03: no value" in json.dumps(heat["hovertext"])

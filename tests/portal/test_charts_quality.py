"""Charts at dashboard quality, on the pure figure builders: each series against its
own threshold and only where it applies, time axes without sub-second noise, hovers naming node, GPU
and value, equal values said in words, and an honest rack colour scale."""

from __future__ import annotations

import datetime as dt
import json
import math

import plotly.graph_objects as go

from portal.charts import figures
from portal.charts.selectors import Curve, Distribution, NcclData, Point, RackCell, RackData
from portal.history.figures import run_counts_figure, trend_figure
from portal.history.selectors import KEY_METRICS, Trend
from portal.history.selectors.node import TrendPoint

GiB = float(2**30)
SWEEP = [float(2**e) for e in range(3, 34)]  # 8 B .. 8 GiB by x2, the checks' default sweep
BUSBW = next(m for m in KEY_METRICS if m.key == "busbw")
AT = dt.datetime(2026, 12, 3, 12, 47, 36, 988_500, tzinfo=dt.UTC)


def floor_shapes(figure: dict) -> list[dict]:
    return [s for s in figure["layout"].get("shapes", []) if s.get("type") == "line" and s["y0"] == s["y1"]]


def test_the_nccl_floor_spans_only_the_sizes_the_check_judged() -> None:
    curve = Curve("n01", SWEEP, [min(480.0, x / 1e7) for x in SWEEP], threshold=460.0, threshold_from=GiB)

    figure = figures.nccl_figure(NcclData("nccl", [curve]))

    (floor,) = floor_shapes(figure)
    assert floor["y0"] == 460.0 and floor["xref"] == "x"
    # From 1 GiB to the largest size, 8 GiB: a shape on a log axis takes data values...
    assert (floor["x0"], floor["x1"]) == (GiB, 8 * GiB)
    (label,) = figure["layout"]["annotations"]
    assert "floor 460 GB/s" in label["text"] and "1 GiB" in label["text"]
    assert math.isclose(label["x"], math.log10(GiB))  # ...an annotation their log10 (the browser test checks both)
    go.Figure(figure)  # plotly accepts it


def test_each_nccl_curve_gets_its_own_floor_and_an_unjudged_one_none() -> None:
    one = Curve("n01", SWEEP, [400.0] * len(SWEEP), threshold=460.0, threshold_from=GiB)
    many = Curve("n[01-02]", SWEEP, [374.0] * len(SWEEP), threshold=300.0, threshold_from=GiB)
    unjudged = Curve("n03", SWEEP, [1.0] * len(SWEEP), threshold=None)
    short = Curve("n04", SWEEP[:10], [1.0] * 10, threshold=200.0, threshold_from=GiB)  # never reached 1 GiB

    figure = figures.nccl_figure(NcclData("nccl", [one, many, unjudged, short]))

    assert sorted(s["y0"] for s in floor_shapes(figure)) == [300.0, 460.0]


def point(run: int, value: float, threshold: str, ok: bool | None = True, at: dt.datetime = AT) -> TrendPoint:
    return TrendPoint(run, run * 10, at, value, ok, "pass" if ok is not False else "fail", threshold)


def test_the_node_history_draws_each_line_against_its_own_threshold() -> None:
    trend = Trend(metric=BUSBW)
    trend.lines["nccl-allreduce"] = [point(1, 470.0, ">= 460")]
    trend.lines["nccl-allreduce-multi (group n[01-02])"] = [point(1, 374.0, ">= 300")]

    figure = trend_figure(trend=trend, result_url=lambda pk: f"/results/{pk}/", node="n01")

    assert sorted(s["y0"] for s in floor_shapes(figure)) == [300.0, 460.0]
    said = {a["y"]: a["text"] for a in figure["layout"]["annotations"]}
    assert "nccl-allreduce-multi" in said[300.0] and "300" in said[300.0]
    assert "multi" not in said[460.0]
    # 374 GB/s passed its own 300 floor: it is not marked out of spec.
    assert "out of spec" not in [t["name"] for t in figure["data"]]
    colours = {t["name"]: t["line"]["color"] for t in figure["data"]}
    by_y = {s["y0"]: s["line"]["color"] for s in floor_shapes(figure)}
    assert by_y[300.0] == colours["nccl-allreduce-multi (group n[01-02])"]
    go.Figure(figure)


def test_one_shared_threshold_is_one_red_line() -> None:
    trend = Trend(metric=BUSBW)
    trend.lines["nccl-allreduce"] = [point(1, 470.0, ">= 460"), point(2, 380.0, ">= 460", ok=False)]

    figure = trend_figure(trend=trend, result_url=str)

    (floor,) = floor_shapes(figure)
    assert floor["y0"] == 460.0 and floor["line"]["color"] == "#cf222e"
    assert figure["layout"]["annotations"][0]["text"] == "threshold ≥ 460 GB/s"
    assert [t["name"] for t in figure["data"]] == ["nccl-allreduce", "out of spec"]


def _no_sub_second(axis: dict) -> None:
    assert axis["type"] == "date"
    formats = [stop["value"] for stop in axis["tickformatstops"]]
    assert formats and not any(code in f for f in formats for code in ("%S", "%L", "%f", "%Q"))
    # Every tick spacing, down to a millisecond, has a format: plotly's own never shows.
    assert axis["tickformatstops"][0]["dtickrange"][0] is None


def test_a_one_run_history_chart_has_minute_ticks_over_a_readable_span() -> None:
    trend = Trend(metric=BUSBW)
    trend.lines["nccl-allreduce"] = [point(1, 470.0, ">= 460")]

    figure = trend_figure(trend=trend, result_url=str)

    axis = figure["layout"]["xaxis"]
    _no_sub_second(axis)
    low, high = (dt.datetime.fromisoformat(v) for v in axis["range"])
    assert high - low >= dt.timedelta(hours=2)
    assert figure["data"][0]["x"] == ["2026-12-03 12:47:36"]  # UTC, to the second
    go.Figure(figure)


def test_a_long_history_keeps_plotlys_range_with_the_same_tick_formats() -> None:
    trend = Trend(metric=BUSBW)
    trend.lines["nccl-allreduce"] = [point(i, 470.0, ">= 460", at=AT + dt.timedelta(days=i)) for i in range(30)]

    axis = trend_figure(trend=trend, result_url=str)["layout"]["xaxis"]

    _no_sub_second(axis)
    assert "range" not in axis


def test_the_run_counts_chart_of_one_run_has_sensible_ticks() -> None:
    rows = [{"id": 7, "at": AT, "n_pass": 3, "n_warn": 0, "n_fail": 1, "n_error": 0}]

    figure = run_counts_figure(rows=rows, run_url=lambda pk: f"/runs/{pk}/")

    _no_sub_second(figure["layout"]["xaxis"])
    assert "range" in figure["layout"]["xaxis"]


def test_history_hovers_name_the_node_the_line_and_the_value_with_its_unit() -> None:
    metric = next(m for m in KEY_METRICS if m.key == "gflops")
    trend = Trend(metric=metric)
    trend.lines["GPU 3"] = [point(1, 109_400.3, ">= 100000")]

    figure = trend_figure(trend=trend, result_url=str, node="n07")

    line = figure["data"][0]
    assert line["hovertemplate"].startswith("n07 · GPU 3")
    assert "109,400 Gflop/s" in line["customdata"][0]
    assert "%{customdata[3]}" in line["hovertemplate"]


def distribution(values: list[float], *, gpus: list[int | None] | None = None, unit: str = "C") -> Distribution:
    gpus = gpus or [None] * len(values)
    points = [Point(f"n{i + 1:02d}", v, g) for i, (v, g) in enumerate(zip(values, gpus, strict=True))]
    return Distribution("d", "burn-in", "temp_max", "", unit, "node", "max", points)


def test_distribution_points_hover_their_node_gpu_and_value() -> None:
    figure = figures.distribution_figure(distribution([61.25, 62.0, 63.5], gpus=[5, 0, 7]))

    strip = figure["data"][1]
    assert strip["customdata"][0][:2] == ["n01 (worst: GPU 5)", "61.2 °C"]
    assert "%{customdata[0]}" in strip["hovertemplate"] and "%{customdata[1]}" in strip["hovertemplate"]


def test_equal_values_show_every_point_and_say_they_are_equal() -> None:
    figure = figures.distribution_figure(distribution([40.0] * 4))

    strip = figure["data"][1]
    assert strip["y"] == [40.0] * 4 and strip["mode"] == "markers"
    notes = [a["text"] for a in figure["layout"].get("annotations", [])]
    assert "all 4 values are equal: 40 °C" in notes


def test_differing_values_get_no_equal_note() -> None:
    figure = figures.distribution_figure(distribution([40.0, 41.0, 40.0]))

    assert not [a for a in figure["layout"].get("annotations", []) if "equal" in a["text"]]


def constant_rack(values: list[float | None]) -> RackData:
    cells = [RackCell(f"n0{i}", "R1", str(i), "pass", v, f"/r/{i}/") for i, v in enumerate(values, start=1)]
    return RackData("Racks by dlc:temp_gpu_steady", "dlc:temp_gpu_steady", "C", cells)


def test_a_constant_rack_field_is_one_colour_and_says_so() -> None:
    figure = figures.rack_figure(constant_rack([40.0, 40.0, 40.0, 40.0, None]), higher_is_better=False)

    heat = figure["data"][0]
    assert heat["showscale"] is False
    assert len({colour for _, colour in heat["colorscale"]}) == 1
    assert heat["zmin"] < 40.0 < heat["zmax"]  # the one colour, not the end of a scale
    assert "all 4 nodes: 40 °C" in figure["layout"]["title"]["text"]
    cells = [t for row in heat["text"] for t in row if t]
    assert "n01<br>40 °C" in cells and "n05<br>no value" in cells
    assert heat["texttemplate"] == "%{text}"


def test_a_varying_rack_field_is_scaled_from_its_lowest_to_its_highest_value() -> None:
    figure = figures.rack_figure(constant_rack([38.0, 40.0, 45.5]), higher_is_better=False)

    heat = figure["data"][0]
    assert (heat["zmin"], heat["zmax"]) == (38.0, 45.5)
    assert heat["colorbar"]["title"]["text"] == "°C"
    assert "all" not in figure["layout"]["title"]["text"]
    assert "n03<br>45.5 °C" in json.dumps(heat["text"], ensure_ascii=False)


def test_burn_in_and_dlc_hovers_name_the_node_and_the_gpu() -> None:
    from portal.charts.selectors import BurnInData, DlcData, Trace

    panel = [Trace(3, [0.0, 1.0], [61.0, 62.0], 2)]
    burn = figures.burn_in_figure(BurnInData("b", [("temp_gpu", "temp", "C", panel)], [], None, 1500, node="n07"))
    assert burn["data"][0]["hovertemplate"].startswith("n07 · GPU 3: ") and "°C" in burn["data"][0]["hovertemplate"]

    dlc = figures.dlc_figure(
        DlcData("d", [0, 1], [30.0, 31.0], [60.0, 61.0], [87.0, 87.0], 5.0, [-0.5, 0.5], 3.0, "n07")
    )
    bars = [t for t in dlc["data"] if t["type"] == "bar"]
    assert bars and all(t["hovertemplate"].startswith("n07 · %{x}") and "°C" in t["hovertemplate"] for t in bars)


def test_the_fleet_pickers_offer_what_the_checks_declare_judged() -> None:
    from checks import presentation_of

    assert "busbw_peak" in presentation_of("nccl_allreduce").fleet_metrics()
    assert {"gflops", "temp_max"} <= presentation_of("burn_in").fleet_metrics()
    assert "ibstat_exit_code" not in presentation_of("ib_ports").fleet_metrics()
    for kind in ("gpu_inventory", "ecc_health"):  # the probe records a gpu_present flag per GPU
        assert "gpu_present" not in presentation_of(kind).fleet_metrics()
    assert presentation_of("no_such_kind").fleet_metrics() == frozenset()


def test_a_long_history_title_wraps_instead_of_running_past_the_chart() -> None:
    """The topology metric's title (its rank legend inline) ran past both edges of its chart at 1280 px."""
    metric = next(m for m in KEY_METRICS if m.key == "nearest_nic_link")
    short = trend_figure(trend=Trend(metric=BUSBW), result_url=str)
    figure = trend_figure(trend=Trend(metric=metric), result_url=str)
    lines = figure["layout"]["title"]["text"].split("<br>")
    assert len(lines) > 1 and all(len(line) <= 60 for line in lines)
    assert " ".join(lines) == f"{metric.label} (rank, lower is better)"
    assert figure["layout"]["margin"]["t"] > short["layout"]["margin"]["t"]  # room for the second line

"""Plotly figures of the history pages, built on the server and drawn by the locally served plotly.js."""

from __future__ import annotations

import datetime as dt
import json
import textwrap
from collections.abc import Callable
from typing import Any

import plotly.graph_objects as go

from portal import formatting
from portal.charts.figures.common import GPU_COLOURS, time_axis, utc_text
from portal.history.selectors import Trend, threshold_value
from portal.runs.models import STATUS_COLOURS, Status

_COLOUR = {"green": "#1a7f37", "red": "#cf222e", "orange": "#bc4c00", "purple": "#8250df", "grey": "#6e7781"}
# No plotly template: a named template is inlined into every figure's JSON (~10 KB each).
# automargin: tick labels and titles get the room they need (two-line date ticks, "109,400" Gflop/s).
_AXIS = {"gridcolor": "#eaeef2", "zerolinecolor": "#d0d7de", "linecolor": "#d0d7de", "automargin": True}
_LAYOUT: dict[str, Any] = {
    "margin": {"l": 60, "r": 20, "t": 36, "b": 30},
    "height": 340,
    "hovermode": "closest",
    # Below the plot, across its width: on the right, a long line name ("nccl-allreduce-multi (group
    # hgx-h100-r01-n[01-16])") squeezed the plot to a third of a half-width chart.
    "legend": {"orientation": "h", "x": 0, "xanchor": "left", "y": -0.2, "yanchor": "top", "font": {"size": 11}},
    "plot_bgcolor": "#fff",
    "paper_bgcolor": "#fff",
}


# A title line's characters: a half-width chart at a 1280 px window is ~560 px, ~70 characters of
# 14 px text; 60 leaves room for plotly's mode bar. Each further line takes 18 px of top margin.
TITLE_CHARS, TITLE_LINE_PX = 60, 18

# Traces are built here from our own well-typed values, so plotly's per-property validation (about
# 85% of the build time: 40 traces took 200 ms) is skipped; the tests validate every figure kind.
_FAST = {"_validate": False}


def _plain(fig: go.Figure) -> dict[str, Any]:
    """A JSON-safe dict for json_script (plotly's encoder handles datetimes and numpy values)."""
    return json.loads(fig.to_json(validate=False))


def _when(at: dt.datetime) -> str:
    return utc_text(at)  # UTC without an offset: plotly's date axis ignores time zones


def _bounds(trend: Trend) -> dict[float, list[str]]:
    """Each line's own threshold (its latest point's, as recorded on its measurements) -> the lines
    judged against it: a multi-node busbw is drawn against its 300 GB/s floor, not the node's 460."""
    bounds: dict[float, list[str]] = {}
    for line, points in trend.lines.items():
        recorded = next((p.threshold for p in reversed(points) if p.threshold), "")
        bound = threshold_value(threshold=recorded, metric=trend.metric) if recorded else None
        if bound is not None:
            bounds.setdefault(bound, []).append(line)
    return bounds


def _threshold_marks(trend: Trend, colours: dict[str, str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A dashed line per distinct threshold across the x range (paper coordinates). One threshold
    for every line: red, "threshold >= 460". Several: each in its line's colour (red when shared)
    and named after the lines it judges."""
    bounds = _bounds(trend)
    shapes, annotations = [], []
    for i, (bound, lines) in enumerate(sorted(bounds.items())):
        colour = colours[lines[0]] if len(bounds) > 1 and len(lines) == 1 else _COLOUR["red"]
        said = formatting.threshold(_recorded(trend, lines[0]), trend.metric.unit)
        text = f"threshold {said}" if len(bounds) == 1 else f"{', '.join(lines)}: {said}"
        shapes.append(
            {"type": "line", "xref": "paper", "x0": 0, "x1": 1, "yref": "y", "y0": bound, "y1": bound,
             "line": {"dash": "dash", "color": colour, "width": 1.5}}
        )  # fmt: skip
        right = i % 2 == 1  # alternate sides so two close thresholds' labels do not overlap
        annotations.append(
            {"xref": "paper", "x": 1 if right else 0, "xanchor": "right" if right else "left", "yref": "y",
             "y": bound, "yanchor": "bottom", "text": text, "showarrow": False, "font": {"size": 11, "color": colour}}
        )  # fmt: skip
    return shapes, annotations


def _recorded(trend: Trend, line: str) -> str:
    return next((p.threshold for p in reversed(trend.lines[line]) if p.threshold), "")


def trend_figure(*, trend: Trend, result_url: Callable[[int], str], node: str = "") -> dict[str, Any]:
    """One key metric of a node over runs: a line per GPU (or check), points out of spec marked with a
    red cross, each line's own threshold dashed. Clicking a point opens that result; hovering names
    the node, the line (GPU or check), the run and the value.

    Built as the JSON-safe dict plotly.js reads, not through go.Figure: a node page draws eight of
    these, and plotly's objects and their JSON round trip were 260 ms of its 470 ms at 30 runs (the
    tests check that go.Figure accepts every figure)."""
    metric = trend.metric
    traces: list[dict[str, Any]] = []
    bad_x, bad_y, bad_data = [], [], []
    colours = {line: GPU_COLOURS[i % len(GPU_COLOURS)] for i, line in enumerate(trend.lines)}
    who = f"{node} · " if node else ""
    for line, points in trend.lines.items():
        data = [[result_url(p.result_id), f"run #{p.run_id}", p.status, formatting.quantity(p.value, metric.unit)]
                for p in points]  # fmt: skip
        x = [_when(p.at) for p in points]
        traces.append(
            {"type": "scatter", "x": x, "y": [p.value for p in points], "customdata": data, "name": line,
             "mode": "lines+markers", "line": {"color": colours[line]}, "marker": {"color": colours[line]},
             "hovertemplate": f"{who}{line}<br>%{{customdata[1]}} (%{{customdata[2]}}), %{{x|%Y-%m-%d %H:%M}} UTC"
             "<br>%{customdata[3]}<extra></extra>"}
        )  # fmt: skip
        for p, when, d in zip(points, x, data, strict=True):
            if p.ok is False:
                bad_x.append(when)
                bad_y.append(p.value)
                bad_data.append([*d, line])
    if bad_x:
        traces.append(
            {"type": "scatter", "x": bad_x, "y": bad_y, "customdata": bad_data, "name": "out of spec",
             "mode": "markers", "marker": {"symbol": "x", "size": 12, "color": _COLOUR["red"]},
             "hovertemplate": who + "%{customdata[4]}: out of spec<br>%{customdata[1]}<br>%{customdata[3]}"
             "<extra></extra>"}
        )  # fmt: skip
    shapes, annotations = _threshold_marks(trend, colours)
    better = "higher is better" if metric.better == "higher" else "lower is better"
    moments = [p.at for points in trend.lines.values() for p in points]
    title = textwrap.wrap(f"{metric.label} ({metric.unit}, {better})", TITLE_CHARS)
    layout = {
        **_LAYOUT,
        # Plotly never wraps a title: a long one ran past both edges of a half-width chart.
        "title": {"text": "<br>".join(title), "font": {"size": 14}},
        "margin": {**_LAYOUT["margin"], "t": _LAYOUT["margin"]["t"] + TITLE_LINE_PX * (len(title) - 1)},
        "yaxis": {
            **_AXIS,
            "title": {"text": metric.unit},
            "tickformat": ",~g",  # "109,398", not "109.398k"
            "rangemode": "tozero" if metric.gpu_agg == "sum" else "normal",
        },
        "xaxis": {**_AXIS, **time_axis(moments)},
        "shapes": shapes,
        "annotations": annotations,
    }
    return {"data": traces, "layout": layout}


def run_counts_figure(*, rows: list[dict[str, Any]], run_url: Callable[[int], str]) -> dict[str, Any]:
    """Pass/warn/fail/error counts per run over time (latest runs); clicking a point opens the run."""
    traces = []
    for status in (Status.PASS, Status.WARN, Status.FAIL, Status.ERROR):
        traces.append(
            go.Scatter(
                x=[_when(r["at"]) for r in rows],
                y=[r[f"n_{status}"] for r in rows],
                customdata=[[run_url(r["id"]), f"run #{r['id']}"] for r in rows],
                name=status,
                mode="lines+markers",
                line={"color": _COLOUR[STATUS_COLOURS[status]]},
                hovertemplate=f"%{{customdata[1]}}<br>%{{y}} {status}<extra></extra>",
                **_FAST,
            )
        )
    layout = go.Layout(
        **{**_LAYOUT, "height": 280},
        title={"text": "Checks by status per run (node × check)", "font": {"size": 14}},
        yaxis={**_AXIS, "title": "checks", "rangemode": "tozero"},
        xaxis={**_AXIS, **time_axis([r["at"] for r in rows])},
        **_FAST,
    )
    return _plain(go.Figure(data=traces, layout=layout, **_FAST))

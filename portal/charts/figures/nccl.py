"""NCCL busbw by message size."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import plotly.graph_objects as go

from portal.charts.figures.common import (
    _AXIS,
    MAX_LEGEND,
    THRESHOLD_COLOUR,
    _escape,
    _json,
    _new,
    binary_size,
    size_ticks,
)

if TYPE_CHECKING:
    from portal.charts.selectors import Curve, NcclData


def _floors(curves: list[Curve]) -> list[tuple[float, float, float]]:
    """(floor, first size, last size) of each distinct floor the curves were judged against: from the
    smallest size the judgement covers (else the curve's first) to the largest size measured."""
    spans: dict[tuple[float, float | None], list[float]] = {}
    for curve in curves:
        if curve.threshold is None:
            continue
        sizes = [x for x in curve.x if x and x > 0]
        spans.setdefault((curve.threshold, curve.threshold_from), []).extend(sizes)
    out = []
    for (floor, start), sizes in spans.items():
        first = start if start is not None else min(sizes, default=0.0)
        last = max(sizes, default=0.0)
        if first > 0 and last >= first:  # no judged size measured: nothing was judged, no line
            out.append((floor, first, last))
    return sorted(out)


def _floor_line(floor: float, first: float, last: float) -> tuple[dict[str, Any], dict[str, Any]]:
    """The dashed floor over the judged sizes, and its label above its left end. On a log axis a
    shape is placed by data values, an annotation by their log10 (plotly.js: shapes.json and
    annotations-autorange mocks, plotly.js PR #6194)."""
    line = {
        "type": "line", "xref": "x", "yref": "y", "x0": first, "x1": last, "y0": floor, "y1": floor,
        "line": {"color": THRESHOLD_COLOUR, "dash": "dash", "width": 2},
    }  # fmt: skip
    label = {
        "xref": "x", "yref": "y", "x": math.log10(first), "y": floor, "xanchor": "left", "yanchor": "bottom",
        "text": f"floor {floor:g} GB/s (judged from {binary_size(first)})", "showarrow": False,
        "font": {"color": THRESHOLD_COLOUR}, "bgcolor": "rgba(255,255,255,0.8)",
    }  # fmt: skip
    return line, label


def nccl_figure(data: NcclData) -> dict[str, Any]:
    """busbw against message size: one line per node / group / pair, log x axis in binary units,
    each curve's floor dashed over the sizes its check judged (sizes below plateau are not judged)."""
    fig = _new(
        title={"text": data.title},
        xaxis={**_AXIS, "type": "log", "title": {"text": "message size"}},
        yaxis={**_AXIS, "title": {"text": "busbw (GB/s)"}, "rangemode": "tozero"},
        showlegend=len(data.curves) <= MAX_LEGEND,
        height=460,
    )
    sizes: list[float] = []
    for curve in data.curves:
        sizes += [x for x in curve.x if x]
        fig.add_trace(
            go.Scatter(
                x=curve.x,
                y=curve.y,
                mode="lines+markers",
                name=curve.name,
                text=[binary_size(x) for x in curve.x],
                customdata=[curve.url] * len(curve.x) if curve.url else None,
                hovertemplate=f"{_escape(curve.name)}<br>%{{text}}: %{{y:.1f}} GB/s<extra></extra>",
            )
        )
    tickvals, ticktext = size_ticks(sizes)
    fig.update_xaxes(tickvals=tickvals, ticktext=ticktext)
    shapes, annotations = [], []
    for floor, first, last in _floors(data.curves):
        line, label = _floor_line(floor, first, last)
        shapes.append(line)
        annotations.append(label)
    fig.update_layout(shapes=shapes, annotations=annotations)
    return _json(fig)

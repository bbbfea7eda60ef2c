"""Fleet distribution: a box of the fleet, one point per node, robust outliers labelled."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import plotly.graph_objects as go

from portal.charts.figures.common import (
    _AXIS,
    _BASE_LAYOUT,
    THRESHOLD_COLOUR,
    _escape,
    _hline,
    _new,
    _trace,
    _with_traces,
)
from portal.charts.selectors.fleet import threshold_value
from portal.formatting import quantity, unit_shown
from portal.formatting import threshold as threshold_text

if TYPE_CHECKING:
    from portal.charts.selectors import Distribution, Point


def _jitter(i: int) -> float:
    """Deterministic strip jitter in [-0.18, 0.18] (golden-ratio sequence: same picture each load)."""
    return ((i * 0.6180339887) % 1.0 - 0.5) * 0.36


def _label(p: Point, per: str) -> str:
    if p.gpu is None:
        return p.node
    return f"{p.node} GPU {p.gpu}" if per == "gpu" else f"{p.node} (worst: GPU {p.gpu})"


def _hover(p: Point, unit: str, per: str) -> list[str]:
    """customdata of a point: its node (and GPU), its value with the unit, its robust z."""
    return [_escape(_label(p, per)), quantity(p.value, unit), "" if p.z is None else f"robust z {p.z:+.1f}"]


HOVER = "%{customdata[0]}<br>%{customdata[1]}<br>%{customdata[2]}<extra></extra>"


def _equal_note(fig: go.Figure, data: Distribution) -> None:
    """Every value the same: the box is a flat line, so the chart says so in words."""
    values = {p.value for p in data.points}
    if len(data.points) > 1 and len(values) == 1:
        said = f"all {len(data.points)} values are equal: {quantity(values.pop(), data.unit)}"
        fig.add_annotation(
            text=said, xref="paper", yref="paper", x=0.5, y=1.0, yanchor="bottom", showarrow=False,
            font={"size": 13, "color": "#57606a"},
        )  # fmt: skip


def distribution_figure(data: Distribution) -> dict[str, Any]:
    """A box of the fleet with one point per node (or GPU) beside it, each hovering its node, GPU and
    value; robust outliers in red and labelled with their node; equal values said in words."""
    unit = f" ({unit_shown(data.unit)})" if data.unit else ""
    fig = _new(
        title={"text": data.title},
        xaxis={**_AXIS, "showticklabels": False, "showgrid": False, "range": [-0.6, 1.2]},
        yaxis={**_AXIS, "title": {"text": f"{data.metric}{unit}"}},
        height=520,
        showlegend=True,
        margin={**_BASE_LAYOUT["margin"], "t": 80},
    )
    values = [p.value for p in data.points]
    traces = [
        _trace(
            go.Box,
            {"y": values, "x": [0.0] * len(values)},
            name="fleet",
            boxpoints=False,
            marker_color="#6e7781",
            width=0.5,
            hoverinfo="y",
        )
    ]
    normal = [(i, p) for i, p in enumerate(data.points) if not p.outlier]
    odd = [(i, p) for i, p in enumerate(data.points) if p.outlier]
    traces.append(
        _trace(
            go.Scatter,
            {
                "x": [0.75 + _jitter(i) for i, _ in normal],
                "y": [p.value for _, p in normal],
                "text": [_label(p, data.per) for _, p in normal],
                "customdata": [_hover(p, data.unit, data.per) for _, p in normal],
            },
            mode="markers",
            name="per node" if data.per == "node" else "per GPU",
            marker={"color": "#0969da", "size": 7, "opacity": 0.75},
            hovertemplate=HOVER,
        )
    )
    if odd:
        traces.append(
            _trace(
                go.Scatter,
                {
                    "x": [0.75 + _jitter(i) for i, _ in odd],
                    "y": [p.value for _, p in odd],
                    "text": [p.node if data.per == "node" else _label(p, data.per) for _, p in odd],
                    "customdata": [_hover(p, data.unit, data.per) for _, p in odd],
                },
                mode="markers+text",
                name=f"outliers (|robust z| > {data.z_limit:g})",
                marker={"color": THRESHOLD_COLOUR, "size": 10, "symbol": "diamond"},
                textposition="middle right",
                textfont={"color": THRESHOLD_COLOUR},
                hovertemplate=HOVER,
            )
        )
    _equal_note(fig, data)
    limit = threshold_value(data.threshold)
    if limit is not None:
        _hline(fig, limit, f"threshold {threshold_text(data.threshold, data.unit)}")
    return _with_traces(fig, traces)

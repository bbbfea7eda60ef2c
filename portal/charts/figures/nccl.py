"""NCCL busbw by message size."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import plotly.graph_objects as go

from portal.charts.figures.common import (
    _AXIS,
    MAX_LEGEND,
    _escape,
    _hline,
    _json,
    _new,
    binary_size,
    size_ticks,
)

if TYPE_CHECKING:
    from portal.charts.selectors import NcclData


def nccl_figure(data: NcclData) -> dict[str, Any]:
    """busbw against message size: one line per node / group / pair, log x axis in binary units,
    the floor as a dashed line."""
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
    if data.threshold is not None:
        _hline(fig, data.threshold, f"floor {data.threshold:g} GB/s")
    return _json(fig)

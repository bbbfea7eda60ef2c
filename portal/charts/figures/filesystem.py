"""Filesystem throughput per node and in aggregate, against the floors."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from portal.charts.figures.common import (
    _AXIS,
    _BASE_LAYOUT,
    _hline,
    _json,
)

if TYPE_CHECKING:
    from portal.charts.selectors import FsData


def fs_figure(data: FsData) -> dict[str, Any]:
    """Per-node write/read GB/s (each node alone, and all at once when the aggregate ran) against
    the per-node floors; the aggregate against its floors in a panel of its own."""
    cols = 2 if data.has_aggregate else 1
    fig = make_subplots(
        rows=1,
        cols=cols,
        column_widths=[0.82, 0.18] if cols == 2 else None,
        horizontal_spacing=0.08,
        subplot_titles=["per node (GB/s)", "aggregate (GB/s)"][:cols],
    )
    fig.update_layout(**_BASE_LAYOUT, template=go.layout.Template(), title={"text": data.title}, height=500)
    fig.update_layout(margin={**_BASE_LAYOUT["margin"], "t": 90})
    fig.update_layout(barmode="group")
    fig.update_xaxes(**_AXIS)
    fig.update_yaxes(**_AXIS, rangemode="tozero")
    bars = [
        ("write (alone)", data.write, "#0969da"),
        ("read (alone)", data.read, "#1a7f37"),
        ("write (all nodes at once)", data.concurrent_write, "#80b8f0"),
        ("read (all nodes at once)", data.concurrent_read, "#8fd19e"),
    ]
    for name, values, colour in bars:
        if any(v is not None for v in values):
            fig.add_trace(
                go.Bar(
                    x=data.nodes,
                    y=values,
                    name=name,
                    marker_color=colour,
                    hovertemplate="%{x}: %{y:.2f} GB/s<extra>" + name + "</extra>",
                ),
                row=1,
                col=1,
            )
    if data.min_write is not None:
        _hline(fig, data.min_write, f"write floor {data.min_write:g}", row=1, col=1)
    if data.min_read is not None:
        _hline(fig, data.min_read, f"read floor {data.min_read:g}", row=1, col=1)
    if cols == 2:
        fig.add_trace(
            go.Bar(
                x=["write", "read"],
                y=[data.aggregate_write, data.aggregate_read],
                name="aggregate",
                marker_color=["#0969da", "#1a7f37"],
                text=[f"{v:.1f}" if v is not None else "" for v in (data.aggregate_write, data.aggregate_read)],
                textposition="outside",
                showlegend=False,
            ),
            row=1,
            col=2,
        )
        if data.min_aggregate_write is not None:
            _hline(fig, data.min_aggregate_write, f"write floor {data.min_aggregate_write:g}", row=1, col=2)
        if data.min_aggregate_read is not None:
            _hline(fig, data.min_aggregate_read, f"read floor {data.min_aggregate_read:g}", row=1, col=2)
    return _json(fig)

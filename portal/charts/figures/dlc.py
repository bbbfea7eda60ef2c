"""DLC temperature: idle and load per GPU against the slowdown threshold."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from portal.charts.figures.common import (
    _AXIS,
    _BASE_LAYOUT,
    THRESHOLD_COLOUR,
    _escape,
    _hline,
    _json,
)

if TYPE_CHECKING:
    from portal.charts.selectors import DlcData


def dlc_figure(data: DlcData) -> dict[str, Any]:
    """Idle and load steady temperature per GPU against the slowdown threshold (and the ceiling the
    margin leaves), with each GPU's delta to its siblings' median below."""
    gpus = [f"GPU {g}" for g in data.gpus]
    fig = make_subplots(
        rows=2,
        cols=1,
        shared_xaxes=True,
        row_heights=[0.7, 0.3],
        vertical_spacing=0.08,
        subplot_titles=["steady temperature (C)", "load temperature minus the siblings' median (C)"],
    )
    fig.update_layout(**_BASE_LAYOUT, template=go.layout.Template(), title={"text": data.title}, height=580)
    fig.update_layout(margin={**_BASE_LAYOUT["margin"], "t": 90})
    fig.update_layout(barmode="group")
    fig.update_xaxes(**_AXIS)
    fig.update_yaxes(**_AXIS)
    who = f"{_escape(data.node)} · " if data.node else ""
    for name, values, colour in (("idle", data.idle, "#54aeff"), ("load", data.load, "#bc4c00")):
        hover = f"{who}%{{x}}<br>{name}: %{{y:.1f}} °C<extra></extra>"
        fig.add_trace(go.Bar(x=gpus, y=values, name=name, marker_color=colour, hovertemplate=hover), row=1, col=1)
    slowdowns = [s for s in data.slowdown if s is not None]
    if slowdowns:
        fig.add_trace(
            go.Scatter(
                x=gpus,
                y=data.slowdown,
                name="slowdown threshold",
                mode="markers",
                marker={
                    "symbol": "line-ew-open",
                    "size": 40,
                    "color": THRESHOLD_COLOUR,
                    "line": {"width": 3, "color": THRESHOLD_COLOUR},
                },
            ),
            row=1,
            col=1,
        )
        if data.margin_c is not None:
            ceiling = min(slowdowns) - data.margin_c
            _hline(fig, ceiling, f"slowdown - {data.margin_c:g} C margin = {ceiling:g} C", row=1, col=1)
    limit = data.max_sibling_delta_c
    colours = [
        THRESHOLD_COLOUR if (d is not None and limit is not None and d > limit) else "#6e7781"
        for d in data.sibling_delta
    ]
    fig.add_trace(
        go.Bar(
            x=gpus,
            y=data.sibling_delta,
            name="delta to siblings",
            marker_color=colours,
            text=[f"{d:+.1f}" if d is not None else "" for d in data.sibling_delta],
            textposition="outside",
            showlegend=False,
            hovertemplate=f"{who}%{{x}}<br>%{{y:+.1f}} °C from the siblings' median<extra></extra>",
        ),
        row=2,
        col=1,
    )
    if limit is not None:
        _hline(fig, limit, f"max {limit:g} C", row=2, col=1)
    return _json(fig)

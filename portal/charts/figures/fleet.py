"""Fleet distribution: a box of the fleet, one point per node, robust outliers labelled."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import plotly.graph_objects as go

from portal.charts.figures.common import (
    _AXIS,
    THRESHOLD_COLOUR,
    _escape,
    _hline,
    _json,
    _new,
)

if TYPE_CHECKING:
    from portal.charts.selectors import Distribution


def threshold_value(text: str) -> float | None:
    """The number of a simple threshold string ('>= 460', '<= 0'); None for anything else."""
    match = re.fullmatch(r"\s*(?:>=|<=|>|<|==)\s*(-?[\d.]+(?:e[+-]?\d+)?)\s*", text or "")
    return float(match.group(1)) if match else None


def _jitter(i: int) -> float:
    """Deterministic strip jitter in [-0.18, 0.18] (golden-ratio sequence: same picture each load)."""
    return ((i * 0.6180339887) % 1.0 - 0.5) * 0.36


def distribution_figure(data: Distribution) -> dict[str, Any]:
    """A box of the fleet with one point per node (or GPU) beside it; robust outliers in red and
    labelled with their node."""
    unit = f" ({data.unit})" if data.unit else ""
    fig = _new(
        title={"text": data.title},
        xaxis={**_AXIS, "showticklabels": False, "showgrid": False, "range": [-0.6, 1.2]},
        yaxis={**_AXIS, "title": {"text": f"{data.metric}{unit}"}},
        height=520,
        showlegend=True,
    )
    values = [p.value for p in data.points]
    fig.add_trace(
        go.Box(
            y=values,
            x=[0.0] * len(values),
            name="fleet",
            boxpoints=False,
            marker_color="#6e7781",
            width=0.5,
            hoverinfo="y",
        )
    )

    def label(p: Any) -> str:
        return p.node if p.gpu is None else f"{p.node} GPU {p.gpu}"

    def z_text(p: Any) -> str:
        return "" if p.z is None else f"robust z {p.z:+.1f}"

    normal = [(i, p) for i, p in enumerate(data.points) if not p.outlier]
    odd = [(i, p) for i, p in enumerate(data.points) if p.outlier]
    fig.add_trace(
        go.Scatter(
            x=[0.75 + _jitter(i) for i, _ in normal],
            y=[p.value for _, p in normal],
            mode="markers",
            name="per node" if data.per == "node" else "per GPU",
            marker={"color": "#0969da", "size": 7, "opacity": 0.75},
            text=[label(p) for _, p in normal],
            customdata=[z_text(p) for _, p in normal],
            hovertemplate="%{text}: %{y:.4g}" + _escape(unit) + "<br>%{customdata}<extra></extra>",
        )
    )
    if odd:
        fig.add_trace(
            go.Scatter(
                x=[0.75 + _jitter(i) for i, _ in odd],
                y=[p.value for _, p in odd],
                mode="markers+text",
                name=f"outliers (|robust z| > {data.z_limit:g})",
                marker={"color": THRESHOLD_COLOUR, "size": 10, "symbol": "diamond"},
                text=[label(p) for _, p in odd],
                textposition="middle right",
                textfont={"color": THRESHOLD_COLOUR},
                customdata=[z_text(p) for _, p in odd],
                hovertemplate="%{text}: %{y:.4g}" + _escape(unit) + "<br>%{customdata}<extra></extra>",
            )
        )
    limit = threshold_value(data.threshold)
    if limit is not None:
        _hline(fig, limit, f"threshold {data.threshold.strip()}")
    return _json(fig)

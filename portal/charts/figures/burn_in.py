"""Burn-in telemetry: stacked panels per GPU (and the node's power), throttle spans, the slowdown line."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from portal.charts.figures.common import (
    _AXIS,
    _BASE_LAYOUT,
    MAX_THROTTLE_SHAPES,
    THRESHOLD_COLOUR,
    _escape,
    _json,
    gpu_colour,
)
from portal.formatting import unit_shown

if TYPE_CHECKING:
    from portal.charts.selectors import BurnInData

NODE_COLOUR = "#57606a"  # the node's own curve (BMC power): grey, apart from every GPU's colour


def _compact_x(value: float | None) -> float | int | None:
    """Seconds to the millisecond, whole ones as ints: the JSON stays short ("40000" not "40000.0")."""
    if value is None:
        return None
    value = round(value, 3)
    return int(value) if value.is_integer() else value


def _compact_y(value: float | None) -> float | None:
    """Readings to 4 significant digits (the hover shows 4): 61.23 C, 652.3 W, 1980 MHz."""
    return None if value is None else float(f"{value:.4g}")


def _merge_spans(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _telemetry_traces(data: BurnInData) -> list[dict[str, Any]]:
    """One line per GPU and panel, the same colour on every panel, the legend on the first.

    Plain dicts, not go.Scatter: plotly.py validates every point of a go.Scatter, which costs
    ~0.3 s for 24 traces of 1,500 points and adds nothing to numbers we produced."""
    traces: list[dict[str, Any]] = []
    who = f"{_escape(data.node)} · " if data.node else ""
    for row, (_, _label, unit, panel) in enumerate(data.panels, start=1):
        axis = "" if row == 1 else str(row)
        for trace in panel:
            name = f"GPU {trace.gpu}" if trace.gpu is not None else "node"
            colour = gpu_colour(trace.gpu) if trace.gpu is not None else NODE_COLOUR
            traces.append(
                {
                    "type": "scatter",
                    "mode": "lines",
                    "x": [_compact_x(v) for v in trace.x],
                    "y": [_compact_y(v) for v in trace.y],
                    "name": name,
                    "legendgroup": name,
                    "showlegend": row == 1 or trace.gpu is None,
                    "line": {"color": colour, "width": 1.5},
                    "xaxis": f"x{axis}",
                    "yaxis": f"y{axis}",
                    "hovertemplate": f"{who}{name}: %{{y:.4g}} {unit_shown(unit)}<extra></extra>",
                }
            )
    return traces


def _slowdown_line(slowdown_c: float) -> tuple[dict[str, Any], dict[str, Any]]:
    """The dashed slowdown temperature across the temperature panel, and its label."""
    line = {
        "type": "line",
        "xref": "x domain",
        "yref": "y",
        "x0": 0,
        "x1": 1,
        "y0": slowdown_c,
        "y1": slowdown_c,
        "line": {"color": THRESHOLD_COLOUR, "dash": "dash", "width": 2},
    }
    label = {
        "xref": "x domain",
        "yref": "y",
        "x": 0,
        "y": slowdown_c,
        "xanchor": "left",
        "yanchor": "bottom",
        "showarrow": False,
        "text": f"slowdown {slowdown_c:g} C",
        "font": {"color": THRESHOLD_COLOUR},
    }
    return line, label


def _throttle_shading(data: BurnInData) -> list[dict[str, Any]]:
    """Each throttled stretch (any GPU) shaded across the panels; a one-sample event gets a
    minimum width so it stays visible on a 24 h axis."""
    xs = [x for _, _, _, panel in data.panels for t in panel for x in t.x if x is not None]
    span = (max(xs) - min(xs)) if xs else 1.0
    least = span / 500 or 1.0
    merged = _merge_spans([(t.start, max(t.end, t.start + least)) for t in data.throttles])
    return [
        {
            "type": "rect",
            "xref": "x",
            "yref": "paper",
            "x0": start,
            "x1": end,
            "y0": 0,
            "y1": 1,
            "fillcolor": "rgba(207,34,46,0.15)",
            "line": {"width": 0},
            "layer": "below",
        }
        for start, end in merged[:MAX_THROTTLE_SHAPES]
    ]


def _throttle_markers(data: BurnInData) -> dict[str, Any]:
    """A marker per throttle event at the top of the clock panel (else the last), naming GPU and reason."""
    names = [name for name, _, _, _ in data.panels]
    row = names.index(data.spans_panel) + 1 if data.spans_panel in names else len(names)
    axis = "" if row == 1 else str(row)
    clock = [t for _, _, _, panel in data.panels[row - 1 : row] for t in panel]
    top = max((y for t in clock for y in t.y if y is not None), default=0)
    return {
        "type": "scatter",
        "mode": "markers",
        "name": "throttle",
        "x": [t.start for t in data.throttles],
        "y": [top] * len(data.throttles),
        # reasons are NVML bit names
        "text": [f"GPU {t.gpu}: {t.reason} t={t.start:g}-{t.end:g} s" for t in data.throttles],
        "hovertemplate": "%{text}<extra></extra>",
        "marker": {"symbol": "triangle-down", "size": 10, "color": THRESHOLD_COLOUR},
        "xaxis": f"x{axis}",
        "yaxis": f"y{axis}",
    }


def _layout(data: BurnInData) -> dict[str, Any]:
    """The empty figure: stacked panels sharing the time axis, as plotly JSON."""
    labels = [f"{label} ({unit})" for _, label, unit, _ in data.panels]
    fig = make_subplots(rows=len(data.panels), cols=1, shared_xaxes=True, vertical_spacing=0.06, subplot_titles=labels)
    fig.update_layout(
        **{**_BASE_LAYOUT, "hovermode": "x unified", "margin": {**_BASE_LAYOUT["margin"], "t": 90}},
        template=go.layout.Template(),
        title={"text": data.title},
        height=260 * len(data.panels) + 80,
        legend={"title": {"text": "GPU"}},
    )
    fig.update_xaxes(**_AXIS)
    fig.update_yaxes(**_AXIS)
    fig.update_xaxes(title={"text": "time since start (s)"}, row=len(data.panels), col=1)
    return _json(fig)


def burn_in_figure(data: BurnInData) -> dict[str, Any]:
    """Stacked panels sharing the time axis (temperature, power, the node's BMC power when sampled,
    SM clock), one trace per GPU in the same colour on every panel; throttle events shaded across all
    panels and marked on the clock panel; the slowdown temperature drawn on the temperature panel."""
    out = _layout(data)
    traces = _telemetry_traces(data)
    shapes = list(out["layout"].get("shapes", []))
    annotations = list(out["layout"].get("annotations", []))
    if data.slowdown_c is not None:
        line, label = _slowdown_line(data.slowdown_c)
        shapes.append(line)
        annotations.append(label)
    if data.throttles:
        shapes += _throttle_shading(data)
        traces.append(_throttle_markers(data))
    out["layout"]["shapes"] = shapes
    out["layout"]["annotations"] = annotations
    out["data"] = traces
    return out

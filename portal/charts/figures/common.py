"""Shared by the figure builders: layout, colours, axis helpers. Pure: no database, no request.

Figures leave out plotly.py's default template (about 7 kB per figure) and set the few styles they
need, so the JSON carries data, not theme.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Callable
from typing import Any

import plotly.graph_objects as go
from plotly.basedatatypes import BaseTraceType

# The status badge colours of kiln.css (--green, --red, ...), so a heatmap cell reads like a badge.
BADGE_HEX = {
    "green": "#1a7f37",
    "red": "#cf222e",
    "orange": "#bc4c00",
    "purple": "#8250df",
    "blue": "#0969da",
    "grey": "#6e7781",
}
# Status order on the heatmap's colour bar: best to worst, then the not-yet-known.
STATUS_ORDER = ("pass", "warn", "fail", "error", "running", "queued", "skipped", "cancelled")
# One colour per GPU index, the same on every panel (plotly's D3 palette, 10 colours).
GPU_COLOURS = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)
THRESHOLD_COLOUR = "#cf222e"
# Past this many curves a legend is a wall of names: hover names the line instead.
MAX_LEGEND = 24
MAX_THROTTLE_SHAPES = 200

_BASE_LAYOUT: dict[str, Any] = {
    "font": {"family": "system-ui, -apple-system, Segoe UI, Roboto, sans-serif", "size": 12},
    "paper_bgcolor": "#ffffff",
    "plot_bgcolor": "#ffffff",
    "margin": {"l": 60, "r": 20, "t": 50, "b": 50},
    "hovermode": "closest",
}
_AXIS = {"showgrid": True, "gridcolor": "#eaeef2", "zeroline": False, "linecolor": "#d0d7de", "showline": True}


def _new(**layout: Any) -> go.Figure:
    return go.Figure(layout={**_BASE_LAYOUT, "template": go.layout.Template(), **layout})


def _json(fig: go.Figure) -> dict[str, Any]:
    out = fig.to_plotly_json()
    out["layout"].pop("template", None)
    return {"data": out["data"], "layout": out["layout"]}


def _trace(kind: Callable[..., BaseTraceType], arrays: dict[str, list[Any]], **props: Any) -> dict[str, Any]:
    """A trace as plotly.js reads it: its properties through plotly.py (validated; a named colour
    scale becomes its colours), its per-point `arrays` added as they are. plotly.py validates and
    copies an array a value at a time: a point per node of 1,250 was most of a fleet chart's time.
    The arrays are our own well-typed values; the tests check that go.Figure accepts each figure."""
    return {**kind(**props).to_plotly_json(), **arrays}


def _with_traces(fig: go.Figure, traces: list[dict[str, Any]]) -> dict[str, Any]:
    """The figure's JSON (layout, shapes and annotations through plotly.py) with `traces` (_trace)."""
    out = _json(fig)
    out["data"] = traces
    return out


def gpu_colour(gpu: int | None) -> str:
    return GPU_COLOURS[(gpu or 0) % len(GPU_COLOURS)]


def binary_size(value: float) -> str:
    """1048576 -> '1 MiB' (nccl-tests sizes are powers of two)."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:g} {unit}" if unit == "B" else f"{value:.3g} {unit}"
        value /= 1024
    return f"{value:g}"  # pragma: no cover


def size_ticks(sizes: list[float]) -> tuple[list[float], list[str]]:
    """Readable log-axis ticks over the sizes present: powers of 2, at most ~12 of them."""
    positive = [s for s in sizes if s and s > 0]
    if not positive:
        return [], []
    low, high = math.floor(math.log2(min(positive))), math.ceil(math.log2(max(positive)))
    step = max(1, math.ceil((high - low + 1) / 12))
    values = [float(2**e) for e in range(low, high + 1, step)]
    return values, [binary_size(v) for v in values]


def _hline(fig: go.Figure, y: float, text: str, **where: Any) -> None:
    fig.add_hline(
        y=y,
        line={"color": THRESHOLD_COLOUR, "dash": "dash", "width": 2},
        annotation={"text": text, "font": {"color": THRESHOLD_COLOUR}, "bgcolor": "rgba(255,255,255,0.8)"},
        annotation_position="top left",
        **where,
    )


# Date tick labels by tick spacing (ms, plotly's "M1"/"M12" for months): never below the minute, so
# one run (or one point) reads "Dec 3, 12:40", not "12:47:36.9885".
TIME_TICKS = [
    {"dtickrange": [None, 86_400_000], "value": "%H:%M<br>%b %-d"},
    {"dtickrange": [86_400_000, "M1"], "value": "%b %-d"},
    {"dtickrange": ["M1", "M12"], "value": "%b %Y"},
    {"dtickrange": ["M12", None], "value": "%Y"},
]
# A time axis spans at least this: one run's points (seconds apart, or a single one) sit inside an
# hour on each side instead of stretching plotly's range down to milliseconds.
MIN_TIME_SPAN = dt.timedelta(hours=2)


def utc_text(moment: dt.datetime) -> str:
    """A moment as plotly's date axis reads it: UTC, no offset (plotly ignores time zones)."""
    if moment.tzinfo is not None:
        moment = moment.astimezone(dt.UTC).replace(tzinfo=None)
    return moment.isoformat(sep=" ", timespec="seconds")


def time_axis(moments: list[dt.datetime]) -> dict[str, Any]:
    """A date x axis in UTC with minute-or-coarser ticks, widened to MIN_TIME_SPAN around its points."""
    axis: dict[str, Any] = {"type": "date", "tickformatstops": TIME_TICKS, "title": {"text": "UTC", "standoff": 2}}
    if moments:
        first, last = min(moments), max(moments)
        if last - first < MIN_TIME_SPAN:
            middle = first + (last - first) / 2
            axis["range"] = [utc_text(middle - MIN_TIME_SPAN / 2), utc_text(middle + MIN_TIME_SPAN / 2)]
    return axis


def _escape(text: str) -> str:
    """Names go into hover templates, where plotly renders a few HTML tags: none may come from a
    name. (Hostnames and item keys are validated slugs; this is the belt to those braces.)"""
    return text.replace("<", "&lt;").replace(">", "&gt;").replace("%{", "% {")


def natural(text: str) -> list[Any]:
    """Natural order key: gpu2 before gpu10, rack 9 before rack 10."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]

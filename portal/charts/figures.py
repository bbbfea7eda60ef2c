"""Figure builders: plain chart data (portal/charts/selectors.py dataclasses) -> plotly figure JSON
dicts, drawn in the browser by plotly.js. Pure: no database, no request.

Figures leave out plotly.py's default template (about 7 kB per figure) and set the few styles they
need, so the JSON carries data, not theme.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

if TYPE_CHECKING:
    from portal.charts.selectors import BurnInData, Distribution, DlcData, FsData, NcclData, RackData

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


# --- NCCL ------------------------------------------------------------------------------------------


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


# --- burn-in -----------------------------------------------------------------------------------------


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


def burn_in_figure(data: BurnInData) -> dict[str, Any]:
    """Three stacked panels sharing the time axis (temperature, power, SM clock), one trace per GPU
    in the same colour on every panel; throttle events shaded across all panels and marked on the
    clock panel; the slowdown temperature drawn on the temperature panel."""
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
    out = _json(fig)
    # The telemetry traces go in as plain dicts: plotly.py validates every point of a go.Scatter,
    # which costs ~0.3 s for 24 traces of 1,500 points and adds nothing to numbers we produced.
    traces: list[dict[str, Any]] = []
    for row, (_, _label, unit, panel) in enumerate(data.panels, start=1):
        axis = "" if row == 1 else str(row)
        for trace in panel:
            name = f"GPU {trace.gpu}" if trace.gpu is not None else "node"
            traces.append(
                {
                    "type": "scatter",
                    "mode": "lines",
                    "x": [_compact_x(v) for v in trace.x],
                    "y": [_compact_y(v) for v in trace.y],
                    "name": name,
                    "legendgroup": name,
                    "showlegend": row == 1,
                    "line": {"color": gpu_colour(trace.gpu), "width": 1.5},
                    "xaxis": f"x{axis}",
                    "yaxis": f"y{axis}",
                    "hovertemplate": f"{name}: %{{y:.4g}} {unit}<extra></extra>",
                }
            )
    shapes = list(out["layout"].get("shapes", []))
    annotations = list(out["layout"].get("annotations", []))
    if data.slowdown_c is not None:
        shapes.append(
            {
                "type": "line",
                "xref": "x domain",
                "yref": "y",
                "x0": 0,
                "x1": 1,
                "y0": data.slowdown_c,
                "y1": data.slowdown_c,
                "line": {"color": THRESHOLD_COLOUR, "dash": "dash", "width": 2},
            }
        )
        annotations.append(
            {
                "xref": "x domain",
                "yref": "y",
                "x": 0,
                "y": data.slowdown_c,
                "xanchor": "left",
                "yanchor": "bottom",
                "showarrow": False,
                "text": f"slowdown {data.slowdown_c:g} C",
                "font": {"color": THRESHOLD_COLOUR},
            }
        )
    if data.throttles:
        # Shade each throttled stretch (any GPU) across the three panels; a one-sample event gets
        # a minimum width so it stays visible on a 24 h axis.
        xs = [x for _, _, _, panel in data.panels for t in panel for x in t.x if x is not None]
        span = (max(xs) - min(xs)) if xs else 1.0
        least = span / 500 or 1.0
        merged = _merge_spans([(t.start, max(t.end, t.start + least)) for t in data.throttles])
        for start, end in merged[:MAX_THROTTLE_SHAPES]:
            shapes.append(
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
            )
        last = len(data.panels)
        axis = "" if last == 1 else str(last)
        clock = [t for _, _, _, panel in data.panels[-1:] for t in panel]
        top = max((y for t in clock for y in t.y if y is not None), default=0)
        traces.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": "throttle",
                "x": [t.start for t in data.throttles],
                "y": [top] * len(data.throttles),
                "text": [
                    f"GPU {t.gpu}: {t.reason} t={t.start:g}-{t.end:g} s" for t in data.throttles
                ],  # reasons are NVML bit names
                "hovertemplate": "%{text}<extra></extra>",
                "marker": {"symbol": "triangle-down", "size": 10, "color": THRESHOLD_COLOUR},
                "xaxis": f"x{axis}",
                "yaxis": f"y{axis}",
            }
        )
    out["layout"]["shapes"] = shapes
    out["layout"]["annotations"] = annotations
    out["data"] = traces
    return out


# --- DLC temperature -----------------------------------------------------------------------------------


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
    fig.add_trace(go.Bar(x=gpus, y=data.idle, name="idle", marker_color="#54aeff"), row=1, col=1)
    fig.add_trace(go.Bar(x=gpus, y=data.load, name="load", marker_color="#bc4c00"), row=1, col=1)
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
        ),
        row=2,
        col=1,
    )
    if limit is not None:
        _hline(fig, limit, f"max {limit:g} C", row=2, col=1)
    return _json(fig)


# --- filesystem -------------------------------------------------------------------------------------------


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


# --- fleet distribution ----------------------------------------------------------------------------------


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


# --- rack heatmap ---------------------------------------------------------------------------------------


def _natural(text: str) -> list[Any]:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


def rack_layout(
    cells: list[Any], unracked: str = "unracked"
) -> tuple[list[str], list[str], dict[str, tuple[str, str]]]:
    """Columns (racks, natural order, unracked last), rows (positions, natural order: U1 at the
    bottom) and each node's (column, row). Nodes without a position, or sharing one, get their own
    slot so no node hides another."""
    racks = sorted({c.rack for c in cells}, key=lambda r: (r == unracked, _natural(r)))
    placed: dict[str, tuple[str, str]] = {}
    taken: set[tuple[str, str]] = set()
    for rack in racks:
        members = sorted((c for c in cells if c.rack == rack), key=lambda c: _natural(c.node))
        slot = 0
        for c in members:
            row = c.position
            if not row:
                slot += 1
                row = f"slot {slot}"
            base, n = row, 1
            while (rack, row) in taken:
                n += 1
                row = f"{base} ({n})"
            taken.add((rack, row))
            placed[c.node] = (rack, row)
    rows = sorted({row for _, row in placed.values()}, key=_natural)
    return racks, rows, placed


def rack_figure(data: RackData, *, higher_is_better: bool = True) -> dict[str, Any]:
    """Nodes by rack (x) and position (y): coloured by worst status (badge colours) or by a metric
    (continuous). Hover names the node; a click opens its results (customdata is the URL)."""
    racks, rows, placed = rack_layout(data.cells)
    col_index = {r: i for i, r in enumerate(racks)}
    row_index = {r: i for i, r in enumerate(rows)}
    z: list[list[float | None]] = [[None] * len(racks) for _ in rows]
    text: list[list[str]] = [[""] * len(racks) for _ in rows]
    hover: list[list[str]] = [[""] * len(racks) for _ in rows]
    urls: list[list[str]] = [[""] * len(racks) for _ in rows]
    by_status = data.metric == "status"
    statuses = list(STATUS_ORDER)
    for c in data.cells:
        rack, row = placed[c.node]
        i, j = row_index[row], col_index[rack]
        text[i][j] = c.node
        urls[i][j] = c.url
        if by_status:
            z[i][j] = statuses.index(c.status) if c.status in statuses else statuses.index("queued")
            hover[i][j] = f"{c.node}: {c.status}"
        else:
            z[i][j] = c.value
            value = "no value" if c.value is None else f"{c.value:.4g} {data.unit}".strip()
            hover[i][j] = f"{c.node}: {value} (worst status {c.status})"
    trace: dict[str, Any] = {
        "x": racks,
        "y": rows,
        "z": z,
        "text": text,
        "customdata": urls,
        "hovertext": hover,
        "hovertemplate": "%{hovertext}<br>rack %{x}, position %{y}<extra></extra>",
        "xgap": 3,
        "ygap": 3,
        "hoverongaps": False,
    }
    if len(data.cells) <= 400:
        trace["texttemplate"] = "%{text}"
        trace["textfont"] = {"color": "#ffffff", "size": 11}
    if by_status:
        n = len(statuses)
        scale: list[list[Any]] = []
        for k, status in enumerate(statuses):
            colour = BADGE_HEX[_STATUS_BADGE.get(status, "grey")]
            scale += [[k / n, colour], [(k + 1) / n, colour]]
        trace.update(
            colorscale=scale,
            zmin=-0.5,
            zmax=n - 0.5,
            colorbar={"tickvals": list(range(n)), "ticktext": statuses, "title": {"text": "status"}},
        )
    else:
        trace.update(
            colorscale="RdYlGn" if higher_is_better else "RdYlGn_r",
            colorbar={"title": {"text": data.unit or "value"}},
        )
        trace["textfont"] = {"color": "#1f2328", "size": 11}
    fig = _new(
        title={"text": data.title},
        xaxis={"type": "category", "side": "top"},
        margin={**_BASE_LAYOUT["margin"], "t": 90},
        yaxis={"title": {"text": "position"}, "type": "category"},
        height=max(320, 28 * len(rows) + 160),
    )
    fig.add_trace(go.Heatmap(**trace))
    return _json(fig)


# Same mapping as portal.runs.models.STATUS_COLOURS, kept here so the builders stay pure.
_STATUS_BADGE = {
    "queued": "grey",
    "running": "blue",
    "pass": "green",
    "warn": "orange",
    "fail": "red",
    "error": "purple",
    "skipped": "grey",
    "cancelled": "grey",
}


def _escape(text: str) -> str:
    """Names go into hover templates, where plotly renders a few HTML tags: none may come from a
    name. (Hostnames and item keys are validated slugs; this is the belt to those braces.)"""
    return text.replace("<", "&lt;").replace(">", "&gt;").replace("%{", "% {")

"""Rack heatmap: nodes by rack and position, by worst status (badge colours) or a metric."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import plotly.graph_objects as go

from portal.charts.figures.common import (
    _BASE_LAYOUT,
    BADGE_HEX,
    STATUS_ORDER,
    _new,
    _trace,
    _with_traces,
    natural,
)
from portal.formatting import quantity, unit_shown

if TYPE_CHECKING:
    from portal.charts.selectors import RackData


def rack_layout(
    cells: list[Any], unracked: str = "unracked"
) -> tuple[list[str], list[str], dict[str, tuple[str, str]]]:
    """Columns (racks, natural order, unracked last), rows (positions, natural order: U1 at the
    bottom) and each node's (column, row). Nodes without a position, or sharing one, get their own
    slot so no node hides another."""
    by_rack: dict[str, list[Any]] = {}
    for c in cells:  # once over the cells, not once per rack (400 racks x 12,500 nodes)
        by_rack.setdefault(c.rack, []).append(c)
    racks = sorted(by_rack, key=lambda r: (r == unracked, natural(r)))
    placed: dict[str, tuple[str, str]] = {}
    taken: set[tuple[str, str]] = set()
    for rack in racks:
        members = sorted(by_rack[rack], key=lambda c: natural(c.node))
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
    rows = sorted({row for _, row in placed.values()}, key=natural)
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
            value = "no value" if c.value is None else quantity(c.value, data.unit)
            text[i][j] = f"{c.node}<br>{value}"  # the value in the cell, not only in the hover
            hover[i][j] = f"{c.node}: {value} (worst status {c.status})"
    arrays: dict[str, Any] = {"x": racks, "y": rows, "z": z, "text": text, "customdata": urls, "hovertext": hover}
    trace: dict[str, Any] = {
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
        note = _metric_scale(trace, data, higher_is_better)
        trace["textfont"] = {"color": "#1f2328", "size": 11}
    title = data.title + (f"<br><sub>{note}</sub>" if not by_status and note else "")
    fig = _new(
        title={"text": title},
        xaxis={"type": "category", "side": "top"},
        margin={**_BASE_LAYOUT["margin"], "t": 90},
        yaxis={"title": {"text": "position"}, "type": "category"},
        height=max(320, (28 if by_status else 40) * len(rows) + 160),  # two lines of text per metric cell
    )
    return _with_traces(fig, [_trace(go.Heatmap, arrays, **trace)])


def _metric_scale(trace: dict[str, Any], data: RackData, higher_is_better: bool) -> str:
    """An honest colour scale for a metric: from the lowest to the highest value measured. A constant
    field is one colour with no colour bar (plotly would invent a spread around it, 39.6-40.4 for all
    40); the returned note says so ("all 4 nodes: 40 °C"). '' when the values differ."""
    values = [c.value for c in data.cells if c.value is not None]
    low, high = (min(values), max(values)) if values else (0.0, 1.0)
    if values and low == high:
        colour = "#54aeff"  # neutral: one value is neither good nor bad against its neighbours
        trace.update(colorscale=[[0, colour], [1, colour]], zmin=low - 1, zmax=high + 1, showscale=False)
        return f"all {len(values)} nodes: {quantity(low, data.unit)}"
    trace.update(
        colorscale="RdYlGn" if higher_is_better else "RdYlGn_r",
        zmin=low,
        zmax=high,
        colorbar={"title": {"text": unit_shown(data.unit) or "value"}},
    )
    return ""


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

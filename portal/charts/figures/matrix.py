"""Matrices of one result: one heatmap per declared matrix (checks/core/presentation.py MatrixChart),
stacked, each with its own colour bar. A value is coloured by its distance from the threshold its result
recorded (red short of it, blue past it), and out-of-spec cells are outlined in red.

Every label, text and threshold comes from node output: each is escaped (common._escape) before it
reaches a tick, a cell or a hover, where plotly would render a few HTML tags.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any

import plotly.graph_objects as go
from plotly.colors import sample_colorscale
from plotly.subplots import make_subplots

from portal.charts.figures.common import _AXIS, _BASE_LAYOUT, THRESHOLD_COLOUR, _escape, _json

if TYPE_CHECKING:
    from portal.charts.selectors.matrix import Cell, MatrixData, MatrixResult

TOP_PX = 90  # the figure title and the first matrix's title
BOTTOM_PX = 110  # the last matrix's column ticks (turned when many)
GAP_PX = 150  # column ticks of one matrix and the title of the next
# Cell text (a link type, a value) only while cells are wide enough to hold it.
MAX_TEXT_SIDE = 24
# Out-of-spec cells outlined per figure (a shape each); past it the titles count them, the hovers say so.
MAX_OUTLINES = 400


def _cell_px(rows: int) -> float:
    """Row height: 28 px for a few rows, down to 12 px at 64 rows."""
    return max(12.0, min(28.0, 640.0 / max(rows, 1)))


def _plot_px(data: MatrixData) -> float:
    return max(80.0, len(data.rows) * _cell_px(len(data.rows)) + 20)


def _number(value: float) -> str:
    return f"{value:.4g}"


def _subtitle(data: MatrixData) -> str:
    chart = data.chart
    title = _escape(chart.title) + (f" ({_escape(data.unit)})" if data.unit else "")
    notes = []
    if data.total_rows > len(data.rows) or data.total_cols > len(data.cols):
        notes.append(
            f"showing the first {len(data.rows)} of {data.total_rows} rows and {len(data.cols)} of "
            f"{data.total_cols} columns"
        )
    marked = sum(1 for c in data.cells.values() if c.marked)
    if marked:
        notes.append(f"outlined in red: out of spec ({marked})")
    if data.hidden_marks:
        notes.append(f"{data.hidden_marks} out-of-spec cells not shown")
    if not data.cells:
        notes.append("nothing recorded")
    elif data.chart.colour_by == "value" and _margins(_cell_grid(data)) is not None:
        notes.append("coloured by distance from the threshold: red short of it, blue past it")
    return title + (f"<br><sub>{'; '.join(notes)}</sub>" if notes else "")


def _value(data: MatrixData, cell: Cell) -> str:
    if cell.value is None:
        return "no value"
    if data.chart.colour_by == "rank":
        return f"rank {_number(cell.value)}"
    return f"{_number(cell.value)} {_escape(cell.unit)}".rstrip()


def _hover(data: MatrixData, row: str, col: str, cell: Cell) -> str:
    lines = [f"<b>{_escape(row)}</b> \u00b7 {_escape(col)}", _value(data, cell)]
    if cell.text:
        lines.append(_escape(cell.text))
    if cell.threshold:
        lines.append(f"threshold: {_escape(cell.threshold)}")
    margin = margin_pct(cell) if data.chart.colour_by == "value" else None
    if margin is not None:
        lines.append(f"{abs(margin):.1f}% {'short of' if margin < 0 else 'past'} the threshold")
    lines += [_escape(why) for why in cell.why]
    lines += [f"{_escape(k)}: {_escape(v)}" for k, v in cell.extra]
    return "<br>".join(lines)


def _shown_text(data: MatrixData, cell: Cell | None) -> str:
    if cell is None:
        return ""
    if data.chart.text_field and cell.text:
        return _escape(cell.text)
    return _number(cell.value) if cell.value is not None else ""


# Colour by distance from the threshold: the failing side of the scale (reds, short of the threshold)
# meets the passing side (blues, to spare) at the threshold, pale there. The span is at least 10% so a
# matrix of cells all within a few % of the threshold is not stretched into deep colours, and at most
# 100% so one cell far past it does not wash the rest out (beyond it the colour stays, the hover tells).
MIN_SPAN_PCT = 10.0
MAX_SPAN_PCT = 100.0
FAIL_SCALE = ("#a40e26", "#ff9492")  # deep to light red: far short of the threshold to just short
PASS_SCALE = ("#ddf4ff", "#0550ae")  # pale to deep blue: at the threshold to far past it
# Thresholds named in the colour bar's title (one per column of host copies); more: each cell's hover.
MAX_BAR_THRESHOLDS = 4
_JUST_UNDER = 0.4999  # where the red side stops: a cell just short of the threshold is red, not pale
_BOUND = re.compile(r"\s*(>=|<=|>|<)\s*(-?\d+(?:\.\d+)?(?:e[+-]?\d+)?)\s*")


def margin_pct(cell: Cell) -> float | None:
    """How far the cell's value is past its threshold ('>= 360': a floor, '<= 5': a ceiling), in % of
    it: positive to spare, negative short of it. None without a value or a simple nonzero bound."""
    match = _BOUND.fullmatch(cell.threshold or "")
    if cell.value is None or match is None or float(match.group(2)) == 0.0:
        return None
    bound = float(match.group(2))
    ratio = cell.value / bound - 1.0 if match.group(1).startswith(">") else 1.0 - cell.value / bound
    return ratio * 100.0 if bound > 0 else -ratio * 100.0


def _margins(cells: list[list[Cell | None]]) -> list[list[float | None]] | None:
    """Each cell's margin (margin_pct), or None for the whole matrix unless every valued cell has one:
    a matrix is coloured one way."""
    out: list[list[float | None]] = []
    for line in cells:
        row: list[float | None] = []
        for cell in line:
            m = margin_pct(cell) if cell is not None else None
            if cell is not None and cell.value is not None and m is None:
                return None
            row.append(m)
        out.append(row)
    return out if any(m is not None for line in out for m in line) else None


def _threshold_colours(
    data: MatrixData, cells: list[list[Cell | None]], margins: list[list[float | None]]
) -> tuple[list[list[float | None]], dict[str, Any]]:
    """z = the margins, clipped to the span, on a scale diverging at the threshold. A cell the check
    judged out of spec is on the red side whatever its margin (a strict '>' met exactly)."""
    shown = [abs(m) for line in margins for m in line if m is not None]
    span = min(math.ceil(max([MIN_SPAN_PCT, *shown]) / 10) * 10, MAX_SPAN_PCT)  # round ticks
    z: list[list[float | None]] = []
    for line, mline in zip(cells, margins, strict=True):
        row: list[float | None] = []
        for cell, m in zip(line, mline, strict=True):
            if m is not None:
                m = max(-span, min(span, m))
                if cell is not None and cell.ok is False:
                    m = min(m, -span / 500)
            row.append(m)
        z.append(row)
    scale = [[0.0, FAIL_SCALE[0]], [_JUST_UNDER, FAIL_SCALE[1]], [0.5, PASS_SCALE[0]], [1.0, PASS_SCALE[1]]]
    clipped = max(shown) > span
    ends = ("\u2264 " if clipped else "", "\u2265 " if clipped else "")
    ticks = [-span, -span / 2, 0.0, span / 2, span]
    text = [f"{ends[0]}-{span:g}%", f"-{span / 2:g}%", "threshold", f"+{span / 2:g}%", f"{ends[1]}+{span:g}%"]
    thresholds = sorted({c.threshold.strip() for line in cells for c in line if c is not None and c.value is not None})
    named = [f"{t} {data.unit}".strip() for t in thresholds] if len(thresholds) <= MAX_BAR_THRESHOLDS else ["see hover"]
    title = "<br>".join(["vs threshold", *(_escape(t) for t in named)])
    bar = {"tickvals": ticks, "ticktext": text, "title": {"text": title}}
    return z, {"colorscale": scale, "zmin": -span, "zmax": span, "colorbar": bar}


def _colours(data: MatrixData, cells: list[list[Cell | None]]) -> tuple[list[list[float | None]], dict[str, Any]]:
    """z and its colours: a discrete scale of the declared ranks (nearest light, farthest dark); the
    distance from each cell's judged threshold when every cell has one (_threshold_colours); else a
    blue scale from 0 (a kind that judges these values on no simple bound)."""
    chart = data.chart
    z = [[cell.value if cell is not None else None for cell in line] for line in cells]
    if chart.colour_by == "rank":
        k = len(chart.ranks)
        colours = sample_colorscale("YlGnBu", [i / max(k - 1, 1) for i in range(k)])
        scale = [s for i, c in enumerate(colours) for s in ([i / k, c], [(i + 1) / k, c])]
        bar = {"tickvals": list(range(k)), "ticktext": [_escape(r) for r in chart.ranks], "title": {"text": ""}}
        return z, {"colorscale": scale, "zmin": -0.5, "zmax": k - 0.5, "colorbar": bar}
    margins = _margins(cells)
    if margins is not None:
        return _threshold_colours(data, cells, margins)
    values = [v for line in z for v in line if v is not None]
    low = min([0.0, *values])
    high = max(values) if values else 1.0
    bar = {"title": {"text": _escape(data.unit)}}
    return z, {"colorscale": "Blues", "zmin": low, "zmax": high if high > low else low + 1, "colorbar": bar}


def _cell_grid(data: MatrixData) -> list[list[Cell | None]]:
    return [[data.cells.get((r, c)) for c in data.cols] for r in data.rows]


def _grids(data: MatrixData) -> tuple[list[list[Cell | None]], list[list[str]]]:
    """The cells row by row (None: nothing recorded) and their hover texts."""
    cells = _cell_grid(data)
    hover = [
        [_hover(data, r, c, cell) if cell is not None else "" for c, cell in zip(data.cols, line, strict=True)]
        for r, line in zip(data.rows, cells, strict=True)
    ]
    return cells, hover


def _outlines(data: MatrixData, row: int, budget: int) -> list[dict[str, Any]]:
    """A red border around each out-of-spec cell (at most `budget`), in the subplot's axis coordinates:
    a category axis places its categories at 0, 1, 2..."""
    x, y = ("x", "y") if row == 1 else (f"x{row}", f"y{row}")
    where_col = {c: i for i, c in enumerate(data.cols)}
    where_row = {r: i for i, r in enumerate(data.rows)}
    marked = sorted((where_row[r], where_col[c]) for (r, c), cell in data.cells.items() if cell.marked)
    return [
        {
            "type": "rect",
            "xref": x,
            "yref": y,
            "x0": j - 0.5,
            "x1": j + 0.5,
            "y0": i - 0.5,
            "y1": i + 0.5,
            "line": {"color": THRESHOLD_COLOUR, "width": 3},
            "layer": "above",
        }
        for i, j in marked[:budget]
    ]


def _heatmap(data: MatrixData, domain: list[float]) -> go.Heatmap:
    cells, hover = _grids(data)
    z, colours = _colours(data, cells)
    colours["colorbar"].update(
        {"y": sum(domain) / 2, "len": domain[1] - domain[0], "yanchor": "middle", "thickness": 14}
    )
    heat: dict[str, Any] = {
        "x": [_escape(c) for c in data.cols],
        "y": [_escape(r) for r in data.rows],
        "z": z,
        "customdata": [[cell.value if cell is not None else None for cell in line] for line in cells],
        "hovertext": hover,
        "hoverinfo": "text",
        "xgap": 1,
        "ygap": 1,
        "hoverongaps": False,
        "name": _escape(data.chart.title),
        **colours,
    }
    if len(data.rows) <= MAX_TEXT_SIDE and len(data.cols) <= MAX_TEXT_SIDE:
        heat["text"] = [[_shown_text(data, cell) for cell in line] for line in cells]
        heat["texttemplate"] = "%{text}"
    return go.Heatmap(**heat)


def matrix_figure(data: MatrixResult) -> dict[str, Any]:
    """The declared matrices of one result, one under the other, sized to their row counts."""
    plots = [_plot_px(m) for m in data.matrices] or [80.0]
    area = sum(plots) + GAP_PX * (len(plots) - 1)
    title = _escape(data.title)
    if data.truncated:
        title += "<br><sub>too many measurements: only the first were read</sub>"
    fig = make_subplots(
        rows=len(plots),
        cols=1,
        row_heights=[p / sum(plots) for p in plots],
        vertical_spacing=GAP_PX / area if len(plots) > 1 else 0.0,
        subplot_titles=[_subtitle(m) for m in data.matrices],
    )
    fig.update_layout(**_BASE_LAYOUT, template=go.layout.Template(), title={"text": title})
    fig.update_layout(height=round(area + TOP_PX + BOTTOM_PX), margin={"l": 110, "r": 40, "t": TOP_PX + 20, "b": 90})
    shapes: list[dict[str, Any]] = []
    for i, matrix in enumerate(data.matrices, start=1):
        axis = "yaxis" if i == 1 else f"yaxis{i}"
        domain = list(fig.layout[axis].domain)
        many = len(matrix.cols) > 8
        fig.update_xaxes(
            _AXIS, showgrid=False, automargin=True, type="category", tickangle=-45 if many else 0, row=i, col=1
        )
        fig.update_xaxes(title={"text": _escape(matrix.chart.cols_title or matrix.chart.cols_label)}, row=i, col=1)
        fig.update_yaxes(_AXIS, showgrid=False, automargin=True, type="category", autorange="reversed", row=i, col=1)
        fig.update_yaxes(title={"text": _escape(matrix.chart.rows_title or matrix.chart.rows_label)}, row=i, col=1)
        if matrix.cells:
            fig.add_trace(_heatmap(matrix, domain), row=i, col=1)
        shapes += _outlines(matrix, i, MAX_OUTLINES - len(shapes))
    fig.update_layout(shapes=shapes)
    return _json(fig)

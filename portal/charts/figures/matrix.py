"""Matrices of one result: one heatmap per declared matrix (checks/presentation.py MatrixChart),
stacked, each with its own colour bar; out-of-spec cells are outlined in red.

Every label, text and threshold comes from node output: each is escaped (common._escape) before it
reaches a tick, a cell or a hover, where plotly would render a few HTML tags.
"""

from __future__ import annotations

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
    lines += [_escape(why) for why in cell.why]
    lines += [f"{_escape(k)}: {_escape(v)}" for k, v in cell.extra]
    return "<br>".join(lines)


def _shown_text(data: MatrixData, cell: Cell | None) -> str:
    if cell is None:
        return ""
    if data.chart.text_field and cell.text:
        return _escape(cell.text)
    return _number(cell.value) if cell.value is not None else ""


def _colours(data: MatrixData, z: list[list[float | None]]) -> dict[str, Any]:
    """A discrete scale of the declared ranks (nearest light, farthest dark), or a blue scale from 0. Red is
    kept for the outlines of out-of-spec cells."""
    chart = data.chart
    if chart.colour_by == "rank":
        k = len(chart.ranks)
        colours = sample_colorscale("YlGnBu", [i / max(k - 1, 1) for i in range(k)])
        scale = [s for i, c in enumerate(colours) for s in ([i / k, c], [(i + 1) / k, c])]
        bar = {"tickvals": list(range(k)), "ticktext": [_escape(r) for r in chart.ranks]}
        return {"colorscale": scale, "zmin": -0.5, "zmax": k - 0.5, "colorbar": bar}
    values = [v for line in z for v in line if v is not None]
    low = min([0.0, *values])
    high = max(values) if values else 1.0
    return {"colorscale": "Blues", "zmin": low, "zmax": high if high > low else low + 1, "colorbar": {}}


def _grids(data: MatrixData) -> tuple[list[list[Cell | None]], list[list[float | None]], list[list[str]]]:
    """The cells row by row, their values (None: nothing recorded) and their hover texts."""
    cells = [[data.cells.get((r, c)) for c in data.cols] for r in data.rows]
    z = [[cell.value if cell is not None else None for cell in line] for line in cells]
    hover = [
        [_hover(data, r, c, cell) if cell is not None else "" for c, cell in zip(data.cols, line, strict=True)]
        for r, line in zip(data.rows, cells, strict=True)
    ]
    return cells, z, hover


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
    cells, z, hover = _grids(data)
    colours = _colours(data, z)
    colours["colorbar"].update(
        {"y": sum(domain) / 2, "len": domain[1] - domain[0], "yanchor": "middle", "thickness": 14}
    )
    colours["colorbar"]["title"] = {"text": _escape(data.unit) if data.chart.colour_by == "value" else ""}
    heat: dict[str, Any] = {
        "x": [_escape(c) for c in data.cols],
        "y": [_escape(r) for r in data.rows],
        "z": z,
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

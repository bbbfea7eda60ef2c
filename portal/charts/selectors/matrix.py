"""Matrices of one result (chart family "matrix"): the heatmaps its check kind declares
(checks/core/presentation.py MatrixChart), read from the result's measurements in one query.

Labels come from node output (a NIC name, a hostname): they are kept as read here and escaped by the
figure builder. A matrix keeps its first MAX_SIDE rows and columns in natural order and says how many
it left out, so a result of a thousand nodes cannot blow up the page.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from checks import presentation_of
from checks.core.presentation import MatrixChart
from portal.ordering import natural_key as natural
from portal.runs.models import CheckResult, Measurement, Scope

# Rows and columns drawn per matrix: 64 x 64 cells stay readable and keep the figure JSON small.
MAX_SIDE = 64
# Measurement rows read for one result: a 1,000-node RDMA ring has 8,000 pairs per name.
MAX_READ = 50_000
# Hover lines of other labels per cell (the pair's server, a message size).
MAX_EXTRA_LABELS = 6

_FIELDS = ("name", "gpu", "value", "text", "unit", "threshold", "ok", "labels")


@dataclass
class Cell:
    value: float | None
    text: str = ""
    unit: str = ""
    threshold: str = ""
    ok: bool | None = None
    marked: bool = False
    why: list[str] = field(default_factory=list)  # what marks it: its own threshold, a marking measurement
    extra: list[tuple[str, str]] = field(default_factory=list)  # the measurement's other labels


@dataclass
class MatrixData:
    chart: MatrixChart
    rows: list[str]  # drawn, natural order
    cols: list[str]
    cells: dict[tuple[str, str], Cell]
    total_rows: int
    total_cols: int
    hidden_marks: int = 0  # out-of-spec cells outside the drawn rows and columns
    unit: str = ""


@dataclass
class MatrixResult:
    title: str
    matrices: list[MatrixData]
    truncated: bool = False  # more than MAX_READ measurements: the rest were not read


def matrix_result(*, result: CheckResult, max_side: int = MAX_SIDE, max_read: int = MAX_READ) -> MatrixResult:
    """The declared matrices of `result`, from one query over the names they read."""
    charts = presentation_of(result.kind).matrices
    names = sorted({n for c in charts for n in c.measurements} | {c.marks for c in charts if c.marks})
    query = Measurement.objects.filter(result=result, name__in=names).order_by("id").values(*_FIELDS)
    rows = list(query[: max_read + 1])
    truncated = len(rows) > max_read
    by_name: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows[:max_read]:
        by_name.setdefault(row["name"], []).append(row)
    where = result.node_set if result.scope == Scope.GROUP and result.node_set else result.node.hostname
    title = f"{result.item_key} on {where[:80]}"
    return MatrixResult(
        title=title, matrices=[build_matrix(c, by_name, max_side=max_side) for c in charts], truncated=truncated
    )


def _place(chart: MatrixChart, label: str, row: Mapping[str, Any]) -> str | None:
    """Where a measurement sits along one side: its label `label`, or its GPU for "gpu"."""
    if label == "gpu" and row["gpu"] is not None:
        return f"GPU {row['gpu']}"
    value = (row["labels"] or {}).get(label)
    return None if value is None else str(value)


def _column_title(chart: MatrixChart, name: str) -> str:
    titles = dict(zip(chart.measurements, chart.column_titles, strict=False))
    return titles.get(name, name)


def _cell(chart: MatrixChart, row: Mapping[str, Any]) -> Cell:
    labels = row["labels"] or {}
    skip = {chart.rows_label, chart.cols_label}
    extra = [(str(k), str(v)) for k, v in sorted(labels.items()) if k not in skip][:MAX_EXTRA_LABELS]
    cell = Cell(
        value=row["value"],
        text=row["text"] or "",
        unit=row["unit"] or chart.unit,
        threshold=row["threshold"] or "",
        ok=row["ok"],
        extra=extra,
    )
    if cell.ok is False:
        cell.marked = True
        cell.why.append(f"out of spec ({cell.threshold})" if cell.threshold else "out of spec")
    return cell


def _cells(chart: MatrixChart, by_name: Mapping[str, list[Mapping[str, Any]]]) -> dict[tuple[str, str], Cell]:
    cells: dict[tuple[str, str], Cell] = {}
    for name in chart.measurements:
        for row in by_name.get(name, []):
            r = _place(chart, chart.rows_label, row)
            c = _place(chart, chart.cols_label, row) if chart.cols_label else _column_title(chart, name)
            if r is None or c is None:
                continue  # not a cell of this matrix (a node total beside the pairs)
            cell = _cell(chart, row)
            held = cells.get((r, c))
            if held is None or (cell.marked and not held.marked):  # two values for a cell: the bad one shows
                cells[(r, c)] = cell
    return cells


def _mark(chart: MatrixChart, cells: dict[tuple[str, str], Cell], rows: Iterable[Mapping[str, Any]]) -> None:
    """Mark the cells a not-ok `marks` measurement names (its columns may be a comma-separated list)."""
    for row in rows:
        if row["ok"] is not False:
            continue
        r = _place(chart, chart.rows_label, row)
        cols = _place(chart, chart.cols_label, row) if chart.cols_label else None
        if r is None or cols is None:
            continue
        why = " ".join(
            p for p in (row["name"], row["text"] or "", f"({row['threshold']})" if row["threshold"] else "") if p
        )
        for c in cols.split(","):
            cell = cells.get((r, c.strip()))
            if cell is not None:
                cell.marked = True
                cell.why.append(f"out of spec: {why}")


def build_matrix(
    chart: MatrixChart, by_name: Mapping[str, list[Mapping[str, Any]]], *, max_side: int = MAX_SIDE
) -> MatrixData:
    """One declared matrix from the result's measurement rows (values() dicts), by name."""
    cells = _cells(chart, by_name)
    if chart.marks:
        _mark(chart, cells, by_name.get(chart.marks, []))
    all_rows = sorted({r for r, _ in cells}, key=natural)
    if chart.cols_label:
        all_cols = sorted({c for _, c in cells}, key=natural)
    else:  # the declared order of the measurements
        all_cols = [t for t in (_column_title(chart, n) for n in chart.measurements) if any(c == t for _, c in cells)]
    rows, cols = all_rows[:max_side], all_cols[:max_side]
    shown_rows, shown_cols = set(rows), set(cols)
    hidden = sum(1 for (r, c), cell in cells.items() if cell.marked and (r not in shown_rows or c not in shown_cols))
    kept = {k: v for k, v in cells.items() if k[0] in shown_rows and k[1] in shown_cols}
    units = {cell.unit for cell in kept.values() if cell.unit}
    return MatrixData(
        chart=chart,
        rows=rows,
        cols=cols,
        cells=kept,
        total_rows=len(all_rows),
        total_cols=len(all_cols),
        hidden_marks=hidden,
        unit=chart.unit or (units.pop() if len(units) == 1 else ""),
    )

"""The certificate's per-node tables as aligned monospace text: one line per node (its state per
check) and one per GPU (index, UUID, serial), in blocks of lines under a repeated header.

Why text and not <table>: WeasyPrint lays out a table cell by cell, about 24 ms a node for the two
tables (12,500 nodes: five minutes, most of the issuing budget). Preformatted lines are laid out as
one text box each, about 3 ms a node. Only states other than "pass" are marked up (coloured), so the
common line stays plain text."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from html import escape
from typing import Any

from django.utils.safestring import SafeString, mark_safe

# Lines under one header: two blocks fill an A4 page (261 mm of text height) at 7.5 pt with a line
# height of 1.25 (3.3 mm a line: 79 lines), so a block never breaks across pages.
LINES_PER_BLOCK = 38
FONT_PT = 7.5  # the size of the document's other small print (base.html .small)
MIN_FONT_PT = 4.0  # below this a line wraps instead of shrinking further
LINE_WIDTH_PT = 510.0  # A4 (210 mm) less the 15 mm side margins of base.html: 180 mm
# DejaVu Sans Mono's advance width is 1233 units of its 2048-unit em (the font's hmtx table).
MONO_ADVANCE_EM = 1233 / 2048
GAP = 2  # spaces between columns


@dataclass(frozen=True)
class TextTable:
    """Blocks of lines (HTML-escaped, states marked up) under one header, at a font size at which
    the widest line fits the page."""

    header: str
    blocks: list[list[SafeString]]
    font_pt: float


def font_size(chars: int) -> float:
    """The largest size up to FONT_PT at which `chars` monospace characters fit LINE_WIDTH_PT."""
    fits = LINE_WIDTH_PT / (MONO_ADVANCE_EM * max(chars, 1))
    return round(max(MIN_FONT_PT, min(FONT_PT, fits)), 2)


def _widths(header: list[str], rows: Iterable[list[str]]) -> list[int]:
    widths = [len(h) for h in header]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
    return widths


def _line(cells: list[str], widths: list[int], marked: dict[int, str] | None = None) -> SafeString:
    """One line, each cell escaped and padded to its column; cells in `marked` wrapped in a span
    of that class (padding stays outside, so columns stay aligned)."""
    out = []
    for index, (cell, width) in enumerate(zip(cells, widths, strict=True)):
        pad = " " * (width - len(cell) + GAP)
        css = (marked or {}).get(index)
        out.append((f'<span class="{escape(css)}">{escape(cell)}</span>' if css else escape(cell)) + pad)
    return mark_safe("".join(out).rstrip())  # every cell and class is escaped above


def has_serials(node_rows: list[dict[str, Any]]) -> bool:
    """Whether any node has a chassis serial in the inventory. Without one the column is left out (a
    column of "—" says nothing); the GPU serials the inventory check read are in the GPU table."""
    return any(node.get("serial") for node in node_rows)


def _state_header(check_count: int, serials: bool) -> list[str]:
    return ["Node", *(["Serial"] if serials else []), "Rack/pos", *(f"C{i}" for i in range(1, check_count + 1))]


def _state_row(node: dict[str, Any], serials: bool) -> list[str]:
    position = f"/{node['position']}" if node.get("position") not in (None, "") else ""
    rack = f"{node.get('rack') or ''}{position}" or "—"
    serial = [node.get("serial") or "—"] if serials else []
    return [node["hostname"], *serial, rack, *(s or "—" for s in node["states"])]


def states_table(
    node_rows: list[dict[str, Any]], check_count: int, *, widths: list[int], serials: bool = True
) -> TextTable:
    """The state of each node per check (C1… as in the summary); a non-pass state is coloured."""
    header = _state_header(check_count, serials)
    first_state = len(header) - check_count
    lines = []
    for node in node_rows:
        cells = _state_row(node, serials)
        marked = {i: f"st-{cells[i]}" for i in range(first_state, len(cells)) if cells[i] != "pass"}
        lines.append(_line(cells, widths, marked))
    return TextTable(_line(header, widths), _blocks([[line] for line in lines]), font_size(sum(widths) + GAP * 2))


def states_widths(node_rows: list[dict[str, Any]], check_count: int, *, serials: bool = True) -> list[int]:
    """Column widths over every node, so that the parts of a long table line up."""
    return _widths(_state_header(check_count, serials), (_state_row(node, serials) for node in node_rows))


GPU_HEADER = ["Node", "GPU", "UUID", "Serial"]


def _gpu_rows(node: dict[str, Any]) -> list[list[str]]:
    gpus = node.get("gpus") or []
    if not gpus:
        return [[node["hostname"], "—", "no GPU inventory in the cited evidence", ""]]
    return [[node["hostname"], str(g["index"]), g.get("uuid") or "—", g.get("serial") or "—"] for g in gpus]


def gpus_widths(node_rows: list[dict[str, Any]]) -> list[int]:
    return _widths(GPU_HEADER, (row for node in node_rows for row in _gpu_rows(node)))


def gpus_table(node_rows: list[dict[str, Any]], *, widths: list[int]) -> TextTable:
    """One line per GPU: node, index, UUID, serial; a node's GPUs are kept in one block."""
    per_node = [[_line(row, widths) for row in _gpu_rows(node)] for node in node_rows]
    return TextTable(_line(GPU_HEADER, widths), _blocks(per_node), font_size(sum(widths) + GAP * 2))


def _blocks(groups: list[list[SafeString]]) -> list[list[SafeString]]:
    """Groups of lines packed into blocks of at most LINES_PER_BLOCK lines; a group is not split
    unless it alone is longer than a block."""
    blocks: list[list[SafeString]] = [[]]
    for group in groups:
        if blocks[-1] and len(blocks[-1]) + len(group) > LINES_PER_BLOCK:
            blocks.append([])
        blocks[-1].extend(group)
        while len(blocks[-1]) > LINES_PER_BLOCK:
            blocks.append(blocks[-1][LINES_PER_BLOCK:])
            del blocks[-2][LINES_PER_BLOCK:]
    return [block for block in blocks if block]

"""The certificate's per-node tables: the state of each node per check as an HTML table, and each
node's GPUs (index, UUID, serial) as aligned monospace lines in blocks under a repeated header.

The state table fits the page at any number of nodes and checks: its columns are sized from their
widest cell (monospace, so a width in characters is a width on paper), and checks beyond what one
page width holds go to a further table (ColumnGroup), each repeating the node column; rows are never
wrapped onto a second line. Rows are written here as markup, not looped over in the template: the
state table is the largest thing in the document (12,500 nodes × 18 checks is 225,000 cells).

Why the GPU list, and the state table past TABLE_MAX_NODES nodes, are text: WeasyPrint lays out a
table cell by cell, about 0.43 ms a cell, and the GPU list has a line per GPU (100,000 at 12,500
nodes); preformatted lines are laid out as one text box each. Past that count the state table keeps
its columns, its split and one line per node, as aligned monospace lines. Only states other than
"pass" are marked up (coloured)."""

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
# A state table cell's padding each side (base.html table.nodes), and its 0.5 pt rule plus half a
# point of slack, so that rounding never pushes the widest cell onto a second line.
CELL_PAD_PT = 2.0
CELL_RULE_PT = 1.0
# Past this many nodes the state table is written as aligned text lines (same columns, same split):
# WeasyPrint lays out a table cell by cell, 0.43 ms a cell measured (14 ms a node at 18 checks, 28 s
# at this count), against about 1.3 ms a node as lines, which keeps 12,500 nodes within the five
# minutes an issue may take (bench/bench_certificate.py).
TABLE_MAX_NODES = 2000
# Check columns in one table at most: past a dozen a row is hard to follow across the page even
# where more would fit; the next checks go to the next table.
MAX_CHECK_COLUMNS = 12


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


def _state_lead(serials: bool) -> list[str]:
    return ["Node", *(["Serial"] if serials else []), "Rack/pos"]


def _state_row(node: dict[str, Any], serials: bool) -> list[str]:
    position = f"/{node['position']}" if node.get("position") not in (None, "") else ""
    rack = f"{node.get('rack') or ''}{position}" or "—"
    serial = [node.get("serial") or "—"] if serials else []
    return [node["hostname"], *serial, rack, *(s or "—" for s in node["states"])]


@dataclass(frozen=True)
class ColumnGroup:
    """One table of the state tables: the node's own columns (`lead`: the node, then serial and rack
    in the first table only), then the checks `first`..`last` (1-based, C1… as in the summary); each
    column's width in points at `font_pt`."""

    lead: tuple[int, ...]  # indices into a row of _state_row
    first: int
    last: int
    widths_pt: tuple[float, ...]
    font_pt: float
    chars: tuple[int, ...] = ()  # each column's width in characters
    lines: bool = False  # aligned text lines instead of a table (past TABLE_MAX_NODES nodes)

    @property
    def width_pt(self) -> float:
        return sum(self.widths_pt)

    def columns(self, lead_count: int) -> list[int]:
        """Indices into a row of _state_row, in the order shown."""
        return [*self.lead, *range(lead_count + self.first - 1, lead_count + self.last)]


def _cell_pt(chars: int, font_pt: float, lines: bool = False) -> float:
    """A column's width: its characters and a cell's padding and rule, or as text, GAP spaces."""
    if lines:
        return (chars + GAP) * MONO_ADVANCE_EM * font_pt
    return chars * MONO_ADVANCE_EM * font_pt + 2 * CELL_PAD_PT + CELL_RULE_PT


def _chars(node_rows: list[dict[str, Any]], check_count: int, serials: bool) -> list[int]:
    header = [*_state_lead(serials), *(f"C{i}" for i in range(1, check_count + 1))]
    return _widths(header, (_state_row(node, serials) for node in node_rows))


def state_groups(
    node_rows: list[dict[str, Any]], check_count: int, *, serials: bool = True, lines: bool = False
) -> list[ColumnGroup]:
    """The state table's column groups over every node (so that the parts of a long table line up):
    as many check columns per table as fit the page width, at most MAX_CHECK_COLUMNS. The font is
    FONT_PT unless the node's own columns and one check column do not fit at it: then the size at
    which they do, down to MIN_FONT_PT (past that a very long hostname wraps within its cell).
    `lines`: sized for aligned text lines (GAP spaces between columns) instead of table cells."""
    chars = _chars(node_rows, check_count, serials)
    lead_count = len(_state_lead(serials))
    lead, checks = chars[:lead_count], chars[lead_count:]
    widest = max(checks, default=0)
    gaps = GAP * (len(lead) + 1) if lines else 0
    units = (sum(lead) + widest + gaps) * MONO_ADVANCE_EM
    fixed = 0.0 if lines else (len(lead) + 1) * (2 * CELL_PAD_PT + CELL_RULE_PT)
    font = round(max(MIN_FONT_PT, min(FONT_PT, (LINE_WIDTH_PT - fixed) / max(units, 1e-9))), 2)
    groups: list[ColumnGroup] = []
    first = 1
    while first <= check_count or not groups:
        own = tuple(range(lead_count)) if not groups else (0,)
        widths = [_cell_pt(chars[i], font, lines) for i in own]
        last = first - 1
        while last < check_count and last - first + 1 < MAX_CHECK_COLUMNS:
            extra = _cell_pt(checks[last], font, lines)
            if last >= first and sum(widths) + extra > LINE_WIDTH_PT:
                break
            widths.append(extra)
            last += 1
        shown = (*(chars[i] for i in own), *checks[first - 1 : last])
        groups.append(ColumnGroup(own, first, last, tuple(round(w, 2) for w in widths), font, shown, lines))
        first = last + 1
    return groups


def state_rows(node_rows: list[dict[str, Any]], group: ColumnGroup, *, serials: bool = True) -> list[SafeString]:
    """The group's rows as <tr> markup: every cell escaped, a state other than "pass" coloured."""
    lead_count = len(_state_lead(serials))
    columns = group.columns(lead_count)
    out = []
    for node in node_rows:
        cells = _state_row(node, serials)
        parts = []
        for index in columns:
            cell = escape(cells[index])
            if index >= lead_count and cells[index] not in ("pass", "—"):
                parts.append(f'<td class="st-{cell}">{cell}</td>')
            else:
                parts.append(f"<td>{cell}</td>")
        out.append(mark_safe("<tr>" + "".join(parts) + "</tr>"))  # every cell and class is escaped above
    return out


def state_lines(node_rows: list[dict[str, Any]], group: ColumnGroup, *, serials: bool = True) -> TextTable:
    """The group's rows as aligned text lines (group.lines): one line per node, a state other than
    "pass" coloured, in blocks under a repeated header."""
    lead_count = len(_state_lead(serials))
    columns = group.columns(lead_count)
    widths = list(group.chars)
    out = []
    for node in node_rows:
        row = _state_row(node, serials)
        cells = [row[i] for i in columns]
        marked = {
            at: f"st-{cell}" for at, cell in enumerate(cells) if at >= len(group.lead) and cell not in ("pass", "—")
        }
        out.append([_line(cells, widths, marked)])
    return TextTable(_line(state_header(group, serials=serials), widths), _blocks(out), group.font_pt)


def state_header(group: ColumnGroup, *, serials: bool = True) -> list[str]:
    lead = _state_lead(serials)
    return [*(lead[i] for i in group.lead), *(f"C{i}" for i in range(group.first, group.last + 1))]


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

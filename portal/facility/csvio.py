"""The facility CSV: one file, one header, a `type` column (rack, pdu, feed, ups, loop) saying which
of the other columns a row uses. Reading (parse) is pure; export reads the database. The format is
documented in docs/operations/facility.md.

Credentials are never in it: an export leaves them out, and an import refuses credential columns
(a CSV of passwords outlives the upload: downloads folders, tickets, shell history); set them on the
facility page or in the admin.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass

from portal.facility import selectors
from portal.facility.models import breakers_text, number_text
from portal.inventory.models import Cluster
from portal.ordering import natural_key

COLUMNS: dict[str, tuple[str, ...]] = {
    "rack": ("name", "power_budget_kw", "cooling_budget_kw", "room", "row", "position"),
    "pdu": ("name", "rack", "feed", "phases", "voltage_v", "breaker_a", "endpoint_url", "verify_tls"),
    "feed": ("node", "pdu", "phase", "share"),
    "ups": ("name", "capacity_kw", "racks"),
    "loop": ("name", "fluid", "racks", "endpoint_url", "verify_tls"),
}
# Columns a row of the type must fill; the others keep an existing item's value when the header lacks
# them, and take the default when present but empty.
REQUIRED: dict[str, tuple[str, ...]] = {
    "rack": ("name", "power_budget_kw", "cooling_budget_kw"),
    "pdu": ("name", "rack", "breaker_a"),
    "feed": ("node", "pdu", "phase", "share"),
    "ups": ("name", "capacity_kw"),
    "loop": ("name",),
}
TYPES = tuple(COLUMNS)
HEADER: tuple[str, ...] = ("type", *dict.fromkeys(c for cols in COLUMNS.values() for c in cols))
# Refused with the reason, rather than as unknown columns.
CREDENTIAL_COLUMNS = frozenset({"username", "user", "password", "passwd", "credential", "credentials", "secret"})
# A facility of 1,250 nodes (two feeds each) with its racks and PDUs is ~100 KB; 5 MiB is 50x that.
MAX_CSV_BYTES = 5 * 1024 * 1024


class CsvError(ValueError):
    """A bad facility CSV: the message names the row (the header is row 1) and the field."""


@dataclass(frozen=True)
class CsvRow:
    """One data row: its number in the file (header = 1), its type, and the cells of its type's
    columns that the header has (stripped; '' when empty)."""

    number: int
    type: str
    cells: dict[str, str]

    @property
    def key(self) -> str:
        return self.cells.get("node" if self.type == "feed" else "name", "")

    def where(self) -> str:
        return f"row {self.number} ({self.type} {self.key})" if self.key else f"row {self.number} ({self.type})"

    def error(self, field: str, message: str) -> CsvError:
        return CsvError(f"{self.where()}, field {field}: {message}")


def _header(fieldnames: list[str] | None) -> list[str]:
    names = [(f or "").strip().lower() for f in fieldnames or []]
    if "type" not in names:
        raise CsvError(f"row 1: the header needs a 'type' column ({', '.join(TYPES)}); columns: {', '.join(HEADER)}")
    secret = sorted(set(names) & CREDENTIAL_COLUMNS)
    if secret:
        raise CsvError(
            f"row 1: column(s) {', '.join(secret)}: credentials are not imported from CSV (a file of passwords "
            "outlives the upload); set them on the facility page or in the admin"
        )
    unknown = sorted(set(names) - set(HEADER))
    if unknown:
        raise CsvError(f"row 1: unknown column(s) {', '.join(unknown)}; columns: {', '.join(HEADER)}")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise CsvError(f"row 1: column(s) {', '.join(twice)} appear twice")
    return names


def _row(number: int, header: list[str], values: list[str]) -> CsvRow | None:
    if len(values) > len(header):
        raise CsvError(f"row {number}: {len(values)} cells for {len(header)} columns")
    cells = {name: (value or "").strip() for name, value in zip(header, values, strict=False)}
    if not any(cells.values()):
        return None  # a blank line
    kind = cells.pop("type").lower()
    if kind not in COLUMNS:
        raise CsvError(f"row {number}, field type: {kind!r} is not one of {', '.join(TYPES)}")
    row = CsvRow(number, kind, {k: v for k, v in cells.items() if k in COLUMNS[kind]})
    for name, value in cells.items():
        if value and name not in COLUMNS[kind]:
            raise row.error(name, f"not a column of a {kind} row (leave it empty)")
    for name in REQUIRED[kind]:
        if not row.cells.get(name):
            raise row.error(name, "required" if name in header else "required, and the header has no such column")
    return row


def parse(text: str) -> list[CsvRow]:
    """The rows of a facility CSV, checked for shape (types, columns, required cells, duplicates)."""
    reader = csv.reader(io.StringIO(text))
    try:
        header = _header(next(reader, None))
        rows = [r for number, values in enumerate(reader, start=2) if (r := _row(number, header, values))]
    except csv.Error as exc:
        raise CsvError(f"row {reader.line_num}: not CSV ({exc})") from None
    if not rows:
        raise CsvError("the CSV has a header but no rows")
    seen: dict[tuple[str, ...], int] = {}
    for row in rows:
        key = (row.type, row.key, row.cells.get("pdu", ""), row.cells.get("phase", ""))
        if key in seen:
            raise CsvError(f"{row.where()}: the same {row.type} as row {seen[key]}")
        seen[key] = row.number
    return rows


def decode(data: bytes) -> str:
    """An uploaded file's text (UTF-8, with or without a byte-order mark)."""
    if len(data) > MAX_CSV_BYTES:
        raise CsvError(f"the file is {len(data)} bytes; a facility CSV may be {MAX_CSV_BYTES} at most")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise CsvError(f"the file is not UTF-8 text (byte {exc.start})") from None


def export_rows(*, cluster: Cluster) -> list[dict[str, str]]:
    """The cluster's facility as CSV rows: racks, PDUs, UPSes, loops, then explicit feeds (the
    defaults are computed, not stored). No credential, user name or password."""
    rows: list[dict[str, str]] = []
    for r in selectors.racks(cluster=cluster):
        rows.append({"type": "rack", "name": r.name, "power_budget_kw": number_text(r.power_budget_kw),
                     "cooling_budget_kw": number_text(r.cooling_budget_kw), "room": r.room, "row": r.row,
                     "position": str(r.position)})  # fmt: skip
    for p in selectors.pdus(cluster=cluster):
        rows.append({"type": "pdu", "name": p.name, "rack": p.rack.name, "feed": p.feed, "phases": str(p.phases),
                     "voltage_v": number_text(p.voltage_v), "breaker_a": breakers_text(p.breaker_a),
                     "endpoint_url": p.endpoint_url, "verify_tls": "yes" if p.verify_tls else "no"})  # fmt: skip
    for u in selectors.upses(cluster=cluster):
        rows.append({"type": "ups", "name": u.name, "capacity_kw": number_text(u.capacity_kw),
                     "racks": ";".join(selectors.rack_names(u))})  # fmt: skip
    for lp in selectors.loops(cluster=cluster):
        rows.append({"type": "loop", "name": lp.name, "fluid": lp.fluid, "racks": ";".join(selectors.rack_names(lp)),
                     "endpoint_url": lp.endpoint_url, "verify_tls": "yes" if lp.verify_tls else "no"})  # fmt: skip
    for f in sorted(selectors.explicit_feeds(cluster=cluster), key=lambda f: (natural_key(f.node), f.pdu)):
        rows.append(
            {"type": "feed", "node": f.node, "pdu": f.pdu, "phase": str(f.phase), "share": number_text(f.share)}
        )
    return rows


def export_csv(*, cluster: Cluster) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=HEADER, lineterminator="\r\n")
    writer.writeheader()
    writer.writerows(export_rows(cluster=cluster))
    return out.getvalue()

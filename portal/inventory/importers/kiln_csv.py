"""Kiln's own node CSV (docs/user-guide/command-line.md): a header row naming Node fields, `hostname`
required. A column present sets its field on every row (an empty cell clears it); a column
absent leaves the field as it is."""

from __future__ import annotations

import csv
import io

from portal.inventory.importers.records import NODE_FIELDS, FieldValue, ImportFormatError, NodeRecord

CSV_FIELDS = ("hostname", *NODE_FIELDS)
NUMBERS = ("ssh_port", "expected_gpus")


def parse(text: str) -> list[NodeRecord]:
    reader = csv.DictReader(io.StringIO(text))
    headers = [f.strip() for f in reader.fieldnames or []]
    if "hostname" not in headers:
        raise ImportFormatError(
            f"CSV needs a header row with a 'hostname' column; columns allowed: {', '.join(CSV_FIELDS)}"
        )
    unknown = sorted(set(headers) - set(CSV_FIELDS))
    if unknown:
        raise ImportFormatError(f"unknown CSV column(s): {', '.join(unknown)}; allowed: {', '.join(CSV_FIELDS)}")
    records = []
    for number, raw in enumerate(reader, start=2):
        row = {k.strip(): (v or "").strip() for k, v in raw.items() if k}
        hostname = row.pop("hostname", "")
        if not hostname:
            raise ImportFormatError(f"line {number}: empty hostname")
        fields: dict[str, FieldValue] = {}
        for key, value in row.items():
            if key in NUMBERS and value:
                try:
                    fields[key] = int(value)
                except ValueError:
                    raise ImportFormatError(f"line {number}: {key} {value!r} is not a whole number") from None
            else:
                fields[key] = None if key in NUMBERS else value
        records.append(NodeRecord(hostname=hostname, where=f"line {number}", fields=fields))
    if not records:
        raise ImportFormatError("CSV has no rows")
    return records

"""NetBox's device list export (Devices -> Export -> "Current view" or "All data (CSV)"): one row
per device, headed by the device table's column titles (netbox/dcim/tables/devices.py,
DeviceTable: 'Name', 'Status', 'Rack', 'Position', 'Serial number', 'IPv4 Address'...).

Mapping: Name -> hostname; Rack -> rack; Position ('Position (U)' in NetBox 3.x exports) ->
position; Serial number -> serial; IPv4 Address, else IP Address, else IPv6 Address (without the
prefix length) -> address. An empty cell leaves the node's field as it is. NetBox knows no GPU
count or switch group, so those fields are left as they are. Status is shown (and warned about
when not Active), never stored.
"""

from __future__ import annotations

import csv
import io

from portal.inventory.importers.records import FieldValue, ImportFormatError, NodeRecord

# Export column title -> Node field; the first address column with a value wins.
COLUMNS = {"Rack": "rack", "Position": "position", "Position (U)": "position", "Serial number": "serial"}
ADDRESS_COLUMNS = ("IPv4 Address", "IP Address", "IPv6 Address")
READ = {*COLUMNS, *ADDRESS_COLUMNS}
# NetBox's CSV_DELIMITERS (utilities/constants.py): comma, semicolon, tab.
DELIMITERS = (",", ";", "\t")


def _reader(text: str) -> csv.DictReader[str]:
    first = text.split("\n", 1)[0]
    for delimiter in DELIMITERS:
        header = next(csv.reader([first], delimiter=delimiter), [])
        if "Name" in (h.strip() for h in header):
            return csv.DictReader(io.StringIO(text), delimiter=delimiter)
    raise ImportFormatError(
        f"line 1: no 'Name' column, so not NetBox's device export (export the device list as CSV); "
        f"the header starts {first[:80]!r}"
    )


def _position(value: str) -> str:
    # The export formats the U position with floatformat: '12', or '12.5' for a half U.
    return value[:-2] if value.endswith(".0") else value


def parse(text: str) -> list[NodeRecord]:
    reader = _reader(text)
    headers = [h.strip() for h in reader.fieldnames or []]
    if not READ.intersection(headers):
        raise ImportFormatError(
            "line 1: none of the columns Kiln reads (Rack, Position, Serial number, IPv4 Address, IP Address) "
            "is present"
        )
    records = []
    for number, raw in enumerate(reader, start=2):
        if None in raw:
            raise ImportFormatError(f"line {number}: more cells than the header has columns")
        row = {(k or "").strip(): (v or "").strip() for k, v in raw.items()}
        name, status = row.get("Name", ""), row.get("Status", "")
        fields: dict[str, FieldValue] = {
            field: _position(row[column]) if field == "position" else row[column]
            for column, field in COLUMNS.items()
            if row.get(column)  # an empty cell says nothing: it leaves Kiln's value as it is
        }
        address = next((row[c] for c in ADDRESS_COLUMNS if row.get(c)), "")
        if address:
            fields["address"] = address.split("/", 1)[0]
        warnings: tuple[str, ...] = ()
        if status and status != "Active":
            warnings = (f"{name} is {status} in NetBox: check that it is meant to be tested",)
        records.append(
            NodeRecord(
                hostname=name,
                where=f"line {number}",
                fields=fields,
                state=status,
                warnings=warnings,
                skip_reason="" if name else "an unnamed device (NetBox allows them; Kiln needs a hostname)",
            )
        )
    return records

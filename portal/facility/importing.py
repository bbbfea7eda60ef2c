"""Import a facility CSV (csvio.py's format) into a cluster: all rows or none.

Items are matched by name within the cluster: a row updates the rack, PDU, UPS or loop of that name,
or creates it. Racks are applied first, then PDUs, UPSes and loops, then feeds, whatever the order of
the rows, so a PDU may name a rack added further down. The feed rows of a node replace that node's
explicit feeds. Nothing is deleted: an item the file does not name stays as it is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from portal.facility import csvio, services
from portal.facility.csvio import CsvError, CsvRow
from portal.facility.models import CoolingLoop, Pdu, Rack, Ups, breakers_parse
from portal.facility.services import FacilityError, FeedSpec
from portal.inventory.models import Cluster

_NAMES = {"rack": ("rack", "racks"), "pdu": ("PDU", "PDUs"), "ups": ("UPS", "UPSes"), "loop": ("loop", "loops")}
_TRUE, _FALSE = ("yes", "true", "1", "y", "on"), ("no", "false", "0", "n", "off")


@dataclass
class ImportReport:
    """What an import created and updated, per type (feeds: per node whose feeds it replaced)."""

    created: dict[str, list[str]] = field(default_factory=dict)
    updated: dict[str, list[str]] = field(default_factory=dict)
    feeds_of: list[str] = field(default_factory=list)  # nodes whose explicit feeds were replaced

    def note(self, kind: str, name: str, created: bool) -> None:
        (self.created if created else self.updated).setdefault(kind, []).append(name)

    def summary(self) -> str:
        parts = [f"{_count(len(v), k)} added" for k, v in self.created.items()]
        parts += [f"{_count(len(v), k)} updated" for k, v in self.updated.items()]
        if self.feeds_of:
            parts.append(f"feeds of {len(self.feeds_of)} node(s) replaced")
        return ", ".join(parts) or "nothing to import"


def _count(n: int, kind: str) -> str:
    one, many = _NAMES[kind]
    return f"{n} {one if n == 1 else many}"


def _number(row: CsvRow, name: str, convert: Callable[[str], Any] = float) -> Any:
    try:
        return convert(row.cells[name])
    except ValueError:
        what = "a whole number" if convert is int else "a number"
        raise row.error(name, f"{row.cells[name]!r} is not {what}") from None


def _bool(row: CsvRow, name: str) -> bool:
    value = row.cells[name].lower()
    if value in _TRUE or value == "":
        return True  # empty: the default, TLS verified
    if value in _FALSE:
        return False
    raise row.error(name, f"{row.cells[name]!r} is not yes or no")


def _set(row: CsvRow, item: Any, name: str, default: Any, convert: Callable[[CsvRow, str], Any] | None = None) -> None:
    """A column the header has: its value, or the default when the cell is empty."""
    if name not in row.cells:
        return
    if row.cells[name] == "":
        setattr(item, name, default)
    else:
        setattr(item, name, convert(row, name) if convert else row.cells[name])


def _saved(row: CsvRow, save: Callable[[], object]) -> None:
    try:
        save()
    except FacilityError as exc:
        raise CsvError(f"{row.where()}, {exc}") from None


class _Import:
    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.report = ImportReport()
        self.racks = {r.name: r for r in Rack.objects.filter(cluster=cluster)}

    def rack(self, row: CsvRow) -> None:
        rack = self.racks.get(row.key) or Rack(cluster=self.cluster, name=row.key)
        self.report.note("rack", row.key, rack.pk is None)
        _set(row, rack, "power_budget_kw", None, _number)
        _set(row, rack, "cooling_budget_kw", None, _number)
        for name in ("room", "row"):
            _set(row, rack, name, "")
        _set(row, rack, "position", 0, lambda r, n: _number(r, n, int))
        _saved(row, lambda: services.rack_save(rack=rack))
        self.racks[rack.name] = rack

    def _rack_list(self, row: CsvRow) -> list[Rack] | None:
        if "racks" not in row.cells:
            return None
        names = [n.strip() for n in row.cells["racks"].split(";") if n.strip()]
        missing = [n for n in names if n not in self.racks]
        if missing:
            raise row.error("racks", f"no rack {', '.join(missing)} in cluster {self.cluster.name} (add a rack row)")
        return [self.racks[n] for n in names]

    def pdu(self, row: CsvRow) -> None:
        pdu = Pdu.objects.filter(cluster=self.cluster, name=row.key).first() or Pdu(name=row.key)
        self.report.note("pdu", row.key, pdu.pk is None)
        rack = self.racks.get(row.cells["rack"])
        if rack is None:
            raise row.error("rack", f"no rack {row.cells['rack']!r} in cluster {self.cluster.name} (add a rack row)")
        pdu.rack, pdu.cluster = rack, self.cluster
        _set(row, pdu, "feed", "A", lambda r, n: r.cells[n].upper())
        _set(row, pdu, "phases", 3, lambda r, n: _number(r, n, int))
        _set(row, pdu, "voltage_v", 230.0, _number)
        try:
            pdu.breaker_a = breakers_parse(row.cells["breaker_a"], pdu.phases if pdu.phases in (1, 3) else 1)
        except ValidationError as exc:
            raise row.error("breaker_a", " ".join(exc.messages)) from None
        _set(row, pdu, "endpoint_url", "")
        _set(row, pdu, "verify_tls", True, _bool)
        _saved(row, lambda: services.pdu_save(pdu=pdu))

    def ups(self, row: CsvRow) -> None:
        ups = Ups.objects.filter(cluster=self.cluster, name=row.key).first() or Ups(cluster=self.cluster, name=row.key)
        self.report.note("ups", row.key, ups.pk is None)
        _set(row, ups, "capacity_kw", None, _number)
        racks = self._rack_list(row)
        current = list(ups.racks.all()) if ups.pk else []
        _saved(row, lambda: services.ups_save(ups=ups, racks=current if racks is None else racks))

    def loop(self, row: CsvRow) -> None:
        loop = CoolingLoop.objects.filter(cluster=self.cluster, name=row.key).first()
        loop = loop or CoolingLoop(cluster=self.cluster, name=row.key)
        self.report.note("loop", row.key, loop.pk is None)
        _set(row, loop, "fluid", "water", lambda r, n: r.cells[n].lower())
        _set(row, loop, "endpoint_url", "")
        _set(row, loop, "verify_tls", True, _bool)
        racks = self._rack_list(row)
        current = list(loop.racks.all()) if loop.pk else []
        _saved(row, lambda: services.loop_save(loop=loop, racks=current if racks is None else racks))

    def feeds(self, rows: list[CsvRow]) -> None:
        by_node: dict[str, list[CsvRow]] = {}
        for row in rows:
            by_node.setdefault(row.key, []).append(row)
        nodes = {n.hostname: n for n in self.cluster.nodes.filter(hostname__in=list(by_node))}
        for hostname, node_rows in by_node.items():
            node = nodes.get(hostname)
            if node is None:
                raise node_rows[0].error("node", f"no node {hostname!r} in cluster {self.cluster.name}")
            specs = [
                FeedSpec(r.cells["pdu"], _number(r, "phase", int), _number(r, "share")) for r in node_rows
            ]  # fmt: skip
            where = ", ".join(str(r.number) for r in node_rows)
            try:
                services.node_feeds_set(node=node, feeds=specs)
            except FacilityError as exc:
                raise CsvError(f"row(s) {where} (feeds of node {hostname}): {exc}") from None
            self.report.feeds_of.append(hostname)


@transaction.atomic
def facility_import_csv(*, cluster: Cluster, text: str) -> ImportReport:
    """Import a facility CSV into the cluster: every row, or nothing and a CsvError naming the row
    and the field."""
    rows = csvio.parse(text)
    run = _Import(cluster)
    for kind in ("rack", "pdu", "ups", "loop"):
        for row in rows:
            if row.type == kind:
                getattr(run, kind)(row)
    run.feeds([r for r in rows if r.type == "feed"])
    return run.report

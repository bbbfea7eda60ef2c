"""kiln_facility_import CLUSTER FILE: import a facility CSV (docs/operations/facility.md); all rows or none."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from portal.facility import csvio, importing
from portal.inventory.models import Cluster


class Command(BaseCommand):
    help = "Import a cluster's racks, PDUs, feeds, UPSes and cooling loops from a facility CSV (all rows or none)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("cluster")
        parser.add_argument("file", help="a facility CSV with a `type` column (rack, pdu, feed, ups, loop)")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            cluster = Cluster.objects.get(name=options["cluster"])
        except Cluster.DoesNotExist:
            raise CommandError(f"no cluster named {options['cluster']!r}") from None
        path = Path(options["file"])
        try:
            with path.open("rb") as handle:
                data = handle.read(csvio.MAX_CSV_BYTES + 1)
        except OSError as exc:
            raise CommandError(f"cannot read {path}: {exc.strerror}") from None
        try:
            report = importing.facility_import_csv(cluster=cluster, text=csvio.decode(data))
        except csvio.CsvError as exc:
            raise CommandError(f"{path}: {exc}; nothing was imported") from None
        self.stdout.write(f"{cluster.name}: {report.summary()}")

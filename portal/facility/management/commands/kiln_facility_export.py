"""kiln_facility_export CLUSTER: print the cluster's facility CSV (no credentials) to stdout."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from portal.facility import csvio
from portal.inventory.models import Cluster


class Command(BaseCommand):
    help = "Print a cluster's facility model as CSV (the import format; credentials are never exported)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("cluster")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            cluster = Cluster.objects.get(name=options["cluster"])
        except Cluster.DoesNotExist:
            raise CommandError(f"no cluster named {options['cluster']!r}") from None
        self.stdout.write(csvio.export_csv(cluster=cluster), ending="")

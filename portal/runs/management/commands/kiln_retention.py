"""kiln_retention [--dry-run] [--json]

Applies the retention policy once (portal/runs/retention.py; docs/operations/retention.md), as the daily task
`kiln.retention` does: removes old raw output, thins old full-resolution telemetry, keeps the
measurement partitions ahead (PostgreSQL). Prints its progress, then what it removed; with
--dry-run, what it would remove, changing nothing.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from portal import dbroles
from portal.runs.retention import retention_apply


class Command(BaseCommand):
    help = "Apply the retention policy: old raw output and full-resolution telemetry go; certified runs stay."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--dry-run", action="store_true", help="count what would go; change nothing")
        parser.add_argument("--json", action="store_true", help="print the report as one JSON object")

    def handle(self, *args: Any, **options: Any) -> None:
        dbroles.owner_become()  # with two roles, as the owner: dropping a month's partition is DDL
        quiet = options["json"]
        report = retention_apply(
            dry_run=options["dry_run"], progress=None if quiet else (lambda line: self.stdout.write(f"... {line}"))
        )
        if quiet:
            self.stdout.write(json.dumps(report.as_dict()))
            return
        self.stdout.write("retention, dry run (nothing changed):" if report.dry_run else "retention:")
        for line in report.lines():
            self.stdout.write(f"  {line}")

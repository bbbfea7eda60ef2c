"""kiln_cancel RUN_ID [--reason TEXT] [--json]

Cancels every unfinished check of a run, queued or running (services.run_cancel): running checks
are `cancelled` at once, and the workers holding them stop their process groups on the nodes at
their next heartbeat. Exit 0 when something was cancelled, 1 when the run had already finished.
"""

from __future__ import annotations

import getpass
import json
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from portal.runs import services
from portal.runs.models import Run


class Command(BaseCommand):
    help = "Cancel a run: queued checks never start, running ones are stopped on their nodes."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run_id", type=int)
        parser.add_argument("--reason", default="", help="why (default: 'cancelled by USER from the command line')")
        parser.add_argument("--json", action="store_true", help='print {"run": ID, "status": S, "cancelled": N}')

    def handle(self, *args: Any, **options: Any) -> None:
        run = Run.objects.filter(pk=options["run_id"]).first()
        if run is None:
            raise CommandError(f"no run #{options['run_id']}")
        finished = not run.is_active
        reason = options["reason"].strip() or f"cancelled by {_user()} from the command line"
        count = 0 if finished else services.run_cancel(run=run, reason=reason)
        run.refresh_from_db()
        if options["json"]:
            self.stdout.write(json.dumps({"run": run.pk, "status": run.status, "cancelled": count}))
        elif finished:
            self.stdout.write(f"run {run.pk} had already finished: {run.status}")
        else:
            self.stdout.write(
                f"run {run.pk}: {count} check(s) cancelled; running ones are being stopped on their nodes"
            )
        if finished:
            sys.exit(1)


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (a container's numeric uid)
        return "an unknown user"

"""kiln_run CLUSTER PLAN [--nodes NODESET] [--wait] [--json]

Without --wait it prints the run's id at once (with --json: `{"run": ID, "status": "queued"}`), so
a script can follow or cancel (`kiln_cancel ID`) what it started. With --wait (or --inline) it
prints the verdicts when the run ends, and exits 0 when everything passed (warnings included), 1
when anything failed (a proven fault wins over "could not tell": the run's table and reason still
count what errored), 2 when the run was cancelled or something errored and nothing failed.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection
from django.db.models import Count, Q

from portal.catalog.models import TestPlan
from portal.inventory.models import Cluster
from portal.runs import selectors, services
from portal.runs.finalize import RUN_CLOSED_CHANNEL
from portal.runs.models import ACTIVE_STATUSES, Run, Status

# Seconds between two looks at a run `--wait` follows (one small query each, two with progress
# shown): its end is noticed within this. 0.5 s cost a quick run a quarter of a second on average
# (bench/bench_fanout.py's "notice" phase); 0.2 s is 5 queries a second. On PostgreSQL the command
# also listens for the run's close (portal/runs/finalize.py RUN_CLOSED_CHANNEL) and looks at once.
WAIT_POLL_S = 0.2


class Command(BaseCommand):
    help = "Start a run of a plan on a cluster; optionally wait for it and print the verdicts."
    # As `--skip-checks`: the deployment checks (every URL and view imported to check them, the
    # secret key the web signs sessions with) are the web's and the worker's concern, and cost this
    # command 0.4 s of CPU at each start; it needs only the database and the broker.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("cluster")
        parser.add_argument("plan", help="plan slug, e.g. quick or acceptance")
        parser.add_argument("--nodes", default="", help="node set, e.g. 'gpu[01-04]' (default: all)")
        parser.add_argument("--wait", action="store_true", help="wait until the run finishes")
        parser.add_argument(
            "--json",
            action="store_true",
            help='print JSON: {"run": ID, "status": "queued"} at once, or with --wait the verdicts',
        )
        parser.add_argument("--timeout", type=float, default=0, help="give up waiting after N seconds")
        parser.add_argument(
            "--inline", action="store_true", help="run the checks in this process instead of on Celery workers"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            cluster = Cluster.objects.get(name=options["cluster"])
        except Cluster.DoesNotExist:
            raise CommandError(f"no cluster named {options['cluster']!r}") from None
        try:
            plan = TestPlan.objects.get(slug=options["plan"])
        except TestPlan.DoesNotExist:
            known = ", ".join(TestPlan.objects.values_list("slug", flat=True))
            raise CommandError(f"no plan {options['plan']!r}; known plans: {known}") from None
        try:
            nodes = services.nodes_select(cluster=cluster, node_set=options["nodes"])
            if options["inline"]:
                run = self._run_inline(cluster=cluster, plan=plan, nodes=nodes)
            else:
                run = services.run_start(cluster=cluster, plan=plan, nodes=nodes)
        except services.RunStartError as exc:
            raise CommandError(str(exc)) from None
        if not (options["wait"] or options["inline"]):
            if options["json"]:
                self.stdout.write(json.dumps({"run": run.pk, "status": run.status}))
            else:
                self.stdout.write(f"run {run.pk} queued on {run.node_set}")
            return
        run = self._wait(run, timeout=options["timeout"], quiet=options["json"])
        if options["json"]:
            for piece in selectors.run_json_text(run=run):  # streamed: a 1,000-node run is large
                self.stdout.write(piece, ending="")
            self.stdout.write("")
        else:
            self._print_table(run)
        sys.exit(exit_code(run))

    def _run_inline(self, *, cluster: Cluster, plan: TestPlan, nodes: list) -> Run:
        from django.db import transaction

        from portal.execution.groups import execute_run_inline

        with transaction.atomic():
            run = services.run_start(cluster=cluster, plan=plan, nodes=nodes, enqueue=False)
        # SQLite allows one writer at a time: threads would only queue on its lock.
        workers = 1 if connection.vendor == "sqlite" else 32
        execute_run_inline(run_id=run.pk, node_ids=[n.pk for n in nodes], max_workers=workers)
        return run

    def _wait(self, run: Run, *, timeout: float, quiet: bool) -> Run:
        """Look at the run every WAIT_POLL_S until it ends: its status (one query), and while
        progress is shown, its checks done (one more)."""
        started = time.monotonic()
        last = None
        listener = _closes_listener()
        while True:
            status = Run.objects.filter(pk=run.pk).values_list("status", flat=True).get()
            if not quiet:
                counts = run.results.aggregate(
                    total=Count("id"), active=Count("id", filter=Q(status__in=ACTIVE_STATUSES))
                )
                done = (counts["total"] - counts["active"], counts["total"])
                if done != last:
                    self.stderr.write(f"run {run.pk}: {done[0]}/{done[1]} checks done")
                    last = done
            if status not in ACTIVE_STATUSES:
                run.refresh_from_db()
                return run
            if timeout and time.monotonic() - started > timeout:
                raise CommandError(f"run {run.pk} still {status} after {timeout:g}s (is a worker running?)")
            if listener is None:
                time.sleep(WAIT_POLL_S)
            else:
                _pause_until_a_close(listener)

    def _print_table(self, run: Run) -> None:
        for node, check, status, reason in selectors.run_table_rows(run=run):
            self.stdout.write(f"{node:<20} {check:<16} {status:<8} {reason}")
        self.stdout.write(f"run {run.pk}: {run.status} ({run.reason})")


def _closes_listener() -> Any:
    """This command's database connection listening for closed runs (PostgreSQL), else None. The
    LISTEN comes before the first look, so a run closed in between is seen by that look."""
    if connection.vendor != "postgresql" or connection.in_atomic_block:
        return None  # inside a transaction (a test's) a LISTEN would only start at its commit
    from psycopg import sql

    connection.ensure_connection()
    listener = connection.connection
    listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(RUN_CLOSED_CHANNEL)))
    return listener


def _pause_until_a_close(listener: Any) -> None:
    """Up to WAIT_POLL_S, less when some run closes (whichever: the next look says if it was ours)."""
    for _ in listener.notifies(timeout=WAIT_POLL_S, stop_after=1):
        pass


def exit_code(run: Run) -> int:
    statuses = set(run.results.order_by().values_list("status", flat=True).distinct())
    if Status.CANCELLED in statuses or run.status == Status.CANCELLED:
        return 2  # stopped before the end: not a finished judgement either way
    if Status.FAIL in statuses:
        return 1
    if Status.ERROR in statuses:
        return 2
    return 0

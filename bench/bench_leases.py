"""What liveness costs the database, against the obvious peer measured in the same run.

    python bench/bench_leases.py [--nodes 64] [--checks 10] [--repeat 30]

A worker holding --nodes node tasks of --checks checks each (64 x 10: a 64-node sweep on one
threads-pool worker):
  - one heartbeat per worker process (portal/runs/leases.py: one UPDATE renewing every held lease,
    one SELECT reading back which were closed) against the peer, one heartbeat per task (the same
    two queries per node task): wall ms per beat and queries per beat;
  - a check's liveness writes (command started, process group set and cleared) queued to the
    keeper's single connection, against the same UPDATE made directly in the task's own thread:
    the wait of the synchronous one (command started), median and p95; and the same check starting
    on every node at once (its marks written in one UPDATE) against one UPDATE per node.
Seeds a throw-away database (SQLite in a temporary folder, or with DATABASE_URL a `kiln_bench_<pid>`
database on that server, dropped at the end), like bench_pages.py.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from portal.runs.models import CheckResult  # imported for real once Django is set up

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.bench_pages import setup_django  # noqa: E402  (after the path is set; same throw-away database)


def seed(nodes: int, checks: int) -> list[list[CheckResult]]:
    """One run, `nodes` nodes with `checks` running results each; returns each node's results."""
    from django.utils import timezone

    from portal.inventory.models import Cluster, Node
    from portal.runs import leases
    from portal.runs.models import CheckResult, Run

    cluster = Cluster.objects.create(name="bench", transport="local")
    node_rows = Node.objects.bulk_create(Node(cluster=cluster, hostname=f"gpu{i:03d}") for i in range(nodes))
    run = Run.objects.create(cluster=cluster, plan_snapshot={"items": []}, status="running")
    now = timezone.now()
    CheckResult.objects.bulk_create(
        CheckResult(
            run=run,
            node=node,
            item_key=f"check-{c}",
            kind="ecc_health",
            position=c,
            status="running",
            claimed_by=f"task-{node.pk}",
            started_at=now,
            **leases.claim_fields(now),
        )
        for node in node_rows
        for c in range(checks)
    )
    return [list(CheckResult.objects.filter(node=node).order_by("position")) for node in node_rows]


def timed(fn: Callable[[], object], repeat: int) -> list[float]:
    fn()  # warm-up
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--checks", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    teardown, described = setup_django()
    try:
        return run(args, described)
    finally:
        from django.db import connection

        connection.close()
        teardown()


def run(args: argparse.Namespace, described: str) -> int:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    from portal.runs import leases
    from portal.runs.models import CheckResult, Status

    tasks = seed(args.nodes, args.checks)
    print(f"database: {described}; {args.nodes} node tasks x {args.checks} checks held by one worker process")

    keeper = leases.LeaseKeeper()  # beats driven by hand here, on this thread (no keeper thread)
    for results in tasks:
        holding = leases.Holding(keeper, claim=str(results[0].claimed_by), results=results, label="bench")
        keeper._holdings[id(holding)] = holding

    def per_task() -> None:
        for results in tasks:
            ids = [r.pk for r in results]
            now = timezone.now()
            CheckResult.objects.filter(pk__in=ids, status=Status.RUNNING).update(
                heartbeat_at=now, lease_expires_at=leases.lease_expiry(now)
            )
            list(CheckResult.objects.filter(pk__in=ids).exclude(status=Status.RUNNING).values_list("pk", "status"))

    rows = []
    for name, fn in (("one heartbeat per process (Kiln)", keeper.beat), ("one heartbeat per task (peer)", per_task)):
        with CaptureQueriesContext(connection) as queries:
            fn()
        samples = timed(fn, args.repeat)
        rows.append((name, statistics.median(samples), len(queries)))
    print(f"\n{'renewing every lease once':<36} {'median ms':>10} {'queries':>8}")
    for name, ms, count in rows:
        print(f"{name:<36} {ms:>10.2f} {count:>8}")
    ratio = rows[0][1] / rows[1][1]
    print(f"heartbeat: per process {rows[0][1]:.2f} ms, per task {rows[1][1]:.2f} ms, ratio {ratio:.2f}")

    one = tasks[0][0]
    live = leases.LeaseKeeper()  # with its thread and its own connection, as in a worker holding a task
    holding = live.hold(claim="bench", results=tasks[0], label="bench")
    now = timezone.now()
    CheckResult.objects.filter(pk=one.pk).update(command_started_at=None)

    def queued() -> None:
        live.mark_started(one.pk)

    def direct() -> None:
        CheckResult.objects.filter(pk=one.pk, command_started_at__isnull=True).update(command_started_at=now)

    waits = timed(queued, args.repeat * 10)
    own = timed(direct, args.repeat * 10)
    live.release(holding)
    print(f"\n{'one liveness write':<36} {'median ms':>10} {'p95 ms':>8}")
    for name, samples in (("queued to the keeper, waited (Kiln)", waits), ("direct, in the task's thread (peer)", own)):
        p95 = statistics.quantiles(samples, n=20)[-1]
        print(f"{name:<36} {statistics.median(samples):>10.3f} {p95:>8.3f}")
    print(
        f"per check: 1 synchronous write (command started) + 2 queued per command (process group set,"
        f" cleared); write: keeper {statistics.median(waits):.3f} ms, direct {statistics.median(own):.3f} ms,"
        f" ratio {statistics.median(waits) / statistics.median(own):.2f}"
    )

    # A burst: the same check starting on every node at once (64 threads), each waiting for its mark.
    firsts = [results[0].pk for results in tasks]
    live = leases.LeaseKeeper()
    holding = live.hold(claim="bench", results=tasks[0], label="bench")

    def burst() -> None:
        CheckResult.objects.filter(pk__in=firsts).update(command_started_at=None)
        threads = [threading.Thread(target=live.mark_started, args=(pk,)) for pk in firsts]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def one_by_one() -> None:
        CheckResult.objects.filter(pk__in=firsts).update(command_started_at=None)
        for pk in firsts:
            CheckResult.objects.filter(pk=pk, command_started_at__isnull=True).update(command_started_at=timezone.now())

    together = statistics.median(timed(burst, args.repeat))
    apart = statistics.median(timed(one_by_one, args.repeat))
    live.release(holding)
    print(
        f"{len(firsts)} checks starting at once: marks written together {together:.2f} ms (incl. 64 threads),"
        f" one UPDATE each {apart:.2f} ms, ratio {together / apart:.2f}"
    )
    time.sleep(0.2)  # the keeper closes its connection once idle, before the database is dropped
    return 0


if __name__ == "__main__":
    sys.exit(main())

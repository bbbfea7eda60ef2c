"""Time and query count of closing a run (run_finalize) at 1,250 nodes × 7 checks, against a 16-node peer.

    python bench/bench_finalize.py [--nodes 1250] [--peer 16] [--repeat 5]

Seeds a throw-away database like bench/bench_pages.py (SQLite in a temporary folder, or with
DATABASE_URL a `kiln_bench_<pid>` database on that server). Each cluster gets a run of the `quick`
plan (7 checks) whose results are all in and the run still `running`: one node on an odd driver (the
consensus fails it), one slow on busbw (a fleet outlier), the rest alike, with the measurements the
cross-node checks read. Each repeat closes the run once, then puts it back (not timed).

Printed per size (medians): wall time of run_finalize without the node-health evaluation that
its commit triggers; of that, the cross-node pass (consensus and outliers, outside the run's row
lock) and the rest (the aggregates and the close, the latter under the lock); its queries at the
first close and at a later one; then the health evaluation on commit on its own, with its queries
(the first close makes every node's health row: on SQLite, batches of 999 parameters). Once,
closing took 8,750 queries and 6.7 s at 1,250 nodes (one COUNT per result inside the lock).
Target: a query count that does not grow with the node count.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from bench_pages import setup_django  # noqa: E402  (after the path is set)


def seed(name: str, size: int) -> Any:
    """A cluster of `size` nodes and a finished-but-open run of the quick plan on it."""
    from portal.catalog.models import TestPlan
    from portal.inventory.models import Cluster, Node
    from portal.runs import services
    from portal.runs.models import CheckResult, Measurement, Run

    cluster = Cluster.objects.create(name=name, profile="H100-SXM-8", transport="local")
    Node.objects.bulk_create(Node(cluster=cluster, hostname=f"{name}-gpu{i:04d}") for i in range(1, size + 1))
    run = services.run_start(cluster=cluster, plan=TestPlan.objects.get(slug="quick"), enqueue=False)
    Run.objects.filter(pk=run.pk).update(status="running")
    CheckResult.objects.filter(run=run).update(status="pass", reason="within spec")
    rows = []
    for index, (pk, kind) in enumerate(CheckResult.objects.filter(run=run).order_by("id").values_list("id", "kind")):
        node = index // 7
        if kind == "gpu_inventory":
            driver = "535.104.05" if node == 1 else "550.54.15"
            rows += [
                Measurement(result_id=pk, name="driver_version", text=driver),
                Measurement(result_id=pk, name="gpu_count", value=8),
            ]
        elif kind == "nccl_allreduce":
            rows.append(Measurement(result_id=pk, name="busbw_peak", value=400.0 if node == 2 else 470.0 + node % 3))
    Measurement.objects.bulk_create(rows, batch_size=2000)
    return run


def reopen(run: Any) -> None:
    """Put the run back as it was before it closed (consensus, outlier and log undone)."""
    from portal.runs.models import CheckResult, Measurement, Run, RunEvent

    Measurement.objects.filter(result__run=run, name="outlier_z").delete()
    RunEvent.objects.filter(run=run).delete()
    CheckResult.objects.filter(run=run).update(status="pass", reason="within spec")
    Run.objects.filter(pk=run.pk).update(status="running", finished_at=None, reason="")


@dataclass
class Spent:
    """Wall milliseconds and queries of the calls of one wrapped function."""

    ms: float = 0.0
    queries: int = 0


def timing(module: Any, name: str, into: Spent) -> Any:
    """Wrap module.name so each call adds its wall time and its queries (counted while a
    CaptureQueriesContext is open) to `into`; returns the original."""
    from django.db import connection

    real = getattr(module, name)

    def timed(*args: Any, **kwargs: Any) -> Any:
        t0, q0 = time.perf_counter(), len(connection.queries_log)
        try:
            return real(*args, **kwargs)
        finally:
            into.ms += (time.perf_counter() - t0) * 1000
            into.queries += len(connection.queries_log) - q0

    setattr(module, name, timed)
    return real


@dataclass
class Closing:
    """Medians over the repeats (the first close is a warm-up: its health moves every node from
    unknown), and the query counts of the first close and of the last."""

    finalise_ms: float
    cross_ms: float
    health_ms: float
    queries: tuple[int, int]  # run_finalize less the health evaluation: first close, later close
    health_queries: tuple[int, int]
    reason: str


def measure(run: Any, repeat: int) -> Closing:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from portal.health import services as health
    from portal.runs import finalize, services

    cross, judged = Spent(), Spent()
    real_cross = timing(finalize, "cross_node_apply", cross)
    real_health = timing(health, "health_evaluate_run", judged)
    try:
        walls, crosses, healths, counts, health_counts = [], [], [], [], []
        reason = ""
        for _ in range(repeat + 1):
            reopen(run)
            cross.ms = cross.queries = judged.ms = judged.queries = 0
            with CaptureQueriesContext(connection) as captured:
                t0 = time.perf_counter()
                closed = services.run_finalize(run_id=run.pk)  # health runs on commit, inside this
                wall = (time.perf_counter() - t0) * 1000
            if closed is None:
                raise SystemExit(f"run {run.pk} vanished while it was closed")
            reason = closed.reason
            walls.append(wall - judged.ms)
            crosses.append(cross.ms)
            healths.append(judged.ms)
            counts.append(len(captured) - judged.queries)
            health_counts.append(judged.queries)
        median = statistics.median
        return Closing(
            median(walls[1:]),
            median(crosses[1:]),
            median(healths[1:]),
            (counts[0], counts[-1]),
            (health_counts[0], health_counts[-1]),
            reason,
        )
    finally:
        finalize.cross_node_apply = real_cross
        health.health_evaluate_run = real_health


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1250)
    parser.add_argument("--peer", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    teardown, described = setup_django()
    try:
        t0 = time.perf_counter()
        big, peer = seed("big", args.nodes), seed("peer", args.peer)
        print(
            f"database: {described}; seeded {args.nodes} + {args.peer} nodes × 7 checks "
            f"in {time.perf_counter() - t0:.1f} s"
        )
        rows = [(f"{n} nodes", measure(run, args.repeat)) for n, run in ((args.nodes, big), (args.peer, peer))]
        print(
            f"{'run':<11} | {'finalise ms':>11} | {'cross-node ms':>13} | {'rest ms':>7} | {'queries':>9} "
            f"| {'health ms':>9} | {'queries':>9} | reason"
        )
        for label, c in rows:
            print(
                f"{label:<11} | {c.finalise_ms:>11.1f} | {c.cross_ms:>13.1f} | {c.finalise_ms - c.cross_ms:>7.1f} "
                f"| {c.queries[0]:>4} {c.queries[1]:>4} | {c.health_ms:>9.1f} "
                f"| {c.health_queries[0]:>4} {c.health_queries[1]:>4} | {c.reason}"
            )
        (_, big_run), (_, peer_run) = rows
        constant = big_run.queries == peer_run.queries
        verdict = "constant" if constant else f"GROW ({peer_run.queries} -> {big_run.queries})"
        print(
            f"finalise {args.nodes} nodes: {big_run.finalise_ms:.1f} ms, peer {args.peer} nodes "
            f"{peer_run.finalise_ms:.1f} ms, ratio {big_run.finalise_ms / peer_run.finalise_ms:.1f}; queries {verdict}"
        )
        return 0 if constant else 1
    finally:
        teardown()


if __name__ == "__main__":
    raise SystemExit(main())

"""Every page and export at scale, against a 16-node peer.

    python bench/bench_pages.py [--nodes 1250] [--peer 16] [--runs 30] [--repeat 5] [--reuse] [--only TEXT,...]
    python bench/bench_pages.py --live [--repeat 7] [--nodes 1250] [--peer 16]

Without --live: the history bench (bench/bench_history.py, its docstring says how it seeds): a
month of runs shaped like real ones at 1,250 nodes, then every page, fragment and export a user
opens for the latest run (run page, problems only, grid fragment, triage CSV and RMA text, compare,
fleet distribution, rack heatmap, node and cluster pages, results and measurements exports with
their first byte, /metrics, the health page), closing a run and what the worker does after it;
each line against its target and the peer.

With --live: an active run, seeded here rather than from history, since the history seeder's runs
are all finished. Seeds its own database: a fresh SQLite file in a temporary folder, or, with
DATABASE_URL, a throw-away `test_<name>` database on that server (created and dropped like the test
runner does). Each cluster gets one finished run and one active run of the same 8-check plan, with a
handful of measurements per result (per-GPU ones for burn-in and temperature). Pages are fetched with
Django's test Client as a logged-in viewer: server time only (no network, no browser), the median of
`--repeat` requests after one warm-up (wall time, and this process's CPU time, which a busy shared
machine inflates less; with PostgreSQL the database's own time is in wall only), and the query count
of one request: the run page (full HTML), the grid fragment htmx fetches (HX-Request), the live poll
of an active run (the summary plus the rows changed in the last seconds), and a node page.
Target: under 300 ms and a query count that does not grow with the node count.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

CHECKS = [
    "gpu-inventory",
    "sw-consistency",
    "gpu-links",
    "ib-ports",
    "nccl-allreduce",
    "burn-in",
    "dlc-temperature",
    "ecc-health",
]
TARGET_MS = 300.0
# Cumulative odds of each status in a finished result: 1 % fail, 0.5 % error, 1.5 % warn.
STATUS_ODDS = (("fail", 0.01), ("error", 0.015), ("warn", 0.03), ("pass", 1.0))


def setup_django() -> tuple[Callable[[], None], str]:
    """Configure Django on a throw-away database; returns its teardown and a description."""
    if not os.environ.get("DATABASE_URL"):
        os.environ["KILN_DATA_DIR"] = tempfile.mkdtemp(prefix="kiln-bench-")
    from portal.datadir import init_data_dir

    # What kiln_init does: a throw-away folder has no secret key yet, and sessions need one.
    init_data_dir(Path(os.environ.get("KILN_DATA_DIR") or REPO / "data"))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    import django
    from django.conf import settings

    django.setup()
    from django.db import connection
    from django.test.utils import setup_test_environment

    setup_test_environment()  # ALLOWED_HOSTS gets "testserver"
    db = settings.DATABASES["default"]
    if db["ENGINE"].endswith("sqlite3"):
        db.setdefault("TEST", {})["NAME"] = str(Path(os.environ["KILN_DATA_DIR"]) / "bench.sqlite3")
    else:  # never test_<name>: a test session on the same server may be using it
        db.setdefault("TEST", {})["NAME"] = f"kiln_bench_{os.getpid()}"
    old_name = db["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    described = f"{connection.vendor} {connection.settings_dict['NAME']}"

    def teardown() -> None:
        connection.creation.destroy_test_db(old_name, verbosity=0)

    return teardown, described


REASONS = {
    "pass": "all within spec",
    "warn": "GPU 3: 81 C under load, 6 C above its siblings",
    "fail": "GPU 5: 3 uncorrectable ECC errors <since boot>",
    "error": "unreachable: connection timed out after 10 s",
}


def seed_cluster(name: str, size: int, *, rng: random.Random) -> dict[str, Any]:
    """A cluster of `size` nodes with a finished run and an active run of the 8-check plan."""
    from django.utils import timezone

    from portal.inventory.models import Cluster, Node
    from portal.runs import services
    from portal.runs.models import CheckResult

    plan = _bench_plan()
    cluster = Cluster.objects.create(name=name, profile="H100-SXM-8", transport="local")
    Node.objects.bulk_create(
        Node(cluster=cluster, hostname=f"{name}-gpu{i:04d}", rack=f"R{i // 32:02d}", position=i % 32)
        for i in range(1, size + 1)
    )
    nodes = list(cluster.nodes.order_by("hostname"))
    snapshot = services.plan_snapshot_build(plan=plan, cluster=cluster)
    now = timezone.now()
    runs = {
        label: _seed_run(
            cluster, plan, snapshot, nodes, started=now - timedelta(minutes=minutes), active=active, rng=rng
        )
        for label, active, minutes in (("finished", False, 90), ("active", True, 30))
    }
    return {"cluster": cluster, "runs": runs, "node": nodes[len(nodes) // 3], "results": CheckResult.objects.count()}


def _bench_plan() -> Any:
    """The plan of the 8 acceptance checks, made once."""
    from portal.catalog.models import CheckDefinition, TestPlan, TestPlanItem

    plan, created = TestPlan.objects.get_or_create(slug="bench8", defaults={"name": "Bench (8 checks)"})
    if created:
        for order, slug in enumerate(CHECKS):
            TestPlanItem.objects.create(plan=plan, check_definition=CheckDefinition.objects.get(slug=slug), order=order)
    return plan


def _seed_run(
    cluster: Any, plan: Any, snapshot: dict, nodes: list[Any], *, started: Any, active: bool, rng: random.Random
) -> Any:
    """One run: finished (every result judged) or active (half the nodes still at their first checks)."""
    from portal.runs.models import CheckResult, Measurement, Run

    size = len(nodes)
    run = Run.objects.create(
        cluster=cluster,
        plan=plan,
        plan_snapshot=snapshot,
        node_set=f"{cluster.name}-gpu[0001-{size:04d}]",
        status="running" if active else "fail",
        started_at=started,
        finished_at=None if active else started + timedelta(minutes=40),
    )
    results = []
    for node_index, node in enumerate(nodes):
        for item in snapshot["items"]:
            result = CheckResult(run=run, node=node, item_key=item["key"], kind=item["kind"])
            result.position = item["position"]
            results.append(result)
            if active and node_index >= size // 2:
                _pending(result, item["position"] == 0, started)
            else:
                _judged(result, started + timedelta(seconds=len(results) * 0.1), rng)
    CheckResult.objects.bulk_create(results, batch_size=2000)
    if not results[0].pk:  # backends that return no ids from bulk_create
        results = list(CheckResult.objects.filter(run=run).order_by("id"))
    measurements = [m for r in results if r.status not in ("queued", "running") for m in _measurements(r, rng)]
    Measurement.objects.bulk_create(measurements, batch_size=2000)
    return run


def _pending(result: Any, first: bool, started: Any) -> None:
    """A node's first check running, the others queued behind it."""
    result.status = "running" if first else "queued"
    result.started_at = started if first else None


def _judged(result: Any, started: Any, rng: random.Random) -> None:
    """A finished result with a status drawn by STATUS_ODDS."""
    roll = rng.random()
    result.status = next(s for s, p in STATUS_ODDS if roll < p)
    result.reason = REASONS[result.status]
    result.started_at = started
    result.duration_s = 2.0 + 30 * (result.kind == "burn_in") + rng.random()
    result.finished_at = result.started_at + timedelta(seconds=result.duration_s)


def _measurements(result: Any, rng: random.Random) -> list[Any]:
    """8 per-GPU values for burn-in and DLC (the charted metrics), 4 plain values otherwise."""
    from portal.runs.models import Measurement

    if result.kind not in ("burn_in", "dlc_temperature"):
        return [Measurement(result=result, name=f"m{m}", value=rng.random(), ok=True) for m in range(4)]
    metric = "gflops" if result.kind == "burn_in" else "temp_gpu_steady"
    return [
        Measurement(
            result=result,
            name=metric,
            value=rng.gauss(110_000, 800) if metric == "gflops" else rng.gauss(70, 1.5),
            gpu=gpu,
            labels={"phase": "load"},
        )
        for gpu in range(8)
    ]


def node_page_url(seeded: dict[str, Any]) -> tuple[str, str]:
    from django.urls import Resolver404, resolve, reverse

    cluster, node = seeded["cluster"], seeded["node"]
    url = f"/clusters/{cluster.name}/nodes/{node.hostname}/"
    try:
        resolve(url)
        return "node page", url
    except Resolver404:
        return "cluster page (no node page yet)", reverse("inventory:cluster_detail", args=[cluster.name])


def measure(
    client: Any, url: str, *, repeat: int, headers: dict[str, str] | None = None
) -> tuple[float, float, int, int]:
    """(median wall ms, median CPU ms of this process, queries, bytes) of GET url."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    response = client.get(url, headers=headers or {})  # warm-up (templates, session)
    assert response.status_code == 200, (url, response.status_code)
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url, headers=headers or {})
    count = len(queries)  # now: the next request's reset_queries empties the log it reads
    wall, cpu = [], []
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        client.get(url, headers=headers or {})
        wall.append((time.perf_counter() - t0) * 1000)
        cpu.append((time.process_time() - c0) * 1000)
    return statistics.median(wall), statistics.median(cpu), count, len(response.content)


def main() -> int:
    if "--live" not in sys.argv[1:]:
        from bench.bench_history import main as history_main

        return history_main()
    return live_main()


def live_main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--live", action="store_true", help="an active run's pages and live poll")
    parser.add_argument("--nodes", type=int, default=1250)
    parser.add_argument("--peer", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()

    teardown, described = setup_django()
    try:
        from django.contrib.auth.models import Group, User
        from django.test import Client
        from django.urls import reverse

        rng = random.Random(42)
        t0 = time.perf_counter()
        big = seed_cluster("big", args.nodes, rng=rng)
        peer = seed_cluster("peer", args.peer, rng=rng)
        print(
            f"database: {described}; seeded {big['results']} results "
            f"({args.nodes} + {args.peer} nodes × {len(CHECKS)} checks × 2 runs) in {time.perf_counter() - t0:.1f} s"
        )
        user = User.objects.create_user("bench", password="x")
        user.groups.add(Group.objects.get(name="viewer"))
        client = Client()
        client.force_login(user)

        def pages(seeded: dict[str, Any]) -> list[tuple[str, str, dict[str, str]]]:
            finished, active = seeded["runs"]["finished"], seeded["runs"]["active"]
            since = f"{time.time() - 5:.3f}"  # the live poll: rows changed in the last few seconds
            node_label, node_url = node_page_url(seeded)
            return [
                ("run page", reverse("runs:run_detail", args=[finished.pk]), {}),
                ("run grid fragment (htmx)", reverse("runs:run_detail", args=[finished.pk]), {"HX-Request": "true"}),
                ("run page, only problems", reverse("runs:run_detail", args=[finished.pk]) + "?problems=1", {}),
                ("active run page", reverse("runs:run_detail", args=[active.pk]), {}),
                (
                    "active run live poll (htmx)",
                    reverse("runs:run_detail", args=[active.pk]) + f"?since={since}",
                    {"HX-Request": "true"},
                ),
                (node_label, node_url, {}),
            ]

        width = max(len(label) for label, _, _ in pages(big)) + 2
        print(
            f"{'page':<{width}} | {args.nodes} nodes: wall ms  (cpu)  queries   KiB "
            f"| {args.peer} nodes: wall ms  (cpu)  queries | wall ratio"
        )
        worst = 0.0
        growing = []
        for (label, url, headers), (_, peer_url, peer_headers) in zip(pages(big), pages(peer), strict=True):
            ms, cpu, queries, size = measure(client, url, repeat=args.repeat, headers=headers)
            pms, pcpu, pqueries, _ = measure(client, peer_url, repeat=args.repeat, headers=peer_headers)
            print(
                f"{label:<{width}} | {ms:>16.1f} {cpu:>6.1f} {queries:>8} {size / 1024:>5.0f} "
                f"| {pms:>14.1f} {pcpu:>6.1f} {pqueries:>8} | {ms / pms:>6.1f}x"
            )
            if label in ("run page", "node page"):
                worst = max(worst, ms)
            if queries != pqueries:
                growing.append(f"{label}: {pqueries} -> {queries} queries")
        verdict = "OK" if worst < TARGET_MS and not growing else "OVER TARGET"
        print(
            f"target: run page and node page under {TARGET_MS:.0f} ms with a constant query count -> {verdict}"
            + (f" (query count grows: {'; '.join(growing)})" if growing else "")
        )
        return 0
    finally:
        teardown()


if __name__ == "__main__":
    raise SystemExit(main())

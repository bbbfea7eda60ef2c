"""Pages, exports and run closing with a month of history, against a 16-node peer.

    python bench/bench_history.py [--nodes 1250] [--peer 16] [--runs 30] [--repeat 3] [--reuse]

Seeds (bench/history_seed.py) a cluster of `--nodes` nodes and a peer of `--peer` nodes, each with
`--runs` finished runs of the demo acceptance plan (8 checks), one a day, shaped like real runs: the
plan runs once on simulated nodes and its results (measurements, series, raw outputs) are copied to
every node inside PostgreSQL. Then, as a logged-in viewer through Django's test Client (server time:
no network, no browser), the median of `--repeat` requests after a warm-up, for the latest run:

    run page, grid fragment, cluster page, node page (30 runs of history), cluster runs page,
    compare two runs, results CSV / JSON, measurements CSV, fleet distribution, rack heatmap,
    /metrics, the cluster's health page, `kiln_run --json` of one run, closing a run.

Streaming responses are read to the end, counting bytes without keeping them; the time to their
first chunk is printed on the line below theirs (an export's download starts then). Exports and
`kiln_run --json` are also run once under tracemalloc: the peak of Python allocations while one is
produced (constant memory means it does not grow with the run). Each line prints the ratio to the
peer and the issue's target; the last line counts what is over target.

PostgreSQL only (the seeding runs in the server): --database-url (default
postgresql://postgres@127.0.0.1:5432/kiln_bench_history, dropped and created afresh unless --reuse
finds it seeded). 1,250 nodes x 30 runs is about 300k results and 25M measurements: several GB of
disk and about 10 minutes to seed on a 2-core machine.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.bench_fanout import fresh_database  # noqa: E402  (after the path is set)

PAGE_MS = 300.0  # pages and fragments at most 300 ms: a page that answers at once
METRICS_MS = 1000.0  # /metrics under 1 s (Prometheus's default scrape timeout is 10 s)
CLOSE_MS = 2000.0  # closing a run under 2 s, whatever the history behind it
STREAM_MB = 200.0  # exports and kiln_run --json in constant memory, under 200 MB
# The run page's HTML at most 300 KB at any cluster size: a page of the grid and the summary, never
# the whole run (4.2 MB at 1,250 nodes before the grid was paged).
PAGE_KB = 300.0
SIZED = ("run page", "run page, problems only", "run grid fragment (htmx)")
FIRST_BYTE_MS = 300.0  # a streamed export starts within 300 ms, as a page answers (its length is the data's)
NO_TIME_TARGET = float("inf")  # exports and kiln_run --json: the target is memory (their size is the data's)
METRICS_TOKEN = "bench-metrics-token"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1250)
    parser.add_argument("--peer", type=int, default=16)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--reuse", action="store_true", help="keep a database this bench seeded before")
    parser.add_argument(
        "--only", default="", help="time only the actions whose label contains one of these texts (comma-separated)"
    )
    parser.add_argument(
        "--database-url",
        default=os.environ.get("KILN_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/kiln_bench_history"),
    )
    return parser.parse_args()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def setup_django(database_url: str) -> None:
    from portal.datadir import init_data_dir

    data_dir = Path(tempfile.mkdtemp(prefix="kiln-bench-history-"))
    init_data_dir(data_dir)
    os.environ.update(
        DATABASE_URL=database_url,
        # The template run's own facility service, never another demo's (`make up` listens on the default).
        KILN_DEMO_FACILITY_PORT=str(free_port()),
        KILN_DATA_DIR=str(data_dir),
        KILN_ALLOW_LOCAL_TRANSPORT="1",  # the template run's simulated nodes
        KILN_METRICS_TOKEN=METRICS_TOKEN,
        DJANGO_SETTINGS_MODULE="portal.settings",
    )
    import django

    django.setup()
    from django.core.management import call_command
    from django.test.utils import setup_test_environment

    setup_test_environment()  # ALLOWED_HOSTS gets "testserver"
    call_command("migrate", verbosity=0, interactive=False)


def seed(args: argparse.Namespace) -> dict[str, Any]:
    from bench import history_seed
    from portal.inventory.models import Cluster

    names = {"big": args.nodes, "peer": args.peer}
    if args.reuse and all(Cluster.objects.filter(name=name, nodes__isnull=False).distinct().count() for name in names):
        print("reusing the seeded database")
        clusters = {name: Cluster.objects.get(name=name) for name in names}
        key_values_seed(list(clusters.values()))
        summary_seed(list(clusters.values()))
        return clusters
    t0 = time.perf_counter()
    template = history_seed.template_run()
    print(f"template: run #{template.pk} on {history_seed.DEMO_NODES} ({time.perf_counter() - t0:.1f} s)")
    clusters = {}
    for name, size in names.items():
        t0 = time.perf_counter()
        clusters[name] = history_seed.cluster_make(name, size)
        run_ids = history_seed.seed_runs(clusters[name], template, args.runs, say=lambda line: print(line, flush=True))
        settle(run_ids[-1])
        print(f"seeded {history_seed.describe(clusters[name])} in {time.perf_counter() - t0:.0f} s", flush=True)
    key_values_seed(list(clusters.values()))
    summary_seed(list(clusters.values()))
    return clusters


def summary_seed(clusters: list[Any]) -> None:
    """What closing a run stores in its summary that the seeder's SQL copy does not (the run page's
    cells and slowest nodes). Runs that have it are left alone."""
    from portal.runs.finalize import summary_complete
    from portal.runs.models import Run

    for run_id in Run.objects.filter(cluster__in=clusters).order_by("id").values_list("id", flat=True):
        if summary_complete(run_id=run_id):
            print(f"  summary of run #{run_id} completed", flush=True)


def key_values_seed(clusters: list[Any]) -> None:
    """Each finished run's folded key values, as the step after closing stores them (the latest
    run's too: settle() is the health part only). Runs that have them already are left alone."""
    from portal.history.services import run_key_values_store
    from portal.runs.models import Run

    runs = Run.objects.filter(cluster__in=clusters, key_values__isnull=True).order_by("id")
    for run_id in runs.values_list("id", flat=True).distinct():
        t0 = time.perf_counter()
        stored = run_key_values_store(run_id=run_id)
        print(f"  key values of run #{run_id}: {stored} in {time.perf_counter() - t0:.1f} s", flush=True)


def settle(run_id: int) -> None:
    """What closing the latest run does after it (the health signal): node states, trends, /metrics."""
    from portal.health.services import health_evaluate_run, risks_refresh, run_metrics_refresh

    t0 = time.perf_counter()
    health_evaluate_run(run_id=run_id)
    t1 = time.perf_counter()
    risks = risks_refresh(run_id=run_id)
    t2 = time.perf_counter()
    exported = run_metrics_refresh(run_id=run_id)
    t3 = time.perf_counter()
    print(
        f"  after run #{run_id}: node health {t1 - t0:.1f} s, trends {t2 - t1:.1f} s ({risks} at risk), "
        f"/metrics {t3 - t2:.1f} s ({exported} families)",
        flush=True,
    )


class Fetched:
    """One request's size in bytes (a stream read to its end, not kept) and, for a stream, the time
    to its first chunk (ms from the request: what a browser waits before the download starts)."""

    def __init__(self, client: Any, url: str, headers: dict[str, str]) -> None:
        t0 = time.perf_counter()
        response = client.get(url, headers=headers)
        if response.status_code != 200:
            raise SystemExit(f"GET {url}: {response.status_code} {response.content[:300]!r}")
        self.first_ms: float | None = None
        if not response.streaming:
            self.size = len(response.content)
            return
        chunks = iter(response.streaming_content)
        first = next(chunks, b"")
        self.first_ms = (time.perf_counter() - t0) * 1000
        self.size = len(first) + sum(len(chunk) for chunk in chunks)


class Inner:
    """An action's own time, measured around its core only (closing a run, not the reset before it)."""

    def __init__(self, ms: float, size: int = 0) -> None:
        self.ms, self.size = ms, size


def timed(action: Callable[[], Any], repeat: int) -> tuple[float, int, int, float | None]:
    """(median ms, queries, size, median ms to the first chunk of a stream or None) of `action`
    (returns a Fetched or a size); one warm-up first."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    action()
    times, firsts, size, queries = [], [], 0, 0
    for _ in range(repeat):
        with CaptureQueriesContext(connection) as captured:
            t0 = time.perf_counter()
            got = action()
            times.append(got.ms if isinstance(got, Inner) else (time.perf_counter() - t0) * 1000)
        size = got.size if isinstance(got, (Fetched, Inner)) else int(got or 0)
        if isinstance(got, Fetched) and got.first_ms is not None:
            firsts.append(got.first_ms)
        queries = len(captured)
    return statistics.median(times), queries, size, statistics.median(firsts) if firsts else None


def peak_mb(action: Callable[[], Any]) -> float:
    """Peak of Python allocations (MB) while `action` runs once."""
    tracemalloc.start()
    try:
        action()
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def actions(cluster: Any, client: Any) -> list[tuple[str, float, Callable[[], Any], bool]]:
    """(label, target ms, action, memory-measured) for the latest run of `cluster`."""
    from django.db.models.signals import post_save
    from django.urls import reverse

    from portal.health.services import health_evaluate_run, risks_refresh, run_metrics_refresh
    from portal.health.signals import run_saved
    from portal.history.services import run_key_values_store
    from portal.runs import selectors
    from portal.runs.finalize import CROSS_NODE_EVENT, run_finalize
    from portal.runs.models import Measurement, Run, RunEvent

    runs = list(Run.objects.filter(cluster=cluster).order_by("-id")[:2])
    run, previous = runs[0], runs[1] if len(runs) > 1 else runs[0]
    node = cluster.nodes.order_by("hostname")[cluster.nodes.count() // 3]
    auth = {"Authorization": f"Bearer {METRICS_TOKEN}"}

    def get(url: str, headers: dict[str, str] | None = None) -> Callable[[], Fetched]:
        return lambda: Fetched(client, url, headers or {})

    def run_json() -> int:  # what `kiln_run --json` writes, piece by piece
        return sum(len(piece) for piece in selectors.run_json_text(run=run))

    def close() -> Inner:
        """The run's own closing, timed without the reset before it (reopening the run, undoing its
        cross-node marks); its consumers (node health, trends) are the next line."""
        Run.objects.filter(pk=run.pk).update(status="running", finished_at=None)
        # Undo the cross-node step's marks, so every repetition applies consensus and outliers again.
        RunEvent.objects.filter(run_id=run.pk, kind=CROSS_NODE_EVENT).delete()
        Measurement.objects.filter(result__run_id=run.pk, name="outlier_z").delete()
        post_save.disconnect(sender=Run, dispatch_uid="health_run_saved")
        try:
            t0 = time.perf_counter()
            run_finalize(run_id=run.pk, dispatch=False)
            return Inner((time.perf_counter() - t0) * 1000)
        finally:
            post_save.connect(run_saved, sender=Run, dispatch_uid="health_run_saved")

    def after_close() -> int:
        judged = len(health_evaluate_run(run_id=run.pk))
        refreshed = risks_refresh(run_id=run.pk) + run_metrics_refresh(run_id=run.pk)
        return judged + refreshed + run_key_values_store(run_id=run.pk)

    return [
        ("run page", PAGE_MS, get(reverse("runs:run_detail", args=[run.pk])), False),
        ("run page, problems only", PAGE_MS, get(reverse("runs:run_detail", args=[run.pk]) + "?problems=1"), False),
        (
            "run grid fragment (htmx)",
            PAGE_MS,
            get(reverse("runs:run_detail", args=[run.pk]), {"HX-Request": "true"}),
            False,
        ),
        ("run triage CSV", PAGE_MS, get(reverse("runs:run_triage_csv", args=[run.pk])), False),
        ("run RMA text", PAGE_MS, get(reverse("runs:run_triage_rma", args=[run.pk])), False),
        ("cluster page", PAGE_MS, get(reverse("inventory:cluster_detail", args=[cluster.name])), False),
        (
            "node page (history)",
            PAGE_MS,
            get(reverse("history:node_detail", args=[cluster.name, node.hostname])),
            False,
        ),
        ("cluster runs page", PAGE_MS, get(reverse("history:cluster_runs", args=[cluster.name])), False),
        ("compare two runs", PAGE_MS, get(reverse("history:run_compare") + f"?a={run.pk}&b={previous.pk}"), False),
        ("results CSV", NO_TIME_TARGET, get(reverse("history:run_results_csv", args=[run.pk])), True),
        ("results JSON", NO_TIME_TARGET, get(reverse("history:run_results_json", args=[run.pk])), True),
        ("measurements CSV", NO_TIME_TARGET, get(reverse("history:run_measurements_csv", args=[run.pk])), True),
        ("fleet distribution", PAGE_MS, get(reverse("charts:run_distribution", args=[run.pk])), False),
        ("rack heatmap", PAGE_MS, get(reverse("charts:run_rack", args=[run.pk])), False),
        ("/metrics", METRICS_MS, get(reverse("health:metrics"), auth), False),
        ("/metrics?cluster=", METRICS_MS, get(reverse("health:metrics") + f"?cluster={cluster.name}", auth), False),
        ("health page of the cluster", PAGE_MS, get(reverse("health:cluster", args=[cluster.name])), False),
        ("kiln_run --json of one run", NO_TIME_TARGET, run_json, True),
        ("closing a run (consensus, outliers)", CLOSE_MS, close, False),
        ("after closing, in the worker: health, trends, /metrics, key values", NO_TIME_TARGET, after_close, False),
    ]


def measure_row(
    label: str, target: float, action: Callable[[], Any], peer_action: Callable[[], Any], *, memory: bool, repeat: int
) -> bool:
    """Time one action and its peer, print the line; False when it is over a target."""
    ms, queries, size, first = timed(action, repeat)
    peer_ms, _, _, peer_first = timed(peer_action, repeat)
    mb = peak_mb(action) if memory else None
    first_target = memory and first is not None  # the exports: /metrics streams too, under its own target
    sized = label in SIZED
    bad = (
        ms > target
        or (mb is not None and mb > STREAM_MB)
        or (first is not None and first_target and first > FIRST_BYTE_MS)
        or (sized and size / 1024 > PAGE_KB)
    )
    targets = (
        ([f"{target:.0f} ms"] if target != NO_TIME_TARGET else [])
        + ([f"first byte {FIRST_BYTE_MS:.0f} ms"] if first_target else [])
        + ([f"{STREAM_MB:.0f} MB"] if memory else [])
        + ([f"{PAGE_KB:.0f} KB of HTML"] if sized else [])
    )
    print(
        f"{label:<36} | {ms:>12.0f} {queries:>8} {size / 1024:>8.0f} {'' if mb is None else f'{mb:>8.0f}':>8} "
        f"| {peer_ms:>11.0f} | {ms / max(peer_ms, 0.01):>5.1f} | {'OVER ' if bad else ''}" + ", ".join(targets),
        flush=True,
    )
    if first is not None:  # a stream: its first chunk, the page's total time above
        print(f"{'  first byte':<36} | {first:>12.0f} {'':>26} | {peer_first or 0:>11.0f} |", flush=True)
    return not bad


def main() -> int:
    args = parse_args()
    if not args.reuse:
        fresh_database(args.database_url)
    setup_django(args.database_url)
    from django.contrib.auth.models import Group, User
    from django.test import Client

    clusters = seed(args)
    user, _ = User.objects.get_or_create(username="bench-viewer")
    user.groups.add(Group.objects.get(name="viewer"))
    client = Client()
    client.force_login(user)
    print(
        f"{'action':<36} | {args.nodes} nodes: ms  queries      KiB  peak MB | {args.peer} nodes: ms | ratio | target"
    )
    over = []
    measured = 0
    big, peer = actions(clusters["big"], client), actions(clusters["peer"], client)
    for (label, target, action, memory), (_, _, peer_action, _) in zip(big, peer, strict=True):
        if not any(part in label for part in args.only.split(",")):
            continue
        measured += 1
        if not measure_row(label, target, action, peer_action, memory=memory, repeat=args.repeat):
            over.append(label)
    print(f"history {args.nodes} nodes x {args.runs} runs: {len(over)} of {measured} over target ({', '.join(over)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""What a typed node set costs before and after bounding it (portal/inventory/nodesets.py).

    python bench/bench_nodeset.py [--repeat 20] [--old-max 1000000] [--no-pages]

Times, in this process, against a 16-node peer measured in the same run:
  - `nodesets.parse` on node sets over the limit (refused from the text alone) and at the limit
    (KILN_MAX_NODESET, expanded), with each refusal's ratio to parsing the 16-node peer;
  - the old path, ClusterShell's NodeSet() and list(), on ranges up to --old-max names (it grows
    linearly: 10 M names took 22 s and 1.7 GB in a web worker, so the default stops at 1 M);
  - GET /results/?node=... as a viewer (Django's test client, a throw-away database seeded with one
    4-node cluster, as bench_pages.py does), for the peer and the refused sets that fit in a request
    line: the 400 must come back in under 50 ms (exit 1 otherwise); the longer ones are POSTed to the
    run form as an operator (the form is shown again with the error).
Median wall milliseconds of --repeat runs; peak Python allocation (tracemalloc) for one run of each.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

PEER = "gpu[01-16]"
HUGE = {
    "gpu[1-10000000]": "gpu[1-10000000]",
    "gpu[1-99999999999]": "gpu[1-99999999999]",
    # 250 x 100 = 25,000 names in 3.6 KB: fits gunicorn's 4,094-byte request line (limit_request_line).
    "250 comma-separated ranges": ",".join(f"n[{i}-{i + 99}]" for i in range(0, 25_000, 100)),
    # Longer than any request line a server passes on: a form body's worth (POST, up to 2.5 MB).
    "1,000 comma-separated ranges (12 KB)": ",".join(f"n[{i}-{i + 99}]" for i in range(0, 100_000, 100)),
    "100,000 indexes in one bracket (588 KB)": "n[" + ",".join(str(i) for i in range(100_000)) + "]",
}
# The GET timings use the node sets that fit a request line; the longer ones are POSTed to the run
# form, as an operator's browser would send them.
FITS_A_URL = 4094
TARGET_MS = 50.0


def timed(fn: Callable[[], object], repeat: int) -> tuple[float, float]:
    """(median ms, peak MiB allocated by one call)."""
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - started) * 1000)
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return statistics.median(samples), peak


def refused(text: str) -> Callable[[], None]:
    from portal.inventory import nodesets

    def run() -> None:
        try:
            nodesets.parse(text)
        except nodesets.NodeSetTooLarge:
            return
        raise AssertionError(f"{text[:40]} was not refused")

    return run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--old-max", type=int, default=1_000_000, help="largest range the old path expands")
    parser.add_argument("--no-pages", action="store_true", help="skip the GET /results/ timings")
    args = parser.parse_args()

    from bench.bench_pages import setup_django

    teardown, described = setup_django()
    try:
        return report(args, described)
    finally:
        teardown()


def report(args: argparse.Namespace, described: str) -> int:
    from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet
    from django.conf import settings

    from portal.inventory import nodesets

    limit = settings.KILN_MAX_NODESET
    print(f"# bench_nodeset: KILN_MAX_NODESET={limit:,}; {described}; median of {args.repeat}")
    peer_ms, peer_mib = timed(lambda: nodesets.parse(PEER), args.repeat)
    print(f"{'case':<56} {'ms':>10} {'MiB':>8} {'x peer':>8}")
    print(f"{'parse ' + PEER + ' (peer)':<56} {peer_ms:>10.3f} {peer_mib:>8.2f} {1:>8.1f}")
    for label, text in HUGE.items():
        ms, mib = timed(refused(text), args.repeat)
        print(f"{'refuse ' + label:<56} {ms:>10.3f} {mib:>8.2f} {ms / peer_ms:>8.1f}")
    at_limit = f"gpu[1-{limit}]"
    ms, mib = timed(lambda: nodesets.parse(at_limit), max(3, args.repeat // 4))
    print(f"{'parse ' + at_limit + ' (at the limit)':<56} {ms:>10.3f} {mib:>8.2f} {ms / peer_ms:>8.1f}")

    def expand(text: str) -> list[str]:
        return list(NodeSet(text, resolver=RESOLVER_NOGROUP))

    size = 10_000
    while size <= args.old_max:
        text = f"gpu[1-{size}]"
        ms, mib = timed(partial(expand, text), 1)
        print(f"{'old path: list(NodeSet(' + text + '))':<56} {ms:>10.1f} {mib:>8.1f} {ms / peer_ms:>8.0f}")
        size *= 10

    if args.no_pages:
        return 0
    worst = page_timings(args.repeat)
    print(f"slowest 400 answer: {worst:.1f} ms (target < {TARGET_MS:.0f} ms)")
    return 0 if worst < TARGET_MS else 1


def page_timings(repeat: int) -> float:
    """GET /results/?node=... as a viewer (the finding's request), and POST of the run form as an
    operator for the node sets too long for a URL; returns the slowest refusal in ms."""
    import logging

    from django.contrib.auth.models import Group, User
    from django.test import Client
    from django.urls import reverse

    from portal.inventory.models import Cluster, Node

    logging.getLogger("django.request").setLevel(logging.ERROR)  # one "Bad Request" line per request
    cluster = Cluster.objects.create(name="bench", profile="H100-SXM-8", transport="local")
    Node.objects.bulk_create(Node(cluster=cluster, hostname=f"gpu{i:02d}") for i in range(1, 5))
    clients = {}
    for role in ("viewer", "operator"):
        user = User.objects.create_user(f"bench-{role}")
        user.groups.add(Group.objects.get(name=role))
        clients[role] = Client()
        clients[role].force_login(user)
    search, start = reverse("history:result_search"), reverse("runs:run_start", args=[cluster.name])

    def get(text: str, status: int) -> Callable[[], None]:
        def run() -> None:
            response = clients["viewer"].get(search, {"node": text})
            assert response.status_code == status, (text[:40], response.status_code)

        return run

    def post(text: str) -> Callable[[], None]:
        def run() -> None:
            response = clients["operator"].post(start, {"plan": "quick", "node_set": text})
            assert b"KILN_MAX_NODESET" in response.content, text[:40]

        return run

    peer_ms, _ = timed(get(PEER, 200), repeat)
    print(f"{'GET /results/?node=' + PEER + ' (peer)':<56} {peer_ms:>10.1f} {'':>8} {1:>8.1f}")
    worst = 0.0
    for label, text in HUGE.items():
        if len(search) + len("?node=") + len(text) <= FITS_A_URL:
            ms, mib = timed(get(text, 400), repeat)
            worst = max(worst, ms)
            print(f"{'GET 400 ' + label:<56} {ms:>10.1f} {mib:>8.2f} {ms / peer_ms:>8.2f}")
        else:
            ms, mib = timed(post(text), max(3, repeat // 4))
            print(f"{'POST run form ' + label:<56} {ms:>10.1f} {mib:>8.2f} {ms / peer_ms:>8.2f}")
    return worst


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    sys.exit(main())

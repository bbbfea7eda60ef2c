"""Closing a run (run_finalize) and what follows it, at 1,250 nodes against a 16-node peer, for plans
of 8 and of 20 checks per node, at the density of a real run.

    python bench/bench_finalize.py [--nodes 1250] [--peer 16] [--checks 8 20] [--history 1] [--repeat 3]

Seeds a throw-away database like bench/bench_pages.py (SQLite in a temporary folder, or with
DATABASE_URL a `kiln_bench_<pid>` database on that server). For each plan width, each cluster gets
`--history` finished runs and one run whose results are all in and the run still `running`, of a
plan of that many per-node checks (8: the `quick` sweep and the topology; 20: every per-node kind
in the catalog and three more definitions of kinds that have outlier metrics). Every result holds
what its kind records in a real run (SHAPES): the rows its consensus (`consensus_names`), its
outlier metrics, the trends, /metrics and the key values read, with their names, GPUs, labels and
texts as the demo acceptance run records them, and as many other rows as that run has of the kind
(bench/history_seed.py's template: about 80 a result). One node runs an odd driver (consensus
fails its inventory and software results), one lags on busbw (a fleet outlier), the others differ
by ±2 %. On PostgreSQL the rows are COPYed and the tables ANALYZEd, as a database in service is.

Each repeat closes the open run once (its after-close step included), then puts it back (not timed);
the first close is a warm-up (it makes every node's health row). Printed per width and size
(medians of the later closes):

- closing: run_finalize up to its commit, without the after-close step; of that, the cross-node
  pass (consensus and outliers); its queries at the first close and at the last;
- after closing (what a worker's kiln.run_closed task does): node health, trends, /metrics and key
  values, each with its time and queries.

The last lines: per width, the ratio to the peer and whether closing is under 2 s at `--nodes` in
the same number of queries as at `--peer` (and across widths); the exit status is 1 when not.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from bench_pages import setup_django  # noqa: E402  (after the path is set)

CLOSE_MS = 2000.0  # the target: closing a 1,250-node run in under 2 s
JITTER = 0.04  # values vary by ±2 % from node to node (bench/history_seed.py's JITTER)
GPUS = 8  # an HGX node (the clusters' profile, H100-SXM-8)
NICS = 9  # 8 compute rails and a storage NIC, as the demo nodes have
ODD_DRIVER_NODE, SLOW_BUSBW_NODE = 2, 3  # the node consensus fails, the fleet outlier (1-based)

# The plans. 8: the `quick` sweep (portal/catalog/services.py) and the topology, so the four kinds
# that have a consensus are all in. 20: every per-node kind in the catalog (17) and three more
# definitions of kinds with outlier metrics, as a site that runs a check twice with other params.
QUICK = ["gpu-inventory", "sw-consistency", "ecc-health", "gpu-links", "ib-ports", "dlc-temperature", "nccl-allreduce"]
PLANS = {8: [*QUICK, "topology"]}
EXTRA = {"nccl-allreduce-nvls": "nccl-allreduce", "host-bw-pinned": "host-bw", "fs-throughput-scratch": "fs-throughput"}

Row = tuple[str, float | None, str, str, int | None, dict[str, str]]  # name, value, text, unit, gpu, labels
Make = Callable[[int, Callable[[float], float]], list[Row]]  # (node number, jitter) -> rows


def _per_gpu(name: str, value: float, unit: str = "", labels: dict[str, str] | None = None) -> Make:
    return lambda node, j: [(name, j(value), "", unit, gpu, dict(labels or {})) for gpu in range(GPUS)]


def _phases(name: str, idle: float, load: float) -> Make:
    """A value per GPU and phase, as the temperature check records its idle and load windows."""
    return lambda node, j: [
        (name, j(value), "", "C", gpu, {"phase": phase})
        for phase, value in (("idle", idle), ("load", load))
        for gpu in range(GPUS)
    ]


def _one(name: str, value: float | None = None, text: str = "", unit: str = "", **labels: str) -> Make:
    return lambda node, j: [(name, None if value is None else j(value), text, unit, None, dict(labels))]


def _fixed(name: str, value: float, unit: str = "", **labels: str) -> Make:
    """A count every node agrees on (ports, NICs, GPUs): no jitter."""
    return lambda node, j: [(name, value, "", unit, None, dict(labels))]


def _driver(node: int, j: Callable[[float], float]) -> list[Row]:
    return [("driver_version", None, "535.104.05" if node == ODD_DRIVER_NODE else "550.54.15", "", None, {})]


def _busbw(node: int, j: Callable[[float], float]) -> list[Row]:
    peak = 400.0 if node == SLOW_BUSBW_NODE else j(470.0)
    labels = {"size": "1073741824", "placement": "out-of-place", "peak_min_bytes": "536870912"}
    return [("busbw_peak", peak, "", "GB/s", None, labels)]


def _texts(name: str, text: str, count: int, label: str) -> Make:
    return lambda node, j: [(name, None, text, "", None, {label: f"mlx5_{i}"}) for i in range(count)]


def _per_gpu_text(name: str, text: str, **labels: str) -> Make:
    return lambda node, j: [(name, None, text, "", gpu, dict(labels)) for gpu in range(GPUS)]


# Per kind: the rows the closing and the after-close step read (names, GPUs, labels, texts as the
# demo acceptance run records them), and how many rows a result of the kind has in all (that run's
# counts; the kinds it does not run: their rows of that shape, per GPU and NIC where they are).
SHAPES: dict[str, tuple[list[Make], int]] = {
    "gpu_inventory": (
        [_driver, _one("cuda_version", text="12.4"), _fixed("gpu_count", 8),
         _per_gpu_text("gpu_model", "NVIDIA H100 80GB HBM3")],
        62,
    ),
    "sw_consistency": (
        [_driver, _one("cuda_version", text="12.4"), _one("kernel", text="6.8.0-45-generic"),
         _one("os", text="Ubuntu 22.04.4 LTS", id="ubuntu", version_id="22.04"),
         _one("ofed_version", text="MLNX_OFED_LINUX-23.10-1.1.9.0", flavour="MLNX_OFED_LINUX", version="23.10-1.1.9.0"),
         _one("nccl_lib_version", text="2.21.5", version="2.21.5"),
         _one("ucx_version", text="1.16.0", version="1.16.0"),
         _one("enroot_version", text="3.4.1", version="3.4.1"), _one("pyxis_version", text="0.19.0-1", loaded="yes"),
         _one("slurm_version", text="23.11.4", build="slurm"), _texts("nic_firmware", "28.39.1002", NICS, "ca"),
         _per_gpu_text("vbios", "96.00.89.00.01")],
        37,
    ),
    "ib_ports": (
        [_fixed("ports_active", 8, expected="8", link_layers="InfiniBand"),
         _fixed("port_rate_min", 400, "Gb/s", expected="400", link_layers="InfiniBand"),
         _texts("port_state", "Active", NICS, "ca")],
        39,
    ),
    "topology": (
        [_fixed("nic_count", NICS), _per_gpu_text("gpu_numa_affinity", "0", cpu_affinity="0-47,96-143"),
         _per_gpu_text("gpu_nearest_nic_link", "PIX", nic="mlx5_0")],
        89,
    ),
    "nccl_allreduce": ([_busbw, _one("algbw_peak", 240.0, unit="GB/s")], 12),
    "host_bw": (
        [_per_gpu("h2d_gbps", 55.0, "GB/s"), _per_gpu("d2h_gbps", 55.0, "GB/s"),
         lambda node, j: [("d2d_gbps", j(700.0), "", "GB/s", None, {"src": str(s), "dst": str(d), "test": "read"})
                          for s in range(GPUS) for d in range(GPUS) if s != d]],
        113,
    ),
    "dlc_temperature": ([_phases("temp_gpu_steady", 38.0, 71.0), _phases("temp_memory_steady", 45.0, 80.0)], 138),
    "burn_in": ([_per_gpu("gflops", 52000.0, "Gflop/s"), _per_gpu("temp_max", 76.0, "C")], 127),
    "ecc_health": (
        [_per_gpu(f"ecc_{counter}", 0.0) for counter in
         ("volatile_corrected", "volatile_uncorrected", "aggregate_corrected", "aggregate_uncorrected")],
        91,
    ),
    "fs_throughput": (
        [_one("write_bw_sum", 5.0e9, unit="B/s"), _one("read_bw_sum", 6.0e9, unit="B/s"),
         lambda node, j: [(name, j(2.5e9), "", "B/s", None, {"job": f"seq{name[:-3]}{i}"})
                          for name in ("write_bw", "read_bw") for i in range(2)]],
        20,
    ),
    "fs_metadata": (
        [_one(f"{op}_rate", 12000.0, unit="ops/s", stat="mean", operation=op)
         for op in ("file_creation", "file_stat", "file_read", "file_removal")],
        43,
    ),
    "gpu_power_limit": ([_per_gpu("power_limit_w", 700.0, "W")], 32),
    "pcie_link": ([_per_gpu("pcie_width", 16.0, "lanes")], 64),
    "gpu_config": ([], 108),
    "gpu_links": ([], 202),
    "dcgm_diag": ([], 40),
    "slurm_container": ([], 12),
}  # fmt: skip


def result_rows(kind: str, node: int, rng: random.Random) -> list[Row]:
    """The rows of one result of `kind` on node number `node`: what is read, then the others."""
    makes, total = SHAPES[kind]

    def jitter(value: float) -> float:
        return value * (1 + rng.uniform(-JITTER / 2, JITTER / 2))

    rows = [row for make in makes for row in make(node, jitter)]
    # The rest: nothing after the run reads them, but they sit beside the read ones in the table.
    rows += [(f"detail_{i}", jitter(1000.0), "", "", i % GPUS, {"detail": str(i)}) for i in range(total - len(rows))]
    return rows


def bench_plan(checks: int) -> Any:
    """A plan of `checks` per-node checks (PLANS, EXTRA), made once."""
    from checks.core.base import REGISTRY
    from portal.catalog.models import CheckDefinition, TestPlan, TestPlanItem

    plan, created = TestPlan.objects.get_or_create(slug=f"bench-{checks}", defaults={"name": f"Bench ({checks})"})
    if not created:
        return plan
    node_kinds = sorted(
        d.slug for d in CheckDefinition.objects.filter(builtin=True) if REGISTRY[d.kind].scope == "node"
    )
    for slug, kind in EXTRA.items():
        CheckDefinition.objects.get_or_create(slug=slug, defaults={"name": slug, "kind": kind.replace("-", "_")})
    slugs = PLANS.get(checks) or [*node_kinds, *EXTRA]
    if len(slugs) != checks:
        raise SystemExit(f"--checks {checks}: this bench makes plans of 8 or {len(node_kinds) + len(EXTRA)} checks")
    for order, slug in enumerate(slugs):
        TestPlanItem.objects.create(plan=plan, check_definition=CheckDefinition.objects.get(slug=slug), order=order)
    return plan


def seed(name: str, size: int, plan: Any, history: int) -> tuple[Any, int]:
    """A cluster of `size` nodes, `history` finished runs of `plan` a day apart, then one whose
    results are all in and the run still `running`. Returns that run and the rows written."""
    from django.utils import timezone

    from portal.inventory.models import Cluster, Node
    from portal.runs import services
    from portal.runs.models import CheckResult, Run

    cluster = Cluster.objects.create(name=name, profile="H100-SXM-8", transport="local")
    Node.objects.bulk_create(
        Node(cluster=cluster, hostname=f"{name}-gpu{i:04d}", rack=f"r{i // 32:03d}", position=i % 32)
        for i in range(1, size + 1)
    )
    written = 0
    for age in [*range(history, 0, -1), 0]:
        run = services.run_start(cluster=cluster, plan=plan, enqueue=False)
        results = CheckResult.objects.filter(run=run)
        results.update(status="pass", reason="within spec")
        written += write_measurements(list(results.values_list("id", "kind", "node__hostname")), seed=age)
        if age:
            finished = timezone.now() - timedelta(days=age)
            Run.objects.filter(pk=run.pk).update(status="pass", started_at=finished, finished_at=finished)
        else:
            Run.objects.filter(pk=run.pk).update(status="running", started_at=timezone.now())
    return run, written


def write_measurements(results: list[tuple[int, str, str]], *, seed: int) -> int:
    """Each result's rows (result_rows): COPY on PostgreSQL, batches of bulk_create elsewhere; and
    its cross-node digest, made from them as recording a result makes it (portal/runs/crossnode.py)."""
    from django.db import connection
    from django.utils import timezone

    from portal.runs import crossnode

    digests: dict[int, dict[str, Any] | None] = {}

    def rows() -> Iterator[tuple[int, Row]]:
        for pk, kind, hostname in results:
            node = int(hostname.rsplit("gpu", 1)[1])
            made = result_rows(kind, node, random.Random(f"{seed}:{pk}"))
            stored = [(name, value, text, unit, gpu, "", None, labels) for name, value, text, unit, gpu, labels in made]
            digests[pk] = crossnode.digest(kind, stored)
            yield from ((pk, row) for row in made)

    try:
        return (
            _measurements_copy(rows(), timezone.now())
            if connection.vendor == "postgresql"
            else _measurements_create(rows())
        )
    finally:
        _digests_write(digests)


def _measurements_copy(rows: Iterator[tuple[int, Row]], now: Any) -> int:
    from django.db import connection

    written = 0
    columns = "result_id, name, value, text, unit, gpu, threshold, ok, labels, recorded_at"
    with connection.cursor() as cursor, cursor.cursor.copy(f"COPY runs_measurement ({columns}) FROM STDIN") as copy:
        for pk, (name, value, text, unit, gpu, labels) in rows:
            copy.write_row((pk, name, value, text, unit, gpu, "", None, json.dumps(labels), now))
            written += 1
    return written


def _measurements_create(rows: Iterator[tuple[int, Row]]) -> int:
    from portal.runs.models import Measurement

    written = 0
    batch: list[Measurement] = []
    for pk, (name, value, text, unit, gpu, labels) in rows:
        batch.append(Measurement(result_id=pk, name=name, value=value, text=text, unit=unit, gpu=gpu, labels=labels))
        if len(batch) == 5000:
            written += len(Measurement.objects.bulk_create(batch))
            batch = []
    return written + len(Measurement.objects.bulk_create(batch))


def _digests_write(digests: dict[int, dict[str, Any] | None]) -> None:
    """The results' digests in one UPDATE (bulk_update's CASE elsewhere)."""
    from django.db import connection

    from portal.runs.models import CheckResult

    if connection.vendor != "postgresql":
        made = [CheckResult(pk=pk, cross_node=digest) for pk, digest in digests.items()]
        CheckResult.objects.bulk_update(made, ["cross_node"], batch_size=500)
        return
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE runs_checkresult r SET cross_node = d.digest::jsonb "
            "FROM unnest(%s::bigint[], %s::text[]) AS d(id, digest) WHERE r.id = d.id",
            [list(digests), [json.dumps(d) if d is not None else None for d in digests.values()]],
        )


def analyze() -> None:
    """Statistics for the planner, as autovacuum keeps them in a database in service: without them it
    plans for empty tables (a nested loop over every measurement took 8 s a step of the trends)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")


def reopen(run: Any) -> None:
    """Put the run back as it was before it closed (consensus, outliers and log undone)."""
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


def timed(call: Callable[..., Any], into: Spent) -> Callable[..., Any]:
    """`call`, adding each call's wall time and queries (counted while a CaptureQueriesContext is
    open) to `into`."""
    from django.db import connection

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0, q0 = time.perf_counter(), len(connection.queries_log)
        try:
            return call(*args, **kwargs)
        finally:
            into.ms += (time.perf_counter() - t0) * 1000
            into.queries += len(connection.queries_log) - q0

    return wrapper


AFTER = ("health", "trends", "/metrics", "key values")


@dataclass
class Closing:
    """Medians over the repeats after the first, and the queries of the first close and the last."""

    close_ms: float
    cross_ms: float
    queries: tuple[int, int]
    after_ms: dict[str, float]
    after_queries: dict[str, tuple[int, int]]
    reason: str = ""


@dataclass
class Patched:
    """The closing's cross-node pass and the after-close steps wrapped to time them (then restored)."""

    spent: dict[str, Spent] = field(default_factory=lambda: {k: Spent() for k in ("cross", "after", *AFTER)})
    undo: list[Callable[[], None]] = field(default_factory=list)

    def wrap(self, owner: Any, name: str, key: str) -> None:
        real = getattr(owner, name)
        setattr(owner, name, timed(real, self.spent[key]))
        self.undo.append(lambda: setattr(owner, name, real))

    def __enter__(self) -> Patched:
        from portal.health import services as health
        from portal.health import signals
        from portal.runs import finalize

        self.wrap(finalize, "cross_node_apply", "cross")
        self.wrap(signals, "evaluate", "after")  # on commit, inside run_finalize (no worker task here)
        for name, key in (("health_evaluate_run", "health"), ("risks_refresh", "trends")):
            self.wrap(health, name, key)
        self.wrap(health, "run_metrics_refresh", "/metrics")
        steps = signals.AFTER_CLOSE_STEPS
        original = list(steps)
        steps[:] = [(what, timed(step, self.spent["key values"])) for what, step in original]
        self.undo.append(lambda: steps.__setitem__(slice(None), original))
        return self

    def __exit__(self, *exc: object) -> None:
        for undo in reversed(self.undo):
            undo()

    def reset(self) -> None:
        for spent in self.spent.values():
            spent.ms = spent.queries = 0


def measure(run: Any, repeat: int) -> Closing:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from portal.runs import services

    walls: list[float] = []
    crosses: list[float] = []
    counts: list[int] = []
    after: dict[str, list[float]] = {k: [] for k in AFTER}
    after_counts: dict[str, list[int]] = {k: [] for k in AFTER}
    reason = ""
    with Patched() as patched:
        for _ in range(repeat + 1):
            reopen(run)
            patched.reset()
            with CaptureQueriesContext(connection) as captured:
                t0 = time.perf_counter()
                closed = services.run_finalize(run_id=run.pk)  # the after-close step runs on commit, in it
                wall = (time.perf_counter() - t0) * 1000
            if closed is None:
                raise SystemExit(f"run {run.pk} vanished while it was closed")
            reason = closed.reason
            spent = patched.spent
            walls.append(wall - spent["after"].ms)
            crosses.append(spent["cross"].ms)
            counts.append(len(captured) - spent["after"].queries)
            for key in AFTER:
                after[key].append(spent[key].ms)
                after_counts[key].append(spent[key].queries)
    median = statistics.median
    return Closing(
        median(walls[1:]),
        median(crosses[1:]),
        (counts[0], counts[-1]),
        {k: median(v[1:]) for k, v in after.items()},
        {k: (v[0], v[-1]) for k, v in after_counts.items()},
        reason,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1250)
    parser.add_argument("--peer", type=int, default=16)
    parser.add_argument("--checks", type=int, nargs="+", default=[8, 20], help="per-node checks in the plan: 8, 20")
    parser.add_argument("--history", type=int, default=1, help="finished runs before the one closed")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    import logging

    logging.disable(logging.INFO)  # a line per node health transition otherwise
    teardown, described = setup_django()
    try:
        measured: dict[int, dict[int, Closing]] = {}
        for checks in args.checks:
            t0 = time.perf_counter()
            plan = bench_plan(checks)
            runs, written = {}, 0
            for size in (args.nodes, args.peer):
                runs[size], rows = seed(f"c{checks}n{size}", size, plan, args.history)
                written += rows
            analyze()
            results = (args.nodes + args.peer) * checks * (args.history + 1)
            print(
                f"database: {described}; {checks} checks a node: seeded {args.nodes} + {args.peer} nodes x "
                f"{args.history + 1} runs, {written:,} measurements ({written / results:.0f} a result) "
                f"in {time.perf_counter() - t0:.0f} s",
                flush=True,
            )
            measured[checks] = {size: measure(run, args.repeat) for size, run in runs.items()}
        report(args, measured)
        return 0 if verdict(args, measured) else 1
    finally:
        teardown()


def report(args: argparse.Namespace, measured: dict[int, dict[int, Closing]]) -> None:
    print(
        f"{'checks':>6} | {'nodes':>5} | {'closing ms':>10} | {'cross-node':>10} | {'queries':>9} || "
        + " | ".join(f"{k} ms (queries)" for k in AFTER)
        + " | reason"
    )
    for checks, sizes in measured.items():
        for size, c in sizes.items():
            after = " | ".join(
                f"{c.after_ms[k]:>{len(k) + 3}.0f} ({c.after_queries[k][0]}, {c.after_queries[k][1]})" for k in AFTER
            )
            print(
                f"{checks:>6} | {size:>5} | {c.close_ms:>10.0f} | {c.cross_ms:>10.0f} | "
                f"{c.queries[0]:>4} {c.queries[1]:>4} || {after} | {c.reason}"
            )


def verdict(args: argparse.Namespace, measured: dict[int, dict[int, Closing]]) -> bool:
    """A line per width, then the verdict: closing under CLOSE_MS at --nodes in as many queries as at
    --peer, and in as many at every width."""
    good = True
    for checks, sizes in measured.items():
        big, peer = sizes[args.nodes], sizes[args.peer]
        constant = big.queries == peer.queries
        fast = big.close_ms < CLOSE_MS
        good = good and constant and fast
        after_big = sum(big.after_ms.values())
        after_q = {k: (peer.after_queries[k][1], big.after_queries[k][1]) for k in AFTER}
        grows = [f"{k} {p} -> {b}" for k, (p, b) in after_q.items() if p != b]
        print(
            f"{checks} checks: closing {args.nodes} nodes {big.close_ms:.0f} ms, peer {args.peer} nodes "
            f"{peer.close_ms:.0f} ms, ratio {big.close_ms / peer.close_ms:.1f}; queries "
            f"{big.queries[1]} at {args.nodes} nodes, {peer.queries[1]} at {args.peer} "
            f"({'constant' if constant else 'GROW'}); {'under' if fast else 'OVER'} {CLOSE_MS:.0f} ms. "
            f"After closing: {after_big:.0f} ms (peer {sum(peer.after_ms.values()):.0f}), queries "
            + ("constant" if not grows else "grow: " + ", ".join(grows))
        )
    widths = {sizes[args.nodes].queries[1] for sizes in measured.values()}
    same_width = len(widths) == 1
    good = good and same_width
    print(
        f"verdict: closing {'under' if good else 'NOT under'} {CLOSE_MS:.0f} ms in constant queries at "
        f"{' and '.join(str(c) for c in measured)} checks a node"
        + ("" if same_width else f" (queries differ across widths: {sorted(widths)})")
    )
    return good


if __name__ == "__main__":
    raise SystemExit(main())

"""Fan-out side by side: Kiln's `quick` plan against pdsh, clush and asyncssh on the same nodes.

    python bench/bench_fanout.py [--nodes 64] [--repeat 3]          (as root, like the testbed)

Brings up one testbed (real sshd in network namespaces, `python -m testbed`) of the largest size
asked (default sizes 8, 16, 32, 64) and, for each size, on its first N nodes, `--repeat` times in
turn (median reported):
  - kiln: the built-in `quick` plan, started as the portal starts it (services.run_start) and run by
    ONE real worker process started as the docs say, `celery -A worker worker`, with no pool or
    concurrency flag and no KILN_WORKER_* variable: the defaults. Time = the run's finished_at less
    its created_at (both stamped by Kiln). Meanwhile pg_stat_activity is sampled every 20 ms: the
    worker's connections (application_name `kiln-worker`, client backends) at most at once, and how
    many were opened; and the worker's CPU time per node (/proc).
  - pdsh (when installed: apt-get install -y pdsh) and clush (the system one, apt-get install -y
    clustershell, else ClusterShell's module, a Kiln dependency): the same node-side commands, the
    quick plan's full list as a node runs them, in ONE shell line per node: each command exactly as
    Kiln's transport sends it
    (worker.ssh.remote_shell_line: env, `timeout -k`, the argv), the probe script (Kiln feeds it
    on stdin) written once to a temporary file and fed from it to each `python3 -`, outputs sent
    back. Fan-out = N (every node at once, the strongest setting of each), ssh with the testbed's
    ssh_config (key, known_hosts).
  - asyncssh: a script that opens N connections at once and runs the same commands, one channel
    each, stdin fed, in order: Kiln's own pattern on an event loop. Needs the `bench` extra
    (pip install -e '.[bench]'); left out, with a note, when asyncssh is missing.
Every peer must bring back every node's end marker with no failed command, and Kiln's run must end
pass or warn, else the bench says so and exits 1.

Then Kiln's own cost per node at the largest size, from the worker's per-task log line
(worker/db.py's ledger): SSH connect, claim, judging, recording (queries), closing the run, and
everything but the node's commands; and the worker's peak memory. On a small machine the nodes,
PostgreSQL and the worker share the cores: compare the worker's CPU per node with its wall times.
`--worker-env NAME=VALUE` runs the worker with a setting changed (KILN_WORKER_POOL=prefork, ...) to
compare; the output then says it is not the defaults. The last line reads:
    fanout N nodes: kiln K s, fastest peer P s (NAME), ratio R
where the fastest peer is the faster of pdsh and clush (the issue's yardstick).

PostgreSQL and Redis as for `make test`: --database-url (default
postgresql://postgres@127.0.0.1:5432/kiln_bench_fanout; a database whose name starts with
kiln_bench is dropped and created afresh) and --broker-url (default redis://127.0.0.1:6379/14,
flushed). KILN_BENCH_DATABASE_URL / KILN_BENCH_BROKER_URL override the defaults.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.fanout_peers import (
    WORKER_CONNECTIONS_SQL,
    LedgerLine,
    node_side_line,
    parse_ledger,
    run_asyncssh,
    run_clush,
    run_pdsh,
)

REPO = Path(__file__).resolve().parent.parent
DEFAULT_SIZES = (8, 16, 32, 64)
PEERS = ("pdsh", "clush")  # the yardstick of the last line (pdsh only where it is installed)
WORKER_ENV_DEFAULTS = ("KILN_WORKER_POOL", "KILN_WORKER_CONCURRENCY", "KILN_WORKER_DB_CONNECTIONS")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, action="append", help="a testbed size (repeatable; default 8 16 32 64)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each tool per size (median; default 3)")
    parser.add_argument(
        "--database-url",
        default=os.environ.get("KILN_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/kiln_bench_fanout"),
    )
    parser.add_argument("--broker-url", default=os.environ.get("KILN_BENCH_BROKER_URL", "redis://127.0.0.1:6379/14"))
    parser.add_argument("--workdir", type=Path, default=None, help="testbed and worker files (default: a temp dir)")
    parser.add_argument(
        "--worker-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="give the worker a setting (e.g. KILN_WORKER_POOL=prefork) to compare with the defaults; "
        "the last line then does not describe the defaults",
    )
    return parser.parse_args(argv)


def fresh_database(url: str) -> None:
    import psycopg
    from psycopg import sql

    base, _, name = url.rpartition("/")
    if not name.startswith("kiln_bench"):
        raise SystemExit(f"refusing to recreate database {name!r}: the bench only drops databases named kiln_bench*")
    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def setup_django(args: argparse.Namespace, data_dir: Path) -> None:
    os.environ["DATABASE_URL"] = args.database_url
    os.environ["CELERY_BROKER_URL"] = args.broker_url
    os.environ["KILN_DATA_DIR"] = str(data_dir)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)


class ConnectionSampler(threading.Thread):
    """Peak count of the worker's PostgreSQL connections (pg_stat_activity), sampled every 20 ms."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.peak = 0
        self.samples = 0
        self.pids: set[int] = set()  # distinct server processes seen: connections opened, not reused
        self._done = threading.Event()

    def run(self) -> None:
        import psycopg

        from worker.db import WORKER_APPLICATION_NAME

        with psycopg.connect(self.url, autocommit=True) as conn:
            while not self._done.is_set():
                pids = [row[0] for row in conn.execute(WORKER_CONNECTIONS_SQL, (WORKER_APPLICATION_NAME,))]
                self.peak = max(self.peak, len(pids))
                self.pids.update(pids)
                self.samples += 1
                self._done.wait(0.02)

    def stop(self) -> int:
        self._done.set()
        self.join(10)
        return self.peak


class Worker:
    """`celery -A worker worker` exactly as the docs say (plus --loglevel=INFO for its log)."""

    def __init__(self, log_path: Path, env: dict[str, str], overrides: dict[str, str]) -> None:
        self.log_path = log_path
        self.env = {k: v for k, v in env.items() if k not in WORKER_ENV_DEFAULTS} | overrides
        self.process: subprocess.Popen[bytes] | None = None

    def peak_rss_mb(self) -> float:
        """The worker's peak resident memory so far (VmHWM)."""
        if not self.process:
            return 0.0
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def cpu_seconds(self) -> float:
        """CPU time (user + system) of the worker and its children so far (/proc/PID/stat)."""
        if not self.process:
            return 0.0
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rpartition(")")[2].split()
        ticks = sum(int(v) for v in fields[11:15])  # utime stime cutime cstime
        return ticks / os.sysconf("SC_CLK_TCK")

    def start(self) -> None:
        log = self.log_path.open("wb")  # a fresh log: "ready." and the task lines are this worker's
        self.process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "worker", "worker", "--loglevel=INFO"],
            cwd=REPO,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 60
        while b" ready." not in self.log_path.read_bytes():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the worker did not start:\n{self.log_path.read_text()[-3000:]}")
            time.sleep(0.2)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, 15)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, 9)
                self.process.wait(10)


@dataclass
class KilnRun:
    seconds: float  # the run's finished_at less its created_at
    peak_connections: int  # the worker's PostgreSQL connections, at most at once
    opened_connections: int  # distinct server processes seen: connections opened during the run
    status: str
    run_id: int


def kiln_once(cluster: Any, plan: Any, nodes: list[Any], database_url: str) -> KilnRun:
    """One `quick` run on `nodes` through the worker, with its connections sampled."""
    from portal.runs import services
    from portal.runs.models import ACTIVE_STATUSES, Run

    sampler = ConnectionSampler(database_url)
    sampler.start()
    run = services.run_start(cluster=cluster, plan=plan, nodes=nodes)
    deadline = time.monotonic() + 900
    while Run.objects.filter(pk=run.pk, status__in=ACTIVE_STATUSES).exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"run {run.pk} did not finish in 900 s")
        time.sleep(0.1)
    peak = sampler.stop()
    run.refresh_from_db()
    if run.finished_at is None:
        raise SystemExit(f"run {run.pk} is {run.status} but has no finish time")
    seconds = (run.finished_at - run.created_at).total_seconds()
    return KilnRun(seconds, peak, len(sampler.pids), run.status, run.pk)


def quick_commands(cluster):
    from checks.core.base import NodeContext, get_check
    from portal.catalog.models import TestPlan
    from portal.runs.services import plan_snapshot_build

    snapshot = plan_snapshot_build(plan=TestPlan.objects.get(slug="quick"), cluster=cluster)
    commands = []
    for item in snapshot["items"]:
        check = get_check(item["kind"])
        context = NodeContext(hostname="-", since=time.time())
        commands += check.commands(check.make_params(item["params"]), context)
    return commands


@dataclass
class Setup:
    """What every size measures with: the testbed, the one worker, the cluster and the commands."""

    testbed: Any
    worker: Worker
    cluster: Any
    plan: Any
    nodes: list[Any]
    commands: list[Any]
    line: str
    shells: list[tuple[str, Any]]
    has_asyncssh: bool
    database_url: str
    repeat: int


Row = tuple[int, dict[str, float], int, float]  # size, median seconds per tool, peak connections, CPU/node


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sizes = sorted(set(args.nodes or DEFAULT_SIZES))
    if os.geteuid() != 0:
        raise SystemExit("the bench brings up a testbed (network namespaces, sshd): run it as root")
    from testbed.cluster import Testbed
    from testbed.pytest_plugin import testbed_unavailable_reason

    reason = testbed_unavailable_reason()
    if reason:
        raise SystemExit(f"cannot bring up the testbed: {reason}")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="kiln-bench-fanout-"))
    workdir.mkdir(parents=True, exist_ok=True)
    fresh_database(args.database_url)
    setup_django(args, workdir / "data")
    import redis

    redis.Redis.from_url(args.broker_url).flushdb()
    testbed = Testbed(max(sizes), workdir / "testbed", name="bfan").up()
    overrides = dict(item.split("=", 1) for item in args.worker_env)
    worker = Worker(workdir / "worker.log", dict(os.environ), overrides)
    try:
        setup = _setup(args, testbed, worker)
        failures: list[str] = []
        kiln_runs: dict[int, list[int]] = {}
        rows = [_measure_size(setup, size, failures, kiln_runs.setdefault(size, [])) for size in sizes]
        print_table(rows, [name for name, _ in setup.shells], setup.has_asyncssh)
        print_overhead(sizes[-1], kiln_overhead(workdir / "worker.log", kiln_runs[sizes[-1]]))
        print(f"  the worker's peak memory (VmHWM) over the whole bench: {worker.peak_rss_mb():.0f} MB")
        return _verdict(rows[-1], failures, overrides)
    finally:
        worker.stop()
        testbed.down()


def _setup(args: argparse.Namespace, testbed: Any, worker: Worker) -> Setup:
    """The cluster of the testbed's nodes in Kiln, the quick plan's commands, the worker started."""
    from portal.catalog.models import TestPlan
    from portal.inventory.services import cluster_create, nodes_add

    cluster = cluster_create(
        name="bench",
        ssh_user=testbed.ssh_user,
        ssh_key_path=str(testbed.client_key_path),
        known_hosts_path=str(testbed.known_hosts_path),
        profile="H100-SXM-8",
    )
    for node in testbed.nodes:
        nodes_add(cluster=cluster, hostnames=node.hostname, addresses=node.address)
    commands = quick_commands(cluster)
    line = node_side_line(commands)
    print(
        f"quick plan: {len(commands)} commands per node ({sum(1 for c in commands if c.read_only)} read-only); "
        f"peers' shell line {len(line)} bytes; one worker, default settings; median of {args.repeat}",
        flush=True,
    )
    worker.start()
    return Setup(
        testbed=testbed,
        worker=worker,
        cluster=cluster,
        plan=TestPlan.objects.get(slug="quick"),
        nodes=list(cluster.nodes.order_by("hostname")),
        commands=commands,
        line=line,
        shells=[(name, runner) for name, runner in (("pdsh", run_pdsh), ("clush", run_clush)) if _installed(name)],
        has_asyncssh=_has_asyncssh(),
        database_url=args.database_url,
        repeat=args.repeat,
    )


def _measure_size(setup: Setup, size: int, failures: list[str], kiln_runs: list[int]) -> Row:
    """Kiln and each peer on the first `size` nodes, `repeat` times in turn; the medians."""
    times: dict[str, list[float]] = {"kiln": [], "pdsh": [], "clush": [], "asyncssh": []}
    peaks, cpu = [], []
    for rep in range(setup.repeat):
        cpu_before = setup.worker.cpu_seconds()
        kiln = kiln_once(setup.cluster, setup.plan, setup.nodes[:size], setup.database_url)
        cpu.append((setup.worker.cpu_seconds() - cpu_before) / size)
        times["kiln"].append(kiln.seconds)
        peaks.append(kiln.peak_connections)
        kiln_runs.append(kiln.run_id)
        if kiln.status not in ("pass", "warn"):
            failures.append(f"kiln run {kiln.run_id} on {size} nodes ended {kiln.status}")
        _run_peers(setup, size, times, failures)
        print(
            f"  {size} nodes, run {rep + 1}: "
            + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in times.items() if v)
            + f"; kiln: PG connections {kiln.peak_connections} at most"
            + f" ({kiln.opened_connections} opened), worker CPU {cpu[-1] * 1000:.0f} ms per node",
            flush=True,
        )
    medians = {k: statistics.median(v) for k, v in times.items() if v}
    return size, medians, max(peaks), statistics.median(cpu)


def _run_peers(setup: Setup, size: int, times: dict[str, list[float]], failures: list[str]) -> None:
    """pdsh, clush and asyncssh once each on the first `size` nodes."""
    tb_nodes = setup.testbed.nodes[:size]
    for name, runner in setup.shells:
        seconds, bad = runner(setup.testbed, tb_nodes, setup.line)
        times[name].append(seconds)
        failures += [f"{name} on {size} nodes: {b}" for b in bad]
    if setup.has_asyncssh:
        seconds, bad = run_asyncssh(setup.testbed, tb_nodes, setup.commands)
        times["asyncssh"].append(seconds)
        failures += [f"asyncssh on {size} nodes: {b}" for b in bad]


def _verdict(largest: Row, failures: list[str], overrides: dict[str, str]) -> int:
    """The last lines: what makes the numbers invalid, then Kiln against the fastest peer."""
    size, medians, _, _ = largest
    peer = min((p for p in PEERS if p in medians), key=lambda p: medians[p])
    for failure in failures:
        print(f"NOT VALID: {failure}")
    if overrides:
        print(f"NOT THE DEFAULTS: the worker ran with {overrides}")
    kiln_s, peer_s = medians["kiln"], medians[peer]
    print(
        f"fanout {size} nodes: kiln {kiln_s:.2f} s, fastest peer {peer_s:.2f} s ({peer}), ratio {kiln_s / peer_s:.2f}"
    )
    return 1 if failures else 0


def _installed(peer: str) -> bool:
    """pdsh must be installed; clush falls back to ClusterShell's own module (a Kiln dependency)."""
    if peer == "pdsh" and shutil.which("pdsh") is None:
        print("pdsh is not installed (apt-get install -y pdsh): its column is left out", flush=True)
        return False
    return True


def _has_asyncssh() -> bool:
    try:
        import asyncssh  # noqa: F401
    except ImportError:
        print("asyncssh not installed (pip install -e '.[bench]'): its column is left out", flush=True)
        return False
    return True


def print_table(rows: list[Row], shells: list[str], has_asyncssh: bool) -> None:
    tools = ["kiln", *shells, *(["asyncssh"] if has_asyncssh else [])]
    print()
    header = " | ".join(f"{t:>8}" for t in tools)
    print(f"nodes | {header} | fastest of pdsh/clush | kiln ratio | kiln peak PG conns | worker CPU/node")
    for size, medians, peak, cpu in rows:
        peer = min((p for p in PEERS if p in medians), key=lambda p: medians[p])
        cells = " | ".join(f"{medians[t]:>6.2f} s" for t in tools)
        ratio = medians["kiln"] / medians[peer]
        print(f"{size:>5} | {cells} | {peer:>21} | {ratio:>10.2f} | {peak:>18} | {cpu * 1000:>12.0f} ms")
    print()


def kiln_overhead(log_path: Path, run_ids: list[int]) -> list[LedgerLine]:
    wanted = set(run_ids)
    return [entry for entry in parse_ledger(log_path.read_text()) if entry.run_id in wanted]


def print_overhead(size: int, entries: list[LedgerLine]) -> None:
    if not entries:
        print("no per-task lines in the worker log: per-node overhead unknown")
        return

    def med(values: list[float]) -> str:
        return f"{statistics.median(values) * 1000:.0f} ms"

    parts = ("claim", "connect", "judge", "record", "finalise")
    print(f"Kiln per node at {size} nodes (median over {len(entries)} node tasks of the runs above):")
    print(
        "  "
        + ", ".join(f"{p} {med([e.parts.get(p, 0.0) for e in entries])}" for p in parts)
        + f"; recording {statistics.median([e.queries.get('record', 0) for e in entries]):.0f} queries"
    )
    ran, shared = statistics.median([e.ran for e in entries]), statistics.median([e.shared for e in entries])
    own = med([e.wall - e.parts.get("commands", 0.0) for e in entries])
    print(f"  commands sent to the node {ran:.0f}, answered from an identical earlier read {shared:.0f}")
    print(f"  Kiln's own time per node (task wall less its commands): {own}")
    print(f"  the node's commands: {med([e.parts.get('commands', 0.0) for e in entries])}")


if __name__ == "__main__":
    sys.exit(main())

"""Fan-out side by side: Kiln's `quick` plan against pdsh, clush and asyncssh on the same nodes.

    python bench/bench_fanout.py [--nodes 64] [--repeat 3]          (as root, like the testbed)
    python bench/bench_fanout.py --write-commands FILE              (no root, no testbed)

Brings up one testbed (real sshd in network namespaces, `python -m testbed`) of the largest size
asked (default sizes 8, 16, 32, 64) and starts ONE Kiln worker as the docs say, `celery -A worker
worker`, with no pool or concurrency flag and no KILN_WORKER_* variable: the defaults. Then, for
each size, on its first N nodes, one unmeasured warm-up round and `--repeat` measured rounds; in
each round every tool runs once, the tools taking turns to go first (round r starts with tool r),
so none is always the one on cold caches or on a machine still busy with the last tool's nodes.
Medians are reported with their spread (lowest-highest).

  - kiln: what a user runs, `kiln run CLUSTER quick --nodes NODESET --wait` (the `kiln` console
    script beside this Python, its bytecode cached as pip installs it), timed by the wall clock
    from starting it to its exit: its start-up, starting the run, the queue, the node tasks,
    closing the run, noticing the end and printing the verdicts. The run must end pass or warn
    (exit 0). Per-phase costs come from the run's own timestamps: start-up (CLI start to the run
    created), queue (to the first node task starting it), nodes (to the last result recorded),
    close (to the run finished) and notice (to the CLI's exit); and per node from the worker's
    per-task log line (worker/db.py's ledger): claim, SSH connect, the waits for a database
    connection (db_wait) and for the start marks (mark_started), judging, preparing the record
    (packing outputs and points), recording (queries), closing, Kiln's own time beside the node's
    commands. For every tool, the core-seconds the whole machine was busy while it ran (/proc/stat:
    node-side commands, sshd, the database and the tool itself), which on a saturated machine says
    what each tool cost where wall time only says how it was shared out. Meanwhile pg_stat_activity is sampled
    every 20 ms: the worker's PostgreSQL connections (application_name `kiln-worker`) at most at
    once and how many were opened; and the worker's CPU time per node (/proc) and peak memory.
  - the peers: pdsh (apt-get install -y pdsh), clush (the system one, apt-get install -y
    clustershell, else ClusterShell's module, a Kiln dependency) and asyncssh (the `bench` extra,
    pip install -e '.[bench]'; left out, with a note, when missing) run on every node exactly the
    commands Kiln's worker sends there (bench/fanout_peers.py node_side_commands): the plan's
    commands less the reads Kiln answers from an identical earlier read (worker/shared_reads.py:
    the probe runs once per node, not once per check), each as the shell line Kiln's transport
    sends (worker.ssh.remote_shell_line: `sh` printing its pid, the tag, env, `timeout -k`, the
    argv). pdsh and clush run them in ONE shell line per node, the probe script (Kiln feeds it on
    stdin) written once to a temporary file and fed from it; asyncssh opens one connection per
    node and runs them one channel each, stdin fed, in order: Kiln's own pattern on an event loop.
    Fan-out = N (every node at once, each tool's strongest setting), ssh with the testbed's
    ssh_config (key, known_hosts). The same script is written to WORKDIR/node-commands.sh, and by
    `--write-commands FILE` alone: what an independent measurement feeds its own peer.
Where things run (--node-cpus): the nodes are simulated on this machine, but a real cluster's
nodes never run on the controller's CPUs, so by default (auto) every node's sshd, and so every
command it starts, is pinned to all CPUs but the first quarter (at least one), and this process,
so every tool it starts (the worker, `kiln run`, the peers), to that first quarter, with the server
processes of the bench's database as they appear (Redis stays where the kernel puts it). The fan-out then says how well
each tool keeps the nodes busy, as on a cluster. `--node-cpus all` shares every CPU between nodes
and tools: a tool's own CPU (Kiln's worker, the database it records into) is then taken from the
nodes' work, which the machine-busy figures put in core-seconds.

Every peer must bring back every node's end marker with no failed command, Kiln's run must end
pass or warn, and the worker must have sent each node as many commands as the peers run (its log
says), else the bench says NOT VALID and exits 1.

`--worker-env NAME=VALUE` runs the worker with a setting changed (KILN_WORKER_POOL=prefork, ...) to
compare; the output then says it is not the defaults. The last lines read:
    layout: nodes on CPUs [...] ...; machine CPU busy, kiln C core-s, NAME C core-s
    fanout N nodes: kiln K s, fastest peer P s (NAME), ratio R
at the largest size, where the fastest peer is the fastest of pdsh, clush and asyncssh (those
installed) by median.

bench/fanout_independent.py checks this bench from its documentation alone: its own testbed, the
`kiln` CLI for the cluster, the nodes, the worker and the run, and pdsh fed the script
`--write-commands` writes, each timed by its own clock. Run it beside this one; the two should
agree within 10% (docs/development/testing.md).

PostgreSQL and Redis as for `make test`: --database-url (default
postgresql://postgres@127.0.0.1:5432/kiln_bench_fanout; a database whose name starts with
kiln_bench is dropped and created afresh) and --broker-url (default redis://127.0.0.1:6379/14,
flushed). KILN_BENCH_DATABASE_URL / KILN_BENCH_BROKER_URL override the defaults.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.fanout_peers import (
    WORKER_CONNECTIONS_SQL,
    LedgerLine,
    node_side_commands,
    node_side_line,
    parse_ledger,
    run_asyncssh,
    run_clush,
    run_pdsh,
)

REPO = Path(__file__).resolve().parent.parent
DEFAULT_SIZES = (8, 16, 32, 64)
CLUSTER = "bench"
WORKER_ENV_DEFAULTS = ("KILN_WORKER_POOL", "KILN_WORKER_CONCURRENCY", "KILN_WORKER_DB_CONNECTIONS")
# The phases of a Kiln run as its user waits for it, from the run's own timestamps (KilnRun.phases).
PHASES = ("start-up", "queue", "nodes", "close", "notice")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, action="append", help="a testbed size (repeatable; default 8 16 32 64)")
    parser.add_argument("--repeat", type=int, default=3, help="measured rounds per size (median; default 3)")
    parser.add_argument("--warmup", type=int, default=1, help="unmeasured rounds per size first (default 1)")
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
    parser.add_argument(
        "--node-cpus",
        default="auto",
        metavar="LIST",
        help="the CPUs the simulated nodes run on (each node's sshd, so every command it starts), e.g. 1 or "
        "2-7, the tools getting the others: a real cluster's nodes never run on the controller's CPUs. "
        "auto (the default): every CPU but the first quarter (at least one); all: nodes and tools share "
        "every CPU, so a tool's own CPU is taken from the nodes",
    )
    parser.add_argument(
        "--write-commands",
        type=Path,
        metavar="FILE",
        help="only write the shell script the peers run on each node to FILE (sh FILE runs it) and exit",
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
    os.environ["KILN_ENV_FILE"] = ""  # the bench's settings, not a .env the checkout may hold
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("kiln_init", verbosity=0)  # the data folder's keys: `kiln run` refuses to start without them
    call_command("migrate", verbosity=0, interactive=False)


# The server processes serving this bench's database (the worker's, `kiln run`'s): with the nodes on
# CPUs of their own, the database's work for Kiln is the controller's, so it runs on the tools' CPUs.
BACKENDS_SQL = "SELECT pid FROM pg_stat_activity WHERE backend_type = 'client backend' AND datname = current_database()"


class ConnectionSampler(threading.Thread):
    """Peak count of the worker's PostgreSQL connections (pg_stat_activity), sampled every 20 ms;
    with `tool_cpus`, every server process of the bench's database is put on those CPUs as it
    appears (a process of the machine's PostgreSQL that ends with its connection)."""

    def __init__(self, url: str, tool_cpus: set[int] | None = None) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.tool_cpus = tool_cpus
        self._pinned: set[int] = set()
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
                if self.tool_cpus:
                    self._pin([row[0] for row in conn.execute(BACKENDS_SQL)])
                self.peak = max(self.peak, len(pids))
                self.pids.update(pids)
                self.samples += 1
                self._done.wait(0.02)

    def _pin(self, pids: list[int]) -> None:
        for pid in set(pids) - self._pinned:
            try:
                os.sched_setaffinity(pid, self.tool_cpus or set())
            except OSError:  # ended meanwhile (ProcessLookupError), or on another host
                pass
            self._pinned.add(pid)

    def stop(self) -> int:
        self._done.set()
        self.join(10)
        return self.peak


class Worker:
    """`celery -A worker worker` exactly as the docs say (plus --loglevel=INFO for its log)."""

    def __init__(self, log_path: Path, env: dict[str, str], overrides: dict[str, str]) -> None:
        self.log_path = log_path
        self.env = {k: v for k, v in env.items() if k not in WORKER_ENV_DEFAULTS} | overrides
        self.env.pop("PYTHONDONTWRITEBYTECODE", None)  # as installed: bytecode cached (installed_env)
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
    seconds: float  # `kiln run --wait`: its start to its exit, by the wall clock
    exit_code: int
    run_id: int | None
    status: str
    peak_connections: int  # the worker's PostgreSQL connections, at most at once
    opened_connections: int  # distinct server processes seen: connections opened during the run
    phases: dict[str, float] = field(default_factory=dict)  # PHASES -> seconds
    error: str = ""


def kiln_argv() -> list[str]:
    """The `kiln` console script installed beside this Python (pip's entry point), else its module."""
    script = Path(sys.executable).with_name("kiln")
    return [str(script)] if script.exists() else [sys.executable, "-m", "portal.cli"]


def node_set(hostnames: list[str]) -> str:
    from ClusterShell.NodeSet import NodeSet

    return str(NodeSet.fromlist(hostnames))


def kiln_once(setup: Setup, size: int) -> KilnRun:
    """`kiln run bench quick --nodes ... --wait` on the first `size` nodes, timed from its start to
    its exit, with the worker's connections sampled meanwhile."""
    from portal.runs.models import Run

    argv = [*kiln_argv(), "run", CLUSTER, "quick", "--nodes", node_set(setup.hostnames[:size]), "--wait"]
    sampler = ConnectionSampler(setup.database_url, setup.tool_cpus)
    sampler.start()
    wall_start = time.time()
    started = time.monotonic()
    proc = subprocess.run(
        argv, capture_output=True, text=True, cwd=REPO, env=installed_env(), check=False, timeout=1800
    )
    seconds = time.monotonic() - started
    wall_end = time.time()
    peak = sampler.stop()
    last = (proc.stdout.strip().splitlines() or [""])[-1]  # "run N: STATUS (reason)"
    match = re.match(r"run (\d+): ", last)
    if match is None:
        return KilnRun(seconds, proc.returncode, None, "?", peak, len(sampler.pids), error=proc.stderr[-500:])
    run = Run.objects.get(pk=int(match[1]))
    phases = run_phases(run, wall_start, wall_end)
    return KilnRun(seconds, proc.returncode, run.pk, run.status, peak, len(sampler.pids), phases)


def installed_env() -> dict[str, str]:
    """This environment as an installed Kiln's commands see it: bytecode cached (pip compiles it at
    install), so PYTHONDONTWRITEBYTECODE, which a test environment may set, is left out."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def run_phases(run: Any, wall_start: float, wall_end: float) -> dict[str, float]:
    """Where a user's wait went, from the run's timestamps (all from this machine's clock)."""
    from django.db.models import Max

    last = run.results.aggregate(last=Max("finished_at"))["last"]
    marks = [wall_start, *(t.timestamp() for t in (run.created_at, run.started_at, last, run.finished_at)), wall_end]
    return {name: max(0.0, marks[i + 1] - marks[i]) for i, name in enumerate(PHASES)}


def quick_commands(cluster: Any) -> list[Any]:
    """Every command the quick plan's checks ask for on one node, in order."""
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
    hostnames: list[str]
    asked: int  # commands the plan's checks ask for per node
    sent: list[Any]  # the commands Kiln sends per node (the probe once), what the peers run
    line: str
    tools: list[str]
    database_url: str
    repeat: int
    warmup: int
    tool_cpus: set[int] | None = None  # the CPUs left to the tools when the nodes have their own


@dataclass
class Row:
    """One size's measured rounds."""

    size: int
    times: dict[str, list[float]]
    phases: dict[str, list[float]]
    peak_connections: int
    cpu_per_node: float
    busy: dict[str, list[float]]  # core-seconds the whole machine was busy while each tool ran

    def median(self, tool: str) -> float:
        return statistics.median(self.times[tool])

    def fastest_peer(self) -> str:
        return min((t for t in self.times if t != "kiln"), key=self.median)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.write_commands:
        return write_commands(args)
    sizes = sorted(set(args.nodes or DEFAULT_SIZES))
    node_cpus(args.node_cpus, os.sched_getaffinity(0))  # a bad list stops here, before any setup
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
    started = time.monotonic()
    testbed = Testbed(max(sizes), workdir / "testbed", name="bfan").up()
    print(f"testbed of {max(sizes)} nodes up in {time.monotonic() - started:.1f} s", flush=True)
    overrides = dict(item.split("=", 1) for item in args.worker_env)
    worker = Worker(workdir / "worker.log", installed_env(), overrides)
    try:
        layout, tool_cpus = pin_nodes(testbed, args.node_cpus)
        setup = _setup(args, testbed, worker, workdir)
        setup.tool_cpus = tool_cpus
        failures: list[str] = []
        kiln_runs: dict[int, list[int]] = {}
        rows = [_measure_size(setup, size, failures, kiln_runs.setdefault(size, [])) for size in sizes]
        print_table(rows, setup.tools)
        print_phases(rows)
        entries = kiln_overhead(workdir / "worker.log", kiln_runs[sizes[-1]])
        print_overhead(sizes[-1], entries)
        failures += commands_agree(entries, len(setup.sent))
        print(f"  the worker's peak memory (VmHWM) over the whole bench: {worker.peak_rss_mb():.0f} MB")
        return _verdict(rows[-1], failures, overrides, layout)
    finally:
        worker.stop()
        testbed.down()


def cpu_list(text: str) -> set[int]:
    """`1`, `2-7`, `0,2-3` as the set of CPUs it names."""
    cpus: set[int] = set()
    for part in text.split(","):
        low, _, high = part.partition("-")
        try:
            cpus.update(range(int(low), int(high or low) + 1))
        except ValueError:
            raise SystemExit(f"--node-cpus {text}: expected auto, all or a CPU list such as 1 or 2-7,9") from None
    return cpus


def node_cpus(text: str, available: set[int]) -> set[int]:
    """The CPUs `--node-cpus` gives the nodes: all of them for `all`; for `auto` every CPU but the
    first quarter (at least one) when there are two or more."""
    ordered = sorted(available)
    if text == "all" or (text == "auto" and len(ordered) < 2):
        return set(ordered)
    if text == "auto":
        return set(ordered[max(1, len(ordered) // 4) :])
    cpus = cpu_list(text)
    if not cpus or not cpus < available:
        raise SystemExit(f"--node-cpus {text}: name some but not all of this machine's CPUs {ordered}")
    return cpus


def pin_nodes(testbed: Any, text: str) -> tuple[str, set[int] | None]:
    """Every node's sshd on the CPUs `--node-cpus` names (what sshd starts, sessions and commands,
    inherits it) and this process on the others (what it starts, the worker, `kiln run` and the
    peers, inherits that): the two sides never take each other's CPUs, as a controller and its
    cluster's nodes do not; the server processes of the bench's database follow as they appear
    (ConnectionSampler). Returns the layout in words, for the output, and the tools' CPUs (None
    when shared)."""
    available = os.sched_getaffinity(0)
    cpus = node_cpus(text, available)
    if cpus == available:
        layout = f"nodes and tools sharing CPUs {sorted(available)}"
        print(layout, flush=True)
        return layout, None
    tools = available - cpus
    for node in testbed.nodes:
        pid = testbed.sshd_pid(node.hostname)
        if pid is None:
            raise SystemExit(f"{node.hostname}: its sshd has no pid to pin")
        os.sched_setaffinity(pid, cpus)
    os.sched_setaffinity(0, tools)
    layout = f"nodes on CPUs {sorted(cpus)}, the tools and their database processes on {sorted(tools)}"
    print(layout, flush=True)
    return layout, tools


def write_commands(args: argparse.Namespace) -> int:
    """--write-commands: the script every peer runs on each node, with no testbed and no worker."""
    workdir = Path(tempfile.mkdtemp(prefix="kiln-bench-commands-"))
    fresh_database(args.database_url)
    setup_django(args, workdir / "data")
    from portal.inventory.services import cluster_create

    cluster = cluster_create(name=CLUSTER, ssh_user="root", profile="H100-SXM-8")
    commands = quick_commands(cluster)
    sent = node_side_commands(commands)
    args.write_commands.write_text(node_side_line(sent) + "\n")
    print(f"{args.write_commands}: the {len(sent)} commands Kiln sends each node for the quick plan", end="")
    print(f" ({len(commands)} asked)")
    return 0


def _setup(args: argparse.Namespace, testbed: Any, worker: Worker, workdir: Path) -> Setup:
    """The cluster of the testbed's nodes in Kiln, the quick plan's commands, the worker started."""
    from portal.inventory.services import cluster_create, nodes_add

    cluster = cluster_create(
        name=CLUSTER,
        ssh_user=testbed.ssh_user,
        ssh_key_path=str(testbed.client_key_path),
        known_hosts_path=str(testbed.known_hosts_path),
        profile="H100-SXM-8",
    )
    for node in testbed.nodes:
        nodes_add(cluster=cluster, hostnames=node.hostname, addresses=node.address)
    commands = quick_commands(cluster)
    sent = node_side_commands(commands)
    line = node_side_line(sent)
    (workdir / "node-commands.sh").write_text(line + "\n")
    tools = ["kiln", *(name for name in ("pdsh", "clush") if _installed(name))]
    tools += ["asyncssh"] if _has_asyncssh() else []
    print(
        f"quick plan: {len(commands)} commands asked per node, {len(sent)} sent (identical reads once); "
        f"peers' shell line {len(line)} bytes ({workdir / 'node-commands.sh'}); one worker, default settings; "
        f"{args.warmup} warm-up + {args.repeat} measured rounds per size, tools taking turns to go first",
        flush=True,
    )
    worker.start()
    return Setup(
        testbed=testbed,
        worker=worker,
        hostnames=[n.hostname for n in testbed.nodes],
        asked=len(commands),
        sent=sent,
        line=line,
        tools=tools,
        database_url=args.database_url,
        repeat=args.repeat,
        warmup=args.warmup,
    )


def _measure_size(setup: Setup, size: int, failures: list[str], kiln_runs: list[int]) -> Row:
    """Every tool on the first `size` nodes, round after round, each round in another order."""
    row = Row(size, {t: [] for t in setup.tools}, {p: [] for p in PHASES}, 0, 0.0, {t: [] for t in setup.tools})
    cpu: list[float] = []
    for rnd in range(setup.warmup + setup.repeat):
        measured = rnd >= setup.warmup
        turn = rnd % len(setup.tools)
        order = setup.tools[turn:] + setup.tools[:turn]
        took: dict[str, float] = {}
        busy: dict[str, float] = {}
        notes = ""
        for tool in order:
            busy_before = machine_busy_seconds()
            if tool == "kiln":
                cpu_before = setup.worker.cpu_seconds()
                kiln = kiln_once(setup, size)
                took[tool] = kiln.seconds
                if kiln.exit_code != 0 or kiln.status not in ("pass", "warn"):
                    failures.append(
                        f"kiln run {kiln.run_id} on {size} nodes ended {kiln.status} (exit {kiln.exit_code}) "
                        f"{kiln.error}"
                    )
                if measured:
                    cpu.append((setup.worker.cpu_seconds() - cpu_before) / size)
                    row.peak_connections = max(row.peak_connections, kiln.peak_connections)
                    for phase, seconds in kiln.phases.items():
                        row.phases[phase].append(seconds)
                    if kiln.run_id is not None:
                        kiln_runs.append(kiln.run_id)
                    notes = (
                        f"; kiln: PG connections {kiln.peak_connections} at most ({kiln.opened_connections} opened), "
                        f"worker CPU {cpu[-1] * 1000:.0f} ms per node"
                    )
            else:
                took[tool] = _run_peer(setup, tool, size, failures)
            busy[tool] = machine_busy_seconds() - busy_before
        if measured:
            for tool, seconds in took.items():
                row.times[tool].append(seconds)
                row.busy[tool].append(busy[tool])
        label = f"run {rnd - setup.warmup + 1}" if measured else "warm-up"
        print(
            f"  {size} nodes, {label} ({' > '.join(order)}): "
            + ", ".join(f"{t} {took[t]:.2f} s" for t in setup.tools)
            + notes
            + "; machine CPU busy: "
            + ", ".join(f"{t} {busy[t]:.1f} s" for t in setup.tools),
            flush=True,
        )
    row.cpu_per_node = statistics.median(cpu) if cpu else 0.0
    return row


def machine_busy_seconds() -> float:
    """Core-seconds this machine has spent not idle since boot (/proc/stat): what a tool made the
    whole machine do (node-side commands, sshd, the database, the tool itself), where its wall time
    on a saturated machine only says how that work was shared out."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def _run_peer(setup: Setup, tool: str, size: int, failures: list[str]) -> float:
    """One peer once on the first `size` nodes."""
    nodes = setup.testbed.nodes[:size]
    if tool == "asyncssh":
        seconds, bad = run_asyncssh(setup.testbed, nodes, setup.sent)
    else:
        seconds, bad = {"pdsh": run_pdsh, "clush": run_clush}[tool](setup.testbed, nodes, setup.line)
    failures += [f"{tool} on {size} nodes: {b}" for b in bad]
    return seconds


def commands_agree(entries: list[LedgerLine], peers_run: int) -> list[str]:
    """The peers must run what Kiln's worker ran: its log counts the commands each node task sent."""
    if not entries:
        return ["no per-task lines in the worker log: cannot tell the peers ran what Kiln ran"]
    sent = sorted({e.ran for e in entries})
    if sent != [peers_run]:
        return [f"the worker sent {sent} commands per node, the peers ran {peers_run}"]
    return []


def _verdict(largest: Row, failures: list[str], overrides: dict[str, str], layout: str) -> int:
    """The last lines: what makes the numbers invalid, then Kiln against the fastest peer."""
    for failure in failures:
        print(f"NOT VALID: {failure}")
    if overrides:
        print(f"NOT THE DEFAULTS: the worker ran with {overrides}")
    peer = largest.fastest_peer()
    kiln_s, peer_s = largest.median("kiln"), largest.median(peer)
    busy = {tool: statistics.median(values) for tool, values in largest.busy.items() if values}
    print(f"layout: {layout}; machine CPU busy, kiln {busy.get('kiln', 0):.1f} core-s, {peer} {busy.get(peer, 0):.1f}")
    print(
        f"fanout {largest.size} nodes: kiln {kiln_s:.2f} s, fastest peer {peer_s:.2f} s ({peer}), "
        f"ratio {kiln_s / peer_s:.2f}"
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


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):6.2f} s ({min(values):.1f}-{max(values):.1f})"


def print_table(rows: list[Row], tools: list[str]) -> None:
    print()
    header = " | ".join(f"{t:>19}" for t in tools)
    print(f"nodes | {header} | fastest peer | kiln ratio | kiln peak PG conns | worker CPU/node")
    subhead = " | ".join(f"{'median (low-high)':>19}" for _ in tools)
    print(f"      | {subhead} |")
    for row in rows:
        peer = row.fastest_peer()
        cells = " | ".join(f"{_spread(row.times[t]):>19}" for t in tools)
        ratio = row.median("kiln") / row.median(peer)
        print(
            f"{row.size:>5} | {cells} | {peer:>12} | {ratio:>10.2f} | {row.peak_connections:>18} | "
            f"{row.cpu_per_node * 1000:>12.0f} ms"
        )
        print(
            "      machine CPU busy (core-s, median): "
            + ", ".join(f"{t} {statistics.median(row.busy[t]):.1f}" for t in tools if row.busy[t])
        )
    print()


def print_phases(rows: list[Row]) -> None:
    """Where `kiln run --wait`'s time went (medians), size by size."""
    print("kiln run --wait, by phase (median s): start-up = CLI start to run created, queue = to the first")
    print("node task, nodes = to the last result recorded, close = to the run finished, notice = to the CLI's exit")
    print("nodes | " + " | ".join(f"{p:>8}" for p in PHASES))
    for row in rows:
        cells = " | ".join(
            f"{statistics.median(row.phases[p]):>8.2f}" if row.phases[p] else f"{'-':>8}" for p in PHASES
        )
        print(f"{row.size:>5} | {cells}")
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

    parts = ("claim", "connect", "db_wait", "mark_started", "judge", "prepare", "record", "finalise")
    print(f"Kiln per node at {size} nodes (median over {len(entries)} node tasks of the measured runs):")
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

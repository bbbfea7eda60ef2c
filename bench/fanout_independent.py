"""An independent check of bench/bench_fanout.py: Kiln and pdsh on the same testbed nodes, measured
from the documentation alone, with none of the bench's code.

    python bench/fanout_independent.py --nodes 64 [--repeat 3]        (as root, like the testbed)

Only what the docs give a user: `python -m testbed up` for the nodes (its JSON description), the
`kiln` command line for everything Kiln does (`kiln init`, `kiln cluster create`, `kiln nodes
import`, `kiln worker`, `kiln run CLUSTER quick --wait`), `bench/bench_fanout.py --write-commands
FILE` for the shell script of the commands Kiln sends a node (the peer's work), and pdsh run as its
manual says, fan-out = every node. With --node-cpus LIST, every node's sshd is pinned to those CPUs
with `taskset -p -c` (what it starts inherits it) and this script, so every tool it starts, to the
other CPUs, as bench_fanout's default layout does (which also moves its database's server
processes; this script leaves PostgreSQL alone). Each tool is timed by this script's own clock
around the whole command, Kiln from starting `kiln run` to its exit. One unmeasured warm-up round, then `--repeat`
rounds, the two tools taking turns to go first. The last line reads:
    independent N nodes: kiln K s (low-high), pdsh P s (low-high), ratio R
to set beside bench_fanout's line for the same size: the two ratios should agree within 10%.

Its own database (--database-url, default postgresql://postgres@127.0.0.1:5432/kiln_bench_independent,
dropped and created afresh with dropdb/createdb; a second one, its name + `_commands`, for
--write-commands) and broker (--broker-url, default redis://127.0.0.1:6379/13, flushed by
`redis-cli`). KILN_BENCH_DATABASE_URL / KILN_BENCH_BROKER_URL do not apply: nothing is shared with
the bench.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

REPO = Path(__file__).resolve().parent.parent
DONE = "@@kiln-bench-done"  # how the script --write-commands writes ends, with its failure count


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, required=True)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--database-url", default="postgresql://postgres@127.0.0.1:5432/kiln_bench_independent")
    parser.add_argument("--broker-url", default="redis://127.0.0.1:6379/13")
    parser.add_argument("--dir", type=Path, default=None, help="work folder (default: a temp dir)")
    parser.add_argument(
        "--node-cpus",
        default="",
        metavar="LIST",
        help="pin every node's sshd to these CPUs with taskset (e.g. 1) and this script, so kiln, its worker "
        "and pdsh, to the others, as bench_fanout's --node-cpus auto does; default: every CPU shared",
    )
    return parser.parse_args()


def expand_cpus(text: str) -> list[int]:
    """taskset's CPU list (`0-3,5`) as numbers."""
    cpus: list[int] = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        cpus += range(int(low), int(high or low) + 1)
    return cpus


def sh(argv: list[str], env: dict[str, str], **kw: object) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, env=env, cwd=REPO, capture_output=True, text=True, check=False, **kw)  # type: ignore[call-overload]
    if proc.returncode != 0:
        raise SystemExit(
            f"{' '.join(argv[:4])} ... exited {proc.returncode}:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
        )
    return proc


def kiln_env(args: argparse.Namespace, work: Path) -> dict[str, str]:
    """The environment every `kiln` command runs in: this script's database, broker and data folder."""
    db = urlsplit(args.database_url)
    # As an installed Kiln runs: its bytecode cached (a test environment may set this variable).
    return dict(
        {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
        DATABASE_URL=args.database_url,
        CELERY_BROKER_URL=args.broker_url,
        KILN_DATA_DIR=str(work / "data"),
        KILN_ENV_FILE="",
        PGHOST=db.hostname or "127.0.0.1",
        PGPORT=str(db.port or 5432),
        PGUSER=db.username or "postgres",
    )


def prepare(args: argparse.Namespace, env: dict[str, str], kiln: str, script: Path) -> None:
    """Fresh databases and broker, `kiln init`, and the node-side script of Kiln's commands."""
    name = urlsplit(args.database_url).path.lstrip("/")
    for database in (name, f"{name}_commands"):
        sh(["dropdb", "--if-exists", "--force", database], env)
        sh(["createdb", database], env)
    sh(["redis-cli", "-u", args.broker_url, "flushdb"], env)
    sh([kiln, "init"], env)
    base = args.database_url.rpartition("/")[0]
    commands_url = f"{base}/{name}_commands"
    sh([sys.executable, "bench/bench_fanout.py", "--write-commands", str(script), "--database-url", commands_url], env)


def kiln_cluster(testbed: dict, env: dict[str, str], kiln: str, work: Path) -> None:
    """The testbed's nodes as the cluster `indep`, through the command line."""
    csv = work / "nodes.csv"
    csv.write_text(
        "hostname,address,ssh_port\n"
        + "".join(f"{n['hostname']},{n['address']},{n['port']}\n" for n in testbed["nodes"])
    )
    key, known = testbed["client_key_path"], testbed["known_hosts_path"]
    sh(
        [
            kiln,
            "cluster",
            "create",
            "indep",
            "--ssh-user",
            testbed["ssh_user"],
            "--ssh-key",
            key,
            "--known-hosts",
            known,
        ],
        env,
    )
    sh([kiln, "nodes", "import", "indep", str(csv)], env)


def start_worker(env: dict[str, str], kiln: str, work: Path) -> subprocess.Popen[bytes]:
    """`kiln worker`, waited for until it says it is ready."""
    log = (work / "worker.log").open("wb")
    worker = subprocess.Popen(
        [kiln, "worker"], env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    deadline = time.monotonic() + 120
    while b" ready." not in (work / "worker.log").read_bytes():
        if worker.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("kiln worker did not start: " + (work / "worker.log").read_text()[-2000:])
        time.sleep(0.2)
    return worker


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    """One command's wall time by this script's clock, and what it printed."""
    started = time.perf_counter()
    proc = subprocess.run(argv, env=env, cwd=REPO, capture_output=True, text=True, check=False)
    return time.perf_counter() - started, proc


def tools(testbed: dict, env: dict[str, str], kiln: str, script: Path) -> dict[str, Callable[[], float]]:
    """Kiln's `run --wait` and pdsh running the same commands on every node at once."""
    hosts = [n["hostname"] for n in testbed["nodes"]]
    line = script.read_text()
    pdsh_env = dict(env, PDSH_SSH_ARGS=f"-F {testbed['ssh_config_path']} -a -x -l%u %h")

    def run_kiln() -> float:
        took, proc = timed([kiln, "run", "indep", "quick", "--wait"], env)
        if proc.returncode != 0:
            raise SystemExit(f"kiln run exited {proc.returncode}:\n{proc.stdout[-2000:]}{proc.stderr[-1000:]}")
        return took

    def run_pdsh() -> float:
        took, proc = timed(["pdsh", "-R", "ssh", "-f", str(len(hosts)), "-w", ",".join(hosts), line], pdsh_env)
        good = sum(1 for out in proc.stdout.splitlines() if out.split(": ", 1)[-1] == f"{DONE} 0")
        if good != len(hosts):
            raise SystemExit(f"pdsh: {good} of {len(hosts)} nodes ran every command:\n{proc.stderr[-2000:]}")
        return took

    return {"kiln": run_kiln, "pdsh": run_pdsh}


def rounds(runners: dict[str, Callable[[], float]], nodes: int, repeat: int) -> dict[str, list[float]]:
    """A warm-up round, then `repeat` rounds, the tools taking turns to go first."""
    times: dict[str, list[float]] = {t: [] for t in runners}
    for rnd in range(1 + repeat):
        order = list(runners) if rnd % 2 == 0 else list(runners)[::-1]
        took = {t: runners[t]() for t in order}
        if rnd:
            for t, s in took.items():
                times[t].append(s)
        label = "run " + str(rnd) if rnd else "warm-up"
        print(f"  {nodes} nodes, {label}: " + ", ".join(f"{t} {took[t]:.2f} s" for t in runners), flush=True)
    return times


def main() -> int:
    args = parse_args()
    work = args.dir or Path(tempfile.mkdtemp(prefix="kiln-independent-"))
    work.mkdir(parents=True, exist_ok=True)
    kiln = shutil.which("kiln", path=str(Path(sys.executable).parent)) or "kiln"
    env = kiln_env(args, work)
    script = work / "node-commands.sh"
    prepare(args, env, kiln, script)
    up = sh(
        [
            sys.executable,
            "-m",
            "testbed",
            "up",
            "--nodes",
            str(args.nodes),
            "--name",
            "bind",
            "--dir",
            str(work / "tb"),
        ],
        env,
    )
    testbed = json.loads(up.stdout)
    worker = None
    try:
        if args.node_cpus:
            for node in testbed["nodes"]:
                pid = Path(node["pid_file"]).read_text().strip()
                sh(["taskset", "-p", "-c", args.node_cpus, pid], env)
            mine = sh(["taskset", "-c", "-p", str(os.getpid())], env).stdout.rsplit(":", 1)[-1].strip()
            others = sorted(set(expand_cpus(mine)) - set(expand_cpus(args.node_cpus)))
            if not others:
                raise SystemExit(f"--node-cpus {args.node_cpus} names every CPU ({mine}): leave some to the tools")
            sh(["taskset", "-p", "-c", ",".join(map(str, others)), str(os.getpid())], env)
            print(f"nodes' sshd pinned to CPUs {args.node_cpus}, this script and its tools to {others}", flush=True)
        kiln_cluster(testbed, env, kiln, work)
        worker = start_worker(env, kiln, work)
        times = rounds(tools(testbed, env, kiln, script), args.nodes, args.repeat)
        k, p = statistics.median(times["kiln"]), statistics.median(times["pdsh"])
        print(
            f"independent {args.nodes} nodes: kiln {k:.2f} s ({min(times['kiln']):.1f}-{max(times['kiln']):.1f}), "
            f"pdsh {p:.2f} s ({min(times['pdsh']):.1f}-{max(times['pdsh']):.1f}), ratio {k / p:.2f}"
        )
        return 0
    finally:
        if worker is not None and worker.poll() is None:
            os.killpg(worker.pid, 15)
            worker.wait(30)
        subprocess.run(
            [sys.executable, "-m", "testbed", "down", "--dir", str(work / "tb")], env=env, cwd=REPO, check=False
        )


if __name__ == "__main__":
    sys.exit(main())

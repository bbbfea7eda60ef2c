"""The peers of bench/bench_fanout.py (pdsh, clush, asyncssh) and the reading of the worker's log.

Every peer runs, on every node, exactly the commands Kiln's worker sends for the same plan
(`node_side_commands`): the plan's commands less those Kiln answers from an identical earlier read
(worker/shared_reads.py: the probe runs once per node), each as the shell line Kiln's transport
sends (worker.ssh.remote_shell_line, with a result's tag as a node task tags it), its stdin fed.
So the nodes do the same work whoever drives them; a peer's run counts only when every node printed
its end marker with no failed command.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from checks.core.base import Command, CommandOutput
from worker.shared_reads import SharedReads
from worker.ssh import remote_shell_line

DONE = "@@kiln-bench-done"
# The tag a node task gives its commands (worker/procgroup.py tag_for(result, attempt)): the peers'
# lines carry one of the same shape, so each starts the same `sh` that prints its pid and execs.
PEER_TAG = "1.1"
# The worker's connections to PostgreSQL: its client backends (a query's parallel workers show in
# pg_stat_activity under the same application_name, but are not connections).
WORKER_CONNECTIONS_SQL = (
    "SELECT pid FROM pg_stat_activity WHERE application_name = %s AND backend_type = 'client backend'"
    " AND datname = current_database()"
)


class _Recorder:
    """A transport that runs nothing: it notes each command it is asked to send, and answers it
    as completed at once (so SharedReads may hand its output on, as it does after a real read)."""

    def __init__(self) -> None:
        self.sent: list[Command] = []

    def run(self, command: Command, *, tag: str = "", on_start: Any = None) -> CommandOutput:
        self.sent.append(command)
        return CommandOutput(command=command, stdout="", stderr="", exit_code=0, duration_s=0.0)

    def close(self) -> None:
        pass


def node_side_commands(commands: list[Command]) -> list[Command]:
    """The commands a node task sends to its node for a plan whose checks ask for `commands`, in
    order: Kiln's own SharedReads decides which identical read-only reads it answers itself."""
    recorder = _Recorder()
    shared = SharedReads(recorder)  # type: ignore[arg-type]
    for command in commands:
        shared.run(command)
    return recorder.sent


def node_side_line(commands: list[Command]) -> str:
    """One shell line that runs `commands` in order on a node, as Kiln's transport runs each:
    the same `remote_shell_line` with a node task's tag, stdin fed from a file written once (heredoc) where the command
    has one, closed (/dev/null) where it has none, every output sent back. It ends with
    `@@kiln-bench-done F`, F = how many commands exited non-zero."""
    files: dict[str, str] = {}
    setup = ["d=$(mktemp -d) || exit 1", "f=0"]
    body = []
    for command in commands:
        redirect = "</dev/null"
        if command.stdin is not None:
            if command.stdin not in files:
                index = len(files)
                delimiter = f"KILN_BENCH_STDIN_{index}"
                if delimiter in command.stdin:
                    raise ValueError(f"stdin of {command.label} holds the heredoc delimiter {delimiter}")
                text = command.stdin if command.stdin.endswith("\n") else command.stdin + "\n"
                setup.append(f"cat >\"$d/in{index}\" <<'{delimiter}'\n{text}{delimiter}")
                files[command.stdin] = f'"$d/in{index}"'
            redirect = f"<{files[command.stdin]}"
        body.append(f"{remote_shell_line(command, PEER_TAG)} {redirect} || f=$((f+1))")
    tail = ['rm -rf "$d"', f"printf '{DONE} %s\\n' \"$f\""]
    return "\n".join([*setup, *body, *tail])


def _check_markers(output: str, hostnames: list[str]) -> list[str]:
    """Problems with a prefixed (`host: line`) output: nodes without their marker, or with failures."""
    seen: dict[str, str] = {}
    for line in output.splitlines():
        host, sep, rest = line.partition(": ")
        if sep and rest.startswith(DONE):
            seen[host.strip()] = rest[len(DONE) :].strip()
    problems = [f"{h}: no end marker" for h in hostnames if h not in seen]
    problems += [f"{h}: {n} command(s) failed" for h, n in seen.items() if n != "0"]
    return problems[:5]


def _timed(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, str]:
    started = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False, timeout=1800)
    return time.monotonic() - started, proc.stdout + proc.stderr


def run_pdsh(testbed: Any, nodes: list[Any], line: str) -> tuple[float, list[str]]:
    """pdsh over ssh, fan-out = every node at once."""
    if shutil.which("pdsh") is None:
        return float("nan"), ["pdsh is not installed (apt-get install -y pdsh)"]
    env = dict(os.environ, PDSH_SSH_ARGS=f"-F {testbed.ssh_config_path} -a -x -l%u %h")
    hosts = [n.hostname for n in nodes]
    argv = ["pdsh", "-R", "ssh", "-f", str(len(hosts)), "-w", ",".join(hosts), line]
    seconds, output = _timed(argv, env)
    return seconds, _check_markers(output, hosts)


def clush_argv() -> list[str]:
    """The system clush, or ClusterShell's own module (a Kiln dependency) when it is absent."""
    found = shutil.which("clush")
    return [found] if found else [sys.executable, "-m", "ClusterShell.CLI.Clush"]


def run_clush(testbed: Any, nodes: list[Any], line: str) -> tuple[float, list[str]]:
    """clush over ssh, fan-out = every node at once."""
    hosts = [n.hostname for n in nodes]
    argv = [*clush_argv(), "-f", str(len(hosts)), "-w", ",".join(hosts), "-l", testbed.ssh_user]
    argv += ["-o", f"-F {testbed.ssh_config_path}", line]
    seconds, output = _timed(argv)
    return seconds, _check_markers(output, hosts)


def run_asyncssh(testbed: Any, nodes: list[Any], commands: list[Command]) -> tuple[float, list[str]]:
    """One asyncssh connection per node, all at once; the commands in order, one channel each."""
    import logging

    import asyncssh

    logging.getLogger("asyncssh").setLevel(logging.WARNING)

    async def one(node: Any) -> str | None:
        async with asyncssh.connect(
            node.address,
            port=node.port,
            username=testbed.ssh_user,
            client_keys=[str(testbed.client_key_path)],
            known_hosts=str(testbed.known_hosts_path),
        ) as conn:
            failed = 0
            for command in commands:
                line = remote_shell_line(command, PEER_TAG)
                result = await conn.run(line, input=command.stdin, check=False)
                failed += result.exit_status != 0
            return f"{node.hostname}: {failed} command(s) failed" if failed else None

    async def everyone() -> list[str]:
        outcomes = await asyncio.gather(*(one(n) for n in nodes), return_exceptions=True)
        return [f"{type(o).__name__}: {o}" if isinstance(o, BaseException) else o for o in outcomes if o]

    started = time.monotonic()
    problems = asyncio.run(everyone())
    return time.monotonic() - started, problems[:5]


@dataclass
class LedgerLine:
    """One node task's line of the worker log (worker/db.py TaskLedger.line)."""

    run_id: int
    node_id: int
    wall: float
    parts: dict[str, float] = field(default_factory=dict)
    queries: dict[str, int] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)

    @property
    def ran(self) -> int:
        return int(self.notes.get("commands_run", 0))

    @property
    def shared(self) -> int:
        return int(self.notes.get("commands_shared", 0))


_LINE = re.compile(r"kiln task kiln\.run_node\((\d+), (\d+)\) ([\d.]+)s: (.*)$")
_PART = re.compile(r"^(\w+) ([\d.]+)s(?: (\d+)q)?(?: x\d+)?$")


def parse_ledger(log: str) -> list[LedgerLine]:
    """The node tasks' lines of a worker log."""
    entries = []
    for raw in log.splitlines():
        match = _LINE.search(raw)
        if not match:
            continue
        entry = LedgerLine(run_id=int(match[1]), node_id=int(match[2]), wall=float(match[3]))
        for piece in match[4].split(", "):
            key, eq, value = piece.partition("=")
            if eq:
                entry.notes[key] = value
                continue
            part = _PART.match(piece)
            if part:
                entry.parts[part[1]] = float(part[2])
                entry.queries[part[1]] = int(part[3] or 0)
        entries.append(entry)
    return entries

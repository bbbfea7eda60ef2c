"""Process groups of the commands Kiln starts on a node: learning them, and stopping them.

Every command runs under GNU `timeout`, which puts itself and the command in a process group of
their own (coreutils timeout.c: `setpgid (0, 0)` unless --foreground). The shell line that starts it
prints its own pid first, on stderr, before exec'ing `timeout` (same pid, so the pid is the group
id): the transport reads that line off stderr and hands the group to its caller while the command
runs. The command also carries `KILN_TAG=<result>.<attempt>` in its environment, so a later stop
only ever signals a group whose processes carry that tag: a pid reused by an unrelated process is
left alone.

Stopping is one shell script run on the node (over the open connection, or a new one): TERM the
group (`kill -TERM -PGID`: dash, Debian's sh, refuses `--`), wait up to a grace for it to go, then
KILL. A zombie has an empty environ, so it never counts as still running. It answers one word: `stopped` (went on TERM),
`killed` (needed KILL), `gone` (nothing of ours left), or `survived` (still there after KILL).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from typing import Protocol

from checks.core.base import Command, CommandOutput

PGID_LINE = re.compile(rb"kiln-pgid (\d+)")
# The first stderr line is at most this long; longer means the shell did not print ours.
_MAX_MARKER = 32
TAG_ENV = "KILN_TAG"
STOP_OUTCOMES = ("stopped", "killed", "gone", "survived")


def tag_for(result_id: int, attempt: int) -> str:
    """The tag of one attempt at one result: what its processes carry in KILN_TAG."""
    return f"{result_id}.{attempt}"


def tagged_argv(argv: list[str], tag: str) -> list[str]:
    """`argv` (an `env ... timeout ...` list) started by a POSIX sh that first prints its pid on
    stderr, then execs it with KILN_TAG set. sh is named, so the user's login shell (bash, zsh,
    csh, fish) only has to run one quoted simple command."""
    if argv and argv[0] == "env":
        rest = argv[1:]
    else:
        rest = argv
    script = 'printf "kiln-pgid %d\\n" "$$" >&2; exec "$@"'
    return ["sh", "-c", script, "kiln", "env", f"{TAG_ENV}={tag}", *rest]


class PgidSniffer:
    """Stands in for a stderr CappedStream: takes the `kiln-pgid N` first line off the stream
    (calling `on_pgid(N)` once), and feeds everything else through unchanged."""

    def __init__(self, sink: object, on_pgid: Callable[[int], None] | None) -> None:
        self.sink = sink
        self.on_pgid = on_pgid
        self.pgid: int | None = None
        self._buffer = b""
        self._done = False

    def __iadd__(self, chunk: bytes) -> PgidSniffer:
        self.feed(chunk)
        return self

    def feed(self, chunk: bytes) -> None:
        if self._done:
            self.sink.feed(chunk)  # type: ignore[attr-defined]
            return
        self._buffer += chunk
        end = self._buffer.find(b"\n")
        if end < 0:
            if len(self._buffer) > _MAX_MARKER:
                self.flush()
            return
        line, rest = self._buffer[:end], self._buffer[end + 1 :]
        match = PGID_LINE.fullmatch(line)
        self._done = True
        self._buffer = b""
        if match is None:
            self.sink.feed(line + b"\n" + rest)  # type: ignore[attr-defined]
            return
        self.pgid = int(match[1])
        if self.on_pgid is not None:
            self.on_pgid(self.pgid)
        if rest:
            self.sink.feed(rest)  # type: ignore[attr-defined]

    def flush(self) -> None:
        """The stream ended (or ran long) without a complete marker line: pass it on as it was."""
        if not self._done and self._buffer:
            self.sink.feed(self._buffer)  # type: ignore[attr-defined]
        self._buffer = b""
        self._done = True


def stop_script(pgid: int, tag: str, grace_s: float) -> str:
    """The node-side stop: TERM the group if a member carries our tag, KILL it after `grace_s`."""
    tries = max(1, int(grace_s / 0.2))
    return f"""P={int(pgid)}
T={shlex.quote(f"{TAG_ENV}={tag}")}
members() {{ pgrep -g "$P" 2>/dev/null || ps -e -o pid= -o pgid= 2>/dev/null | awk -v g="$P" '$2==g{{print $1}}'; }}
ours() {{
  for p in $(members); do
    tr '\\0' '\\n' 2>/dev/null < "/proc/$p/environ" | grep -qxF "$T" && return 0
  done
  return 1
}}
ours || {{ echo gone; exit 0; }}
kill -TERM "-$P" 2>/dev/null
i=0
while ours; do
  i=$((i+1))
  if [ "$i" -gt {tries} ]; then
    kill -KILL "-$P" 2>/dev/null
    sleep 0.2
    if ours; then echo survived; else echo killed; fi
    exit 0
  fi
  sleep 0.2
done
echo stopped
"""


def stop_command(pgid: int, tag: str, grace_s: float) -> Command:
    """The stop script as a command any transport runs (its own timeout covers the grace)."""
    return Command(argv=("sh", "-c", stop_script(pgid, tag, grace_s)), timeout=grace_s + 10, label="kiln-stop")


class Runs(Protocol):
    def run(self, command: Command) -> CommandOutput: ...


def stop_group(transport: Runs, *, pgid: int, tag: str, grace_s: float) -> str:
    """Stop a process group on the transport's node; returns one of STOP_OUTCOMES. Raises the
    transport's errors (TransportError) when the node cannot be reached."""
    output = transport.run(stop_command(pgid, tag, grace_s))
    word = output.stdout.strip().splitlines()[-1:] if output.stdout.strip() else []
    if word and word[0] in STOP_OUTCOMES:
        return word[0]
    raise StopFailed(
        f"stopping process group {pgid}: no answer from the node's stop script "
        f"(exit {output.exit_code}, stderr {output.stderr.strip()[:200]!r})"
    )


class StopFailed(RuntimeError):
    """The stop script ran but did not say what happened."""

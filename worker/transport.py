"""What every transport shares: the errors, how a node is reached (NodeTarget), the Transport
protocol, and output read under a byte cap. No fabric, paramiko or Django here: worker/ssh.py and
worker/local.py build on it, and callers pass in everything a transport needs."""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from checks.core.base import Command, CommandOutput
from worker.keepalive import default_count_max, default_interval_s

# Seconds the remote `timeout` waits after SIGTERM before SIGKILL: enough for a tool to flush its
# output, short enough that a hung NVML call cannot outlive the check by much.
REMOTE_KILL_GRACE_S = 5
# fabric's own run timeout sits above the remote `timeout` (+ grace), so the remote side always
# gets to kill its process first; fabric's limit is only the backstop for a dead channel.
CHANNEL_SLACK_S = 5
# Bytes kept of one stream (stdout or stderr) of one command, read while reading: ~1.8x the largest
# output a check expects (an 8-GPU 12 h burn-in's sampling JSON at 1 Hz, ~9 MB: checks/burnin/check.py,
# checks/probe/SCHEMA.md; one object per sample, before, it was ~60 MB and was cut). Past it
# the first 3/4 and the last 1/4 are kept, the middle is read and dropped, a marker line says how
# much was cut, and CommandOutput.truncated is set: a runaway tool cannot exhaust the worker's
# memory (8 localisation sub-runs at once: at most 2 x 8 x 16 MiB). KILN_COMMAND_OUTPUT_CAP overrides:
# read from the environment here, not settings, because this layer also runs without Django (bench,
# testbed) and takes nothing from the portal.
DEFAULT_OUTPUT_CAP = int(os.environ.get("KILN_COMMAND_OUTPUT_CAP", str(16 * 1024 * 1024)))


class TransportError(Exception):
    """Could not run anything on the node. `kind` is a short machine word for the reason."""

    kind = "transport"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class UnreachableError(TransportError):
    kind = "unreachable"


class SessionRefusedError(UnreachableError):
    """The connection is up but the host refused one more session on it (sshd's MaxSessions)."""

    kind = "session refused"


class HostKeyError(TransportError):
    kind = "host key"


class AuthenticationError(TransportError):
    kind = "authentication"


@dataclass(frozen=True)
class JumpHost:
    host: str
    user: str | None = None
    port: int = 22

    @classmethod
    def parse(cls, spec: str) -> JumpHost:
        """Parse `[user@]host[:port]`, the same syntax as ssh -J."""
        user, _, hostport = spec.rpartition("@")
        host, sep, port = hostport.partition(":")
        if not host:
            raise ValueError(f"jump host {spec!r}: expected [user@]host[:port]")
        try:
            port_number = int(port) if sep else 22
        except ValueError:
            raise ValueError(f"jump host {spec!r}: port {port!r} is not a number") from None
        return cls(host=host, user=user or None, port=port_number)


@dataclass(frozen=True)
class NodeTarget:
    """Everything needed to reach one node. Built by the portal from Cluster + Node."""

    hostname: str
    transport: str = "ssh"  # "ssh" | "local"
    address: str = ""
    port: int = 22
    user: str = "root"
    key_path: str = ""
    known_hosts: str = ""  # known_hosts file content
    pinned_fingerprint: str = ""  # "SHA256:..." (as ssh-keygen -l prints it)
    jump: str = ""
    connect_timeout: float = 10.0
    local_env: dict[str, str] = field(default_factory=dict)
    output_cap: int = DEFAULT_OUTPUT_CAP  # bytes kept per stream (head and tail), see DEFAULT_OUTPUT_CAP
    # Application keepalives while a command is in flight (worker/keepalive.py): a request every
    # `keepalive_s` of silence; the connection is dead after `keepalive_count` intervals unanswered.
    keepalive_s: float = field(default_factory=default_interval_s)
    keepalive_count: int = field(default_factory=default_count_max)

    @property
    def connect_host(self) -> str:
        return self.address or self.hostname


# Called with the process group of a command once it is known, while the command runs.
PgidCallback = Callable[[int], None]


class Transport(Protocol):
    def run(self, command: Command, *, tag: str = "", on_start: PgidCallback | None = None) -> CommandOutput:
        """Run one command. With a `tag`, the command carries KILN_TAG=tag and `on_start` gets
        its process group (worker/procgroup.py) as soon as it has started."""
        ...

    def close(self) -> None: ...


class CappedStream:
    """One output stream read under a byte cap: the first 3/4 of the cap and the last 1/4 are kept,
    everything between is counted and dropped as it arrives (memory stays under the cap)."""

    def __init__(self, cap: int) -> None:
        self.cap = max(2, cap)
        self.head_size = self.cap - self.cap // 4
        self.tail_size = self.cap - self.head_size
        self.head = bytearray()
        self.tail: deque[bytes] = deque()
        self.tail_bytes = 0
        self.total = 0
        self._lock = threading.Lock()  # the local transport reads in threads

    def __iadd__(self, chunk: bytes) -> CappedStream:
        self.feed(chunk)
        return self

    def feed(self, chunk: bytes) -> None:
        with self._lock:
            self._feed(chunk)

    def _feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.head_size - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if not chunk:
            return
        self.tail.append(bytes(chunk))
        self.tail_bytes += len(chunk)
        while self.tail_bytes - len(self.tail[0]) >= self.tail_size:
            self.tail_bytes -= len(self.tail.popleft())

    @property
    def cut(self) -> int:
        """Bytes read and dropped (0 when everything was kept)."""
        return max(0, self.total - self.head_size - self.tail_size)

    def text(self) -> str:
        return self.data().decode(errors="replace")

    def data(self) -> bytes:
        """The bytes kept, exactly as read: head, then (when something was cut) a marker line saying
        how much, then the tail. `text()` is their decoding."""
        with self._lock:
            if not self.cut:
                return b"".join([self.head, *self.tail])
            marker = f"\n[... {self.cut} bytes cut by Kiln: output over the {self.cap}-byte read cap; "
            marker += "head and tail kept ...]\n"
            tail: list[bytes | memoryview] = list(self.tail)
            tail[0] = memoryview(tail[0])[self.tail_bytes - self.tail_size :]  # the last tail_size bytes
            return b"".join([self.head, marker.encode(), *tail])  # one copy, however large


def output_of(
    command: Command,
    out: CappedStream,
    err: CappedStream,
    exit_code: int | None,
    timed_out: bool,
    duration: float,
) -> CommandOutput:
    truncated = bool(out.cut or err.cut)
    stdout, stderr = out.data(), err.data()
    return CommandOutput(
        command,
        stdout.decode(errors="replace"),
        stderr.decode(errors="replace"),
        exit_code,
        timed_out,
        duration,
        truncated=truncated,
        stdout_bytes=stdout,
        stderr_bytes=stderr,
    )


class LocalTransportRefused(TransportError):
    kind = "refused"

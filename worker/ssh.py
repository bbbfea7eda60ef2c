"""The one seam between Kiln and remote execution.

Everything that touches fabric/paramiko lives here. Callers get a `Transport` for one node and run
`checks.base.Command`s on it; they never build a shell string themselves.

Host keys are verified: against the cluster's known_hosts (paramiko RejectPolicy, never fabric's
default AutoAddPolicy) and, when set, against the node's pinned SHA256 fingerprint.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import logging
import os
import re
import shlex
import signal
import socket
import subprocess
import threading
import time
import typing
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import paramiko
from fabric import Config, Connection

from checks.base import Command, CommandOutput
from worker.keepalive import Liveness, default_count_max, default_interval_s
from worker.procgroup import TAG_ENV, PgidSniffer, tagged_argv

logger = logging.getLogger(__name__)

# Seconds the remote `timeout` waits after SIGTERM before SIGKILL: enough for a tool to flush its
# output, short enough that a hung NVML call cannot outlive the check by much.
REMOTE_KILL_GRACE_S = 5
# fabric's own run timeout sits above the remote `timeout` (+ grace), so the remote side always
# gets to kill its process first; fabric's limit is only the backstop for a dead channel.
CHANNEL_SLACK_S = 5
# Bytes kept of one stream (stdout or stderr) of one command, read while reading: ~5x the largest
# output a check expects (an 8-GPU 12 h burn-in's sampling JSON, ~3 MB, checks/burnin.py). Past it
# the first 3/4 and the last 1/4 are kept, the middle is read and dropped, a marker line says how
# much was cut, and CommandOutput.truncated is set: a runaway tool cannot exhaust the worker's
# memory (8 localisation pairs at once: at most 2 x 8 x 16 MiB). KILN_COMMAND_OUTPUT_CAP overrides:
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


def _output(
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


def _drain(channel: paramiko.Channel, out: CappedStream, err: CappedStream | PgidSniffer) -> bool:
    """Read what is available on both streams; True when anything was read."""
    got = False
    while channel.recv_stderr_ready():
        err += channel.recv_stderr(65536)
        got = True
    try:
        chunk = channel.recv(65536)
    except TimeoutError:
        return got
    if chunk:
        out += chunk
        return True
    return got


def fingerprint(key: paramiko.PKey) -> str:
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def remote_shell_line(command: Command, tag: str = "") -> str:
    """The one shell line sent to a node: env, then `timeout` around the argv, every part quoted.
    With a `tag`, a POSIX sh prints its pid (the group `timeout` makes) on stderr first and execs
    the rest with KILN_TAG set (worker/procgroup.py)."""
    argv = ["timeout", "-k", str(REMOTE_KILL_GRACE_S), f"{max(1, int(command.timeout))}", *command.argv]
    prefix = ["env", *(f"{k}={v}" for k, v in command.env.items())] if command.env else []
    if tag:
        return shlex.join(tagged_argv([*prefix, *argv], tag))
    return shlex.join([*prefix, *argv])


def _known_hosts(text: str) -> paramiko.HostKeys:
    keys = paramiko.HostKeys()
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            entry = paramiko.hostkeys.HostKeyEntry.from_line(line, lineno)
        except Exception as exc:  # bad base64 or key bytes: skip the line, as ssh does, never trust it
            logger.warning("known_hosts line %d skipped: %s", lineno, exc)
            continue
        if entry is None:
            continue
        for name in entry.hostnames:
            keys.add(name, entry.key.get_name(), entry.key)
    return keys


def _lookup_name(host: str, port: int) -> str:
    return host if port == 22 else f"[{host}]:{port}"


class _VerifyingPolicy(paramiko.MissingHostKeyPolicy):
    """Refuses hosts absent from the cluster's known_hosts (like ssh StrictHostKeyChecking=yes)."""

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        raise HostKeyError(
            f"host key for {hostname} is not in the cluster's known_hosts (offered {key.get_name()} "
            f"{fingerprint(key)}); add it to known_hosts or pin it on the node before connecting"
        )


def _client(known_hosts: paramiko.HostKeys) -> paramiko.SSHClient:
    client = paramiko.SSHClient()
    client.set_missing_host_key_policy(_VerifyingPolicy())
    host_keys = client.get_host_keys()
    for name in known_hosts.keys():
        for key_type, key in known_hosts[name].items():
            host_keys.add(name, key_type, key)
    return client


class SSHTransport:
    """One fabric Connection to one node, reused for every command of a run on that node."""

    def __init__(self, target: NodeTarget) -> None:
        self.target = target
        known = _known_hosts(target.known_hosts)
        config = Config(overrides={"load_ssh_configs": False, "run": {"hide": True, "warn": True}})
        connect_kwargs = {
            "look_for_keys": False,
            "allow_agent": False,
            "banner_timeout": target.connect_timeout,
            "auth_timeout": target.connect_timeout,
        }
        if target.key_path:
            connect_kwargs["key_filename"] = target.key_path
        gateway = None
        if target.jump:
            jump = JumpHost.parse(target.jump)
            gateway = Connection(
                jump.host,
                user=jump.user or target.user,
                port=jump.port,
                config=config,
                connect_timeout=target.connect_timeout,
                connect_kwargs=dict(connect_kwargs),
            )
            gateway.client = _client(known)
        self.connection = Connection(
            target.connect_host,
            user=target.user,
            port=target.port,
            config=config,
            gateway=gateway,
            connect_timeout=target.connect_timeout,
            connect_kwargs=connect_kwargs,
        )
        # Replace fabric's AutoAddPolicy client with one that verifies against known_hosts.
        self.connection.client = _client(known)
        self._opened = False
        self.liveness: Liveness | None = None
        # Set when a command outlived its remote `timeout` and the channel backstop had to end the
        # wait: the node could not even kill its own process, so it is hung; the next commands
        # fail at once with this reason instead of each waiting out its own timeout.
        self.hung: str | None = None

    def open(self) -> None:
        where = f"{self.target.hostname} ({self.target.connect_host}:{self.target.port})"
        try:
            self.connection.open()
        except HostKeyError:
            raise
        except paramiko.BadHostKeyException as exc:
            raise HostKeyError(
                f"host key mismatch for {where}: known_hosts has {fingerprint(exc.expected_key)}, "
                f"the host offered {fingerprint(exc.key)}; refusing to connect (possible man-in-the-middle, "
                f"or the node was reinstalled: update known_hosts after verifying)"
            ) from None
        except paramiko.AuthenticationException as exc:
            raise AuthenticationError(f"authentication failed for {self.target.user}@{where}: {exc}") from None
        except TimeoutError:
            raise UnreachableError(f"{where}: connection timed out after {self.target.connect_timeout:g}s") from None
        except (OSError, paramiko.SSHException, EOFError) as exc:
            raise UnreachableError(f"{where}: {exc or type(exc).__name__}") from None
        if self.target.pinned_fingerprint:
            offered = fingerprint(self.connection.transport.get_remote_server_key())
            if offered != self.target.pinned_fingerprint:
                self.close()
                raise HostKeyError(
                    f"host key mismatch for {where}: pinned {self.target.pinned_fingerprint}, "
                    f"the host offered {offered}; refusing to run anything"
                )
        transport = self.connection.transport
        if transport is not None and transport.sock is not None and hasattr(transport.sock, "setsockopt"):
            # Saves ~45 ms per exec on small commands (DESIGN.md, measured on these machines).
            try:
                transport.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        self.liveness = Liveness(
            transport,
            hostname=self.target.hostname,
            interval_s=self.target.keepalive_s,
            count_max=self.target.keepalive_count,
        )
        self._opened = True

    def run(self, command: Command, *, tag: str = "", on_start: PgidCallback | None = None) -> CommandOutput:
        """Run one command on a fresh channel of the node's connection.

        Plain paramiko channel I/O (no reader threads): stdin is sent whole and closed, then
        stdout/stderr are drained until the exit status arrives or the channel backstop passes.
        While it waits, keepalives with a reply deadline watch the node's sshd (worker/keepalive.py):
        a frozen sshd ends the wait with UnreachableError saying so.
        """
        if not self._opened:
            self.open()
        transport = self.connection.transport
        liveness = self.liveness
        if liveness is not None and liveness.dead_reason:
            raise UnreachableError(liveness.dead_reason)
        if self.hung:
            raise UnreachableError(self.hung)
        if transport is None or not transport.is_active():
            raise UnreachableError(f"{self.target.hostname}: connection lost before running {command.argv[0]}")
        if liveness is None:
            return self._run(transport, command, tag, on_start, None)
        with liveness.busy():
            try:
                return self._run(transport, command, tag, on_start, liveness)
            except UnreachableError:
                if liveness.dead_reason:
                    raise UnreachableError(liveness.dead_reason) from None
                raise

    def _open_session(self, transport: paramiko.Transport, liveness: Liveness | None) -> paramiko.Channel:
        """A new session on the connection. Refused while other commands of ours hold sessions:
        SessionRefusedError (sshd's MaxSessions; localisation then runs fewer pairs at once). Refused
        with none of ours open: our last session's close is still on its way to sshd, so a few
        short retries (a node with MaxSessions 1 refused back-to-back commands otherwise)."""
        for wait in (0.05, 0.1, 0.2, None):
            try:
                return transport.open_session(timeout=self.target.connect_timeout)
            except paramiko.ChannelException as exc:
                alone = liveness is None or liveness.in_flight <= 1
                if wait is None or not alone:
                    raise SessionRefusedError(
                        f"{self.target.hostname}: the host refused another session on the connection ({exc}); "
                        "too many at once for its sshd MaxSessions"
                    ) from None
                time.sleep(wait)
            except paramiko.SSHException as exc:
                if liveness is not None and liveness.dead_reason:
                    raise UnreachableError(liveness.dead_reason) from None
                if "Timeout" in str(exc) and transport.is_active():
                    raise UnreachableError(
                        f"sshd on {self.target.hostname} stopped answering: no reply to opening a session "
                        f"for {self.target.connect_timeout:g} s"
                    ) from None
                raise
        raise AssertionError("unreachable")  # the last wait is None: the loop returns or raises

    def _run(
        self,
        transport: paramiko.Transport,
        command: Command,
        tag: str,
        on_start: PgidCallback | None,
        liveness: Liveness | None,
    ) -> CommandOutput:
        started = time.monotonic()
        deadline = started + command.timeout + REMOTE_KILL_GRACE_S + CHANNEL_SLACK_S
        out, err = CappedStream(self.target.output_cap), CappedStream(self.target.output_cap)
        stderr: CappedStream | PgidSniffer = PgidSniffer(err, on_start) if tag else err
        try:
            channel = self._open_session(transport, liveness)
            channel.settimeout(0.2)
            channel.exec_command(remote_shell_line(command, tag))
            if command.stdin is not None:
                channel.sendall(command.stdin.encode())
            channel.shutdown_write()
            while True:
                drained = _drain(channel, out, stderr)
                if drained and liveness is not None:
                    liveness.alive()
                if channel.exit_status_ready() and not drained:
                    _drain(channel, out, stderr)
                    break
                if liveness is not None and liveness.dead_reason:
                    raise UnreachableError(liveness.dead_reason)
                if not drained and channel.eof_received:
                    time.sleep(0.01)  # output closed, exit status not yet in: do not spin
                if time.monotonic() > deadline:
                    channel.close()  # the backstop: closing the channel hangs up the remote session
                    self.hung = (
                        f"{self.target.hostname} is hung: {command.argv[0]} was still running "
                        f"{time.monotonic() - started:.0f} s after it started, past its {command.timeout:g} s "
                        f"limit and the node's own timeout -k {REMOTE_KILL_GRACE_S}"
                    )
                    if isinstance(stderr, PgidSniffer):
                        stderr.flush()
                    return _output(command, out, err, None, True, time.monotonic() - started)
            exit_code = channel.recv_exit_status()
            channel.close()
            if liveness is not None and liveness.dead_reason:
                raise UnreachableError(liveness.dead_reason)
            if exit_code == -1 and not transport.is_active():
                # The channel ended with the connection, not with the command: no exit status came.
                raise UnreachableError(f"{self.target.hostname}: connection lost while {command.argv[0]} ran")
        except (OSError, EOFError, paramiko.SSHException) as exc:
            if liveness is not None and liveness.dead_reason:
                raise UnreachableError(liveness.dead_reason) from None
            raise UnreachableError(f"{self.target.hostname}: connection lost: {exc or type(exc).__name__}") from None
        if isinstance(stderr, PgidSniffer):
            stderr.flush()
        duration = time.monotonic() - started
        # GNU timeout exits 124 (TERM) or 137 (KILL after the grace) when it had to stop the command.
        timed_out = exit_code in (124, 137) and duration >= command.timeout - 0.5
        return _output(command, out, err, exit_code, timed_out, duration)

    def close(self) -> None:
        try:
            self.connection.close()
        finally:
            self._opened = False


# Environment names of the worker's own secrets and credentials (database and broker URLs with
# their passwords, Django's secret key, the signing key, the metrics token, e-mail password, an SSH
# agent): never handed to a command that the local transport runs.
_SECRET_ENV = re.compile(
    r"SECRET|PASSWORD|PASSWD|TOKEN|CREDENTIAL|PRIVATE|_KEY$|_KEY_|^KILN_SIGNING|^SSH_AUTH_SOCK$"
    r"|^DATABASE_URL$|^CELERY_BROKER_URL$|^CELERY_RESULT_BACKEND$|^REDIS_URL$",
    re.IGNORECASE,
)


def local_base_env() -> dict[str, str]:
    """The worker's environment less its secrets: the base environment of local commands."""
    return {k: v for k, v in os.environ.items() if not _SECRET_ENV.search(k)}


def local_transport_allowed() -> bool:
    """KILN_ALLOW_LOCAL_TRANSPORT, server configuration: Django's setting where Django is
    configured (the portal and its workers), else the environment variable."""
    from django.conf import settings

    if settings.configured and hasattr(settings, "KILN_ALLOW_LOCAL_TRANSPORT"):
        return bool(settings.KILN_ALLOW_LOCAL_TRANSPORT)
    return os.environ.get("KILN_ALLOW_LOCAL_TRANSPORT", "").strip().lower() in ("1", "true", "yes", "on")


class LocalTransport:
    """Runs commands on the worker host itself: a single GPU server, or the demo's simulated nodes.

    Only `open_transport` decides whether a target may use it (KILN_ALLOW_LOCAL_TRANSPORT). The
    command's environment is the worker's own less its secrets, the target's `local_env` (set by
    server code only, e.g. kiln_demo: no form or admin page edits it) and the check's own env."""

    def __init__(self, target: NodeTarget) -> None:
        self.target = target

    def run(self, command: Command, *, tag: str = "", on_start: PgidCallback | None = None) -> CommandOutput:
        """Run the argv in its own process group; stdout and stderr are read while it runs, under
        the target's output cap (CappedStream), so a runaway tool cannot fill the worker's memory.
        Past the timeout (the process, or a descendant holding its output open) the whole group is
        killed and the output so far is returned with timed_out set. With a `tag`, the command
        carries KILN_TAG and `on_start` gets its process group (its pid: start_new_session)."""
        env = {**local_base_env(), **self.target.local_env, **command.env}
        if tag:
            env[TAG_ENV] = tag
        started = time.monotonic()
        try:
            process = subprocess.Popen(
                list(command.argv),
                stdin=subprocess.PIPE if command.stdin is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                start_new_session=True,  # own process group, so a timeout kills the whole tree
            )
        except OSError as exc:
            return CommandOutput(command, "", f"{command.argv[0]}: {exc.strerror}", 127, False, 0.0)
        if on_start is not None:
            on_start(process.pid)
        out, err = CappedStream(self.target.output_cap), CappedStream(self.target.output_cap)
        readers = [
            threading.Thread(target=_pump, args=(process.stdout, out), daemon=True),
            threading.Thread(target=_pump, args=(process.stderr, err), daemon=True),
        ]
        if command.stdin is not None:
            readers.append(threading.Thread(target=_feed_stdin, args=(process.stdin, command.stdin), daemon=True))
        for thread in readers:
            thread.start()
        deadline = started + command.timeout
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
            for thread in readers:
                thread.join(max(0.0, deadline - time.monotonic()))
            if any(thread.is_alive() for thread in readers):
                raise subprocess.TimeoutExpired(command.argv, command.timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait()
            for thread in readers:
                thread.join(REMOTE_KILL_GRACE_S)  # a descendant that left the group may hold a pipe
            return _output(command, out, err, None, True, time.monotonic() - started)
        return _output(command, out, err, process.returncode, False, time.monotonic() - started)

    def close(self) -> None:
        return None


def _pump(stream: typing.IO[bytes] | None, into: CappedStream) -> None:
    if stream is None:
        return
    with contextlib.suppress(OSError, ValueError):
        while chunk := stream.read1(65536):  # type: ignore[attr-defined]
            into.feed(chunk)


def _feed_stdin(stream: typing.IO[bytes] | None, text: str) -> None:
    if stream is None:
        return
    with contextlib.suppress(OSError, ValueError):  # BrokenPipeError: it exited without reading it all
        stream.write(text.encode())
    with contextlib.suppress(OSError, ValueError):
        stream.close()


class LocalTransportRefused(TransportError):
    kind = "refused"


def open_transport(target: NodeTarget, *, allow_local: bool | None = None) -> Transport:
    """Open a transport to a node. Raises TransportError subclasses with a reason a person can act on.

    `local` runs commands on this (worker) host: refused unless `allow_local`, or when it is None,
    the server's KILN_ALLOW_LOCAL_TRANSPORT. A database row alone never turns it on."""
    if target.transport == "local":
        allowed = local_transport_allowed() if allow_local is None else allow_local
        if not allowed:
            raise LocalTransportRefused(
                f"{target.hostname}: the local transport (commands on the worker host itself) is disabled "
                "on this server; set KILN_ALLOW_LOCAL_TRANSPORT=1 for a single-server or demo site"
            )
        return LocalTransport(target)
    if target.transport != "ssh":
        raise TransportError(f"unknown transport {target.transport!r}")
    transport = SSHTransport(target)
    transport.open()
    return transport

"""The one seam between Kiln and remote execution.

Everything that touches fabric/paramiko lives here. Callers get a `Transport` for one node and run
`checks.core.base.Command`s on it; they never build a shell string themselves. What every transport
shares is in worker/transport.py, the local transport in worker/local.py; both are re-exported
here, so callers import from this one module.

Host keys are verified: against the cluster's known_hosts (paramiko RejectPolicy, never fabric's
default AutoAddPolicy) and, when set, against the node's pinned SHA256 fingerprint.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import logging
import shlex
import socket
import time
from typing import Any

import paramiko
from fabric import Config, Connection

from checks.core.base import Command, CommandOutput
from worker.keepalive import Liveness
from worker.local import LocalTransport, local_transport_allowed
from worker.procgroup import PgidSniffer, tagged_argv
from worker.transport import (
    CHANNEL_SLACK_S,
    DEFAULT_OUTPUT_CAP,
    REMOTE_KILL_GRACE_S,
    AuthenticationError,
    CappedStream,
    HostKeyError,
    JumpHost,
    LocalTransportRefused,
    NodeTarget,
    PgidCallback,
    SessionRefusedError,
    Transport,
    TransportError,
    UnreachableError,
    output_of,
)

# The names callers have always imported from here (the transport's one seam).
__all__ = [
    "CHANNEL_SLACK_S",
    "DEFAULT_OUTPUT_CAP",
    "REMOTE_KILL_GRACE_S",
    "AuthenticationError",
    "CappedStream",
    "HostKeyError",
    "JumpHost",
    "LocalTransport",
    "LocalTransportRefused",
    "NodeTarget",
    "SSHTransport",
    "SessionRefusedError",
    "Transport",
    "TransportError",
    "UnreachableError",
    "fingerprint",
    "open_transport",
    "remote_shell_line",
]

logger = logging.getLogger(__name__)


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


@functools.lru_cache(maxsize=8)
def _known_hosts(text: str) -> paramiko.HostKeys:
    """The cluster's known_hosts, parsed once per text (a worker connects to every node of a cluster
    with the same text: parsing it per connection cost O(nodes) each, 0.1-0.2 s per node at 256
    nodes on a 2-core machine). Shared between threads, so never changed after it is built: a
    client copies the entries it needs (`_client`)."""
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
        # HostKeys.add looks for an entry to replace first (a scan of all of them); the parsed
        # entries go in as they are, as HostKeys.load does.
        keys._entries.append(entry)
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


def _client(known_hosts: paramiko.HostKeys, host: str, port: int) -> paramiko.SSHClient:
    """A client that trusts only what known_hosts says of `host`:`port` (the name paramiko looks
    its key up under): the entries of that one host, not a copy of every node's."""
    client = paramiko.SSHClient()
    client.set_missing_host_key_policy(_VerifyingPolicy())
    name = _lookup_name(host, port)
    host_keys = client.get_host_keys()
    for entry in known_hosts._entries:
        if entry.key is not None and known_hosts._hostname_matches(name, entry):
            host_keys.add(name, entry.key.get_name(), entry.key)  # a later line of a key type wins, as in load()
    return client


# AES-GCM first: an AEAD cipher's tag is checked inside `cryptography`, where with CTR and HMAC
# paramiko compares each packet's MAC byte by byte in Python (util.constant_time_bytes_eq); ~25% less
# client CPU per byte read (measured on the testbed's sshd). A server without it negotiates the
# rest of paramiko's list, unchanged.
PREFERRED_CIPHERS = ("aes128-gcm@openssh.com", "aes256-gcm@openssh.com")


class _QuietTransport(paramiko.Transport):
    """paramiko's Transport with its reader thread waking once a second, not ten times, while the
    connection is silent. The wake-up only looks for a close, a handshake past its timeout or a
    rekey to start, and a worker holds one connection per node it runs: 256 idle connections cost
    about 9% of a core at paramiko's 0.1 s and 2% at 1 s (measured on the testbed). A close still
    ends every wait at once (worker/keepalive.py closes a dead connection); the reader thread
    itself ends within the second after."""

    _active_check_timeout = 1.0


def _gcm_first_transport(sock: Any, **kwargs: Any) -> paramiko.Transport:
    """Kiln's Transport (_QuietTransport), with PREFERRED_CIPHERS ahead of paramiko's own order
    (SSHClient.connect's transport_factory)."""
    transport = _QuietTransport(sock, **kwargs)
    options = transport.get_security_options()
    options.ciphers = PREFERRED_CIPHERS + tuple(c for c in options.ciphers if c not in PREFERRED_CIPHERS)
    return transport


class SSHTransport:
    """One fabric Connection to one node, reused for every command of a run on that node."""

    def __init__(self, target: NodeTarget) -> None:
        self.target = target
        known = _known_hosts(target.known_hosts)
        config = Config(overrides={"load_ssh_configs": False, "run": {"hide": True, "warn": True}})
        connect_kwargs: dict[str, object] = {
            "look_for_keys": False,
            "allow_agent": False,
            "banner_timeout": target.connect_timeout,
            "auth_timeout": target.connect_timeout,
            "transport_factory": _gcm_first_transport,
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
            gateway.client = _client(known, jump.host, jump.port)
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
        self.connection.client = _client(known, target.connect_host, target.port)
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
            # Saves ~45 ms per exec on small commands (measured on 2-core machines).
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
        SessionRefusedError (sshd's MaxSessions; localisation then runs fewer sub-runs at once). Refused
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
            if not self._wait(channel, out, stderr, liveness, deadline):
                channel.close()  # the backstop: closing the channel hangs up the remote session
                self.hung = (
                    f"{self.target.hostname} is hung: {command.argv[0]} was still running "
                    f"{time.monotonic() - started:.0f} s after it started, past its {command.timeout:g} s "
                    f"limit and the node's own timeout -k {REMOTE_KILL_GRACE_S}"
                )
                if isinstance(stderr, PgidSniffer):
                    stderr.flush()
                return output_of(command, out, err, None, True, time.monotonic() - started)
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
        return output_of(command, out, err, exit_code, timed_out, duration)

    @staticmethod
    def _wait(
        channel: paramiko.Channel,
        out: CappedStream,
        stderr: CappedStream | PgidSniffer,
        liveness: Liveness | None,
        deadline: float,
    ) -> bool:
        """Drain the channel until its exit status is in (True) or the backstop passes (False)."""
        while True:
            drained = _drain(channel, out, stderr)
            if drained and liveness is not None:
                liveness.alive()
            if channel.exit_status_ready() and not drained:
                _drain(channel, out, stderr)
                return True
            if liveness is not None and liveness.dead_reason:
                raise UnreachableError(liveness.dead_reason)
            if not drained and channel.eof_received:
                time.sleep(0.01)  # output closed, exit status not yet in: do not spin
            if time.monotonic() > deadline:
                return False

    def close(self) -> None:
        try:
            self.connection.close()
        finally:
            self._opened = False


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

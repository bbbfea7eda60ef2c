"""The `local` transport: commands on the worker host itself (a single GPU server, the demo's
simulated nodes). Only worker.ssh.open_transport decides whether a target may use it."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import threading
import time
import typing

from checks.core.base import Command, CommandOutput
from worker.procgroup import TAG_ENV
from worker.transport import REMOTE_KILL_GRACE_S, CappedStream, NodeTarget, PgidCallback, output_of

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
    from django.conf import settings  # here, not at the top: the transport also runs without Django

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
            return output_of(command, out, err, None, True, time.monotonic() - started)
        return output_of(command, out, err, process.returncode, False, time.monotonic() - started)

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

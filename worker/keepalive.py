"""Application-level SSH keepalives with a reply deadline, for connections waiting on a command.

paramiko's `set_keepalive` sends requests that want no reply, so it never notices a missing one,
and TCP keepalive is answered by the node's kernel even when sshd is frozen (SIGSTOP, a hung
node whose network stack still runs). What notices is what ssh(1) does with ServerAliveInterval:
a `keepalive@openssh.com` global request that wants a reply (OpenSSH answers it, with a failure
message, which is an answer), and a connection declared dead when none comes back.

One monitor thread per process watches every connection that has a command in flight. A
connection with no sign of life (channel data, or a reply) for `interval_s` gets a request; when
`interval_s * count_max` more pass without a reply, the monitor records why and closes the
connection, which wakes every call blocked on it (a channel read, `exec_command`, `open_session`).
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

logger = logging.getLogger(__name__)

# How often the monitor looks at its connections: a tenth of ssh's usual keepalive interval keeps
# the detection time within a second of interval x (count_max + 1).
TICK_S = 0.5


def _setting(name: str, default: float) -> float:
    """A number from Django's settings where Django is configured (portal, workers), else the
    environment, else the default (portal/settings.py documents each)."""
    from django.conf import settings  # here, not at the top: the transport also runs without Django

    if settings.configured and hasattr(settings, name):
        return float(getattr(settings, name))
    return float(os.environ.get(name, default))


def default_interval_s() -> float:
    """KILN_SSH_KEEPALIVE_S (5): seconds of silence before a keepalive request is sent."""
    return _setting("KILN_SSH_KEEPALIVE_S", 5)


def default_count_max() -> int:
    """KILN_SSH_KEEPALIVE_COUNT (3): intervals a request may go unanswered before the connection is dead."""
    return int(_setting("KILN_SSH_KEEPALIVE_COUNT", 3))


class Liveness:
    """The keepalive state of one SSH connection (a paramiko Transport)."""

    def __init__(self, transport: Any, *, hostname: str, interval_s: float, count_max: int) -> None:
        self.transport = transport
        self.hostname = hostname
        self.interval_s = max(0.1, float(interval_s))
        self.count_max = max(1, int(count_max))
        self.dead_reason: str | None = None
        self._last_life = time.monotonic()
        self._probe: threading.Thread | None = None
        self._probe_sent = 0.0
        self._probe_answered = threading.Event()
        self._busy = 0
        self._lock = threading.Lock()

    def alive(self) -> None:
        """Something came from the node: it is not frozen."""
        self._last_life = time.monotonic()

    @contextmanager
    def busy(self) -> Iterator[None]:
        """While a command is in flight on the connection, the monitor watches it."""
        with self._lock:
            self._busy += 1
            if self._busy == 1:
                self._last_life = time.monotonic()  # idle time before the command is not silence
        MONITOR.watch(self)
        try:
            yield
        finally:
            with self._lock:
                self._busy -= 1

    @property
    def in_flight(self) -> int:
        """Commands running on the connection now."""
        return self._busy

    @property
    def watched(self) -> bool:
        return self._busy > 0 and self.dead_reason is None

    def check(self, now: float | None = None) -> None:
        """One look (the monitor calls it every tick): send a probe when silent, judge the one sent."""
        now = time.monotonic() if now is None else now
        with self._lock:
            if not self.watched:
                return
            if self._probe is not None:
                if self._probe_answered.is_set():
                    self._probe = None
                    self._last_life = now  # answered within the last tick
                elif now - self._probe_sent >= self.interval_s * self.count_max:
                    silent = now - self._last_life
                    self.dead_reason = (
                        f"sshd on {self.hostname} stopped answering: no reply to keepalives for {silent:.0f} s"
                    )
                else:
                    return
            if self.dead_reason is None:
                if now - self._last_life >= self.interval_s and self._probe is None:
                    self._send_probe(now)
                return
        logger.warning("%s", self.dead_reason)
        try:
            self.transport.close()  # wakes every call blocked on the connection
        except Exception:  # closing a broken connection may itself fail; the reason is recorded
            logger.debug("closing %s failed", self.hostname, exc_info=True)

    def _send_probe(self, now: float) -> None:
        self._probe_answered.clear()
        self._probe_sent = now
        answered = self._probe_answered
        transport = self.transport

        def ask() -> None:
            try:
                # Blocks until the reply (success or failure: both are answers) or the connection ends.
                transport.global_request("keepalive@openssh.com", wait=True)
                if transport.is_active():
                    answered.set()
            except Exception:  # a connection torn down under us: the command's own read reports it
                logger.debug("keepalive to %s failed", self.hostname, exc_info=True)

        self._probe = threading.Thread(target=ask, name=f"kiln-keepalive-{self.hostname}", daemon=True)
        self._probe.start()


class KeepaliveMonitor:
    """The one thread per process that ticks every watched connection."""

    def __init__(self, tick_s: float = TICK_S) -> None:
        self.tick_s = tick_s
        self._watched: weakref.WeakSet[Liveness] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def watch(self, liveness: Liveness) -> None:
        with self._lock:
            self._watched.add(liveness)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="kiln-keepalive", daemon=True)
                self._thread.start()

    def _loop(self) -> None:
        while True:
            time.sleep(self.tick_s)
            with self._lock:
                watched = [w for w in self._watched if w.watched]
            for liveness in watched:
                try:
                    liveness.check()
                except Exception:  # one connection's trouble must not stop the others' watch
                    logger.exception("keepalive check of %s failed", liveness.hostname)


MONITOR = KeepaliveMonitor()

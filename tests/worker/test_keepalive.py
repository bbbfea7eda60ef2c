"""Keepalives with a reply deadline (worker/keepalive.py), against a fake paramiko transport whose
replies the test holds back: a frozen sshd is declared dead after interval x count_max of silence,
its connection is closed (waking whatever waits on it), and an answering one never is."""

from __future__ import annotations

import threading
import time

from worker.keepalive import KeepaliveMonitor, Liveness


class FakeTransport:
    """Answers global requests only while `answering` is set; `close()` ends pending ones."""

    def __init__(self) -> None:
        self.answering = threading.Event()
        self.answering.set()
        self.closed = threading.Event()
        self.requests = 0

    def global_request(self, kind: str, wait: bool = True) -> None:
        assert kind == "keepalive@openssh.com" and wait
        self.requests += 1
        while not self.answering.is_set():
            if self.closed.wait(0.01):
                return None  # paramiko returns None once the transport is no longer active
        return None  # OpenSSH answers keepalive@openssh.com with a failure: still an answer

    def is_active(self) -> bool:
        return not self.closed.is_set()

    def close(self) -> None:
        self.closed.set()


def watch(transport: FakeTransport, interval: float = 0.2, count: int = 3) -> tuple[Liveness, KeepaliveMonitor]:
    liveness = Liveness(transport, hostname="gpu07", interval_s=interval, count_max=count)
    return liveness, KeepaliveMonitor(tick_s=0.02)


def test_it_declares_a_silent_sshd_dead_and_closes_its_connection() -> None:
    transport = FakeTransport()
    transport.answering.clear()  # SIGSTOP
    liveness, monitor = watch(transport)
    started = time.monotonic()
    with liveness.busy():
        monitor.watch(liveness)
        assert transport.closed.wait(3)
    took = time.monotonic() - started

    assert 0.2 + 3 * 0.2 <= took < 3  # one interval of silence, then count_max unanswered (+ ticks)
    assert liveness.dead_reason is not None
    assert liveness.dead_reason.startswith("sshd on gpu07 stopped answering: no reply to keepalives for ")
    assert transport.requests == 1  # one request in flight at a time


def test_it_keeps_an_answering_sshd_alive_however_long_the_command_is_silent() -> None:
    transport = FakeTransport()
    liveness, monitor = watch(transport, interval=0.05)
    with liveness.busy():
        monitor.watch(liveness)
        time.sleep(1.0)
    assert liveness.dead_reason is None and not transport.closed.is_set()
    assert transport.requests >= 5


def test_output_counts_as_life_and_an_idle_connection_is_not_watched() -> None:
    transport = FakeTransport()
    transport.answering.clear()
    liveness, monitor = watch(transport, interval=0.2)
    monitor.watch(liveness)
    time.sleep(0.5)  # no command in flight: silence is expected
    assert transport.requests == 0
    with liveness.busy():
        for _ in range(10):  # output flowing
            liveness.alive()
            time.sleep(0.05)
        assert transport.requests == 0 and liveness.dead_reason is None


def test_a_late_answer_within_the_deadline_keeps_it_alive() -> None:
    transport = FakeTransport()
    transport.answering.clear()
    liveness, monitor = watch(transport, interval=0.2, count=3)
    with liveness.busy():
        monitor.watch(liveness)
        time.sleep(0.5)  # a request is out, unanswered for 0.3 s of its 0.6 s
        transport.answering.set()
        time.sleep(0.8)
    assert liveness.dead_reason is None and not transport.closed.is_set()

"""Fixtures of the fault-matrix suite: real Celery workers and beat, the sshd testbed as cluster
`tb` (tests/conftest.py), long burn-ins, and the node-side processes to look for.

Every test here breaks something on purpose (a worker, the broker, an sshd) and asserts the end
state a person would expect, and how long it took to get there."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, WorkerProcess, _flush_broker

pytestmark = pytest.mark.integration


class BeatProcess:
    """A real `celery beat` with the DatabaseScheduler, as in production: its reaper thread runs a
    pass every KILN_REAPER_INTERVAL_S (portal/execution/reaping.py)."""

    def __init__(self, log_path: Path, env: dict[str, str]) -> None:
        self.log_path = log_path
        self.env = env
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        log = self.log_path.open("ab")
        schedule = str(self.log_path.with_suffix(".db"))
        self.process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "worker", "beat", "--loglevel=INFO",
             "-S", "django_celery_beat.schedulers:DatabaseScheduler", "--schedule", schedule],
            cwd=REPO, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while b"beat: Starting..." not in self.log_path.read_bytes():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"celery beat did not start:\n{self.log_path.read_text(errors='replace')}")
            time.sleep(0.2)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)


@pytest.fixture
def processes(real_services: None, transactional_db: None, tmp_path: Path) -> Iterator[Callable[..., Any]]:
    """Starts workers (`processes("worker", concurrency=N)`) and beat (`processes("beat")`) on the
    test database and a flushed broker; kills whatever is left at the end."""
    started: list[Any] = []
    _flush_broker()

    def start(kind: str, *, concurrency: int = 4) -> Any:
        name = f"{kind}-{len(started) + 1}"
        if kind == "worker":
            process: Any = WorkerProcess(tmp_path / f"{name}.log", concurrency=concurrency)
        else:
            process = BeatProcess(tmp_path / f"{name}.log", WorkerProcess(tmp_path / "env.log").env())
        started.append(process)
        process.start()
        return process

    yield start
    for process in reversed(started):
        if isinstance(process, WorkerProcess):
            process.kill()
        else:
            process.stop()
    _flush_broker()


@pytest.fixture
def soak_plan(transactional_db: None) -> Callable[..., Any]:
    """A plan of a burn-in of `seconds` (gpu_burn under the sampling probe), then `ecc-health`."""
    from portal.catalog.models import CheckDefinition, TestPlan, TestPlanItem

    def make(seconds: int) -> TestPlan:
        plan = TestPlan.objects.create(slug=f"soak-{seconds}", name=f"{seconds} s burn-in")
        TestPlanItem.objects.create(
            plan=plan,
            check_definition=CheckDefinition.objects.get(slug="burn-in"),
            order=0,
            param_overrides={"duration_s": seconds, "sample_interval_s": 1},
        )
        TestPlanItem.objects.create(plan=plan, check_definition=CheckDefinition.objects.get(slug="ecc-health"), order=1)
        return plan

    return make


def state_file(testbed: Any, hostname: str) -> Path:
    return testbed.node(hostname).state_file


class PrivateRedis:
    """A redis-server of this test alone (no persistence, like the machine's), so that it can be
    shut down and started again mid-run without touching the broker other tests use."""

    def __init__(self, log_path: Path) -> None:
        import socket

        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        import redis

        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=self.log_path.open("ab"), stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + 20
        while True:
            try:
                if redis.Redis.from_url(self.url, socket_timeout=1).ping():
                    return
            except redis.ConnectionError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not start:\n{self.log_path.read_text(errors='replace')}")
            time.sleep(0.05)

    def stop(self) -> None:
        """SIGKILL: the broker dies with every message it held (nothing is kept on disk)."""
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)


def _point_celery_at(url: str) -> None:
    """This process's Celery app sends to `url` from now on (its producer pools are rebuilt)."""
    from worker.celery import app

    app.conf.broker_url = url
    # Forget the pools, do not close them: kombu keeps one per broker URL in a process-wide registry
    # (kombu.pools), and the one for the usual broker is needed again after this test.
    app._pool = None
    app.amqp._producer_pool = None


@pytest.fixture
def private_broker(settings: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[PrivateRedis]:
    """Workers, beat and this process use a Redis of this test's own (request it before
    `processes`): the test may kill and restart it."""
    from worker.celery import app

    if shutil.which("redis-server") is None:
        pytest.fail("redis-server is not installed (Debian package redis-server)")
    server = PrivateRedis(tmp_path / "redis.log")
    server.start()
    before = app.conf.broker_url
    settings.CELERY_BROKER_URL = server.url
    monkeypatch.setenv("CELERY_BROKER_URL", server.url)  # Celery's conf.broker_url reads it before any setting
    _point_celery_at(server.url)
    try:
        yield server
    finally:
        monkeypatch.undo()
        _point_celery_at(before)
        server.stop()

"""Fixtures of the fault-matrix suite: real Celery workers and beat, the sshd testbed as cluster
`tb` (tests/conftest.py), long burn-ins, and the node-side processes to look for.

Every test here breaks something on purpose (a worker, the broker, an sshd) and asserts the end
state a person would expect, and how long it took to get there."""

from __future__ import annotations

import os
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
    """A real `celery beat` with the DatabaseScheduler: it sends kiln.reap every
    KILN_REAPER_INTERVAL_S (the PeriodicTask made at migrate), as in production."""

    def __init__(self, log_path: Path, env: dict[str, str]) -> None:
        self.log_path = log_path
        self.env = env
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        from portal.health.services import reaper_schedule_ensure

        reaper_schedule_ensure()
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

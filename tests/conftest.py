"""Shared fixtures: users with roles, a real Celery worker process, the sshd testbed as a cluster."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from django.conf import settings

pytest_plugins = ["testbed.pytest_plugin", "tests.ci_guard"]

REPO = Path(__file__).resolve().parent.parent
IN_CI = os.environ.get("CI", "").lower() == "true"


# `make test` runs several pytest processes (pytest-xdist, `--dist loadgroup`). What a test used to
# share with every other process is now its process's own: the test database (pytest-django adds
# `_gw<N>`), the broker's Redis database (the base database + N, below), the Celery workers and beat
# it starts (bound to both), the sshd testbed (names and subnet unique to the process,
# testbed/cluster.py) and the live server with its Chromium. Only what the machine truly has one of
# is serialized: the tests holding an `exclusive` resource are one xdist group, run by one process,
# in order, beside the rest.
EXCLUSIVE_MARK = "exclusive"
# Fixtures that hold an exclusive resource (tests without one carry `@pytest.mark.exclusive(...)`):
# `demo` and `demo_settings` run kiln_demo, whose simulated nodes listen on fixed loopback addresses.
EXCLUSIVE_FIXTURES: dict[str, str] = {"demo": "demo", "demo_settings": "demo"}
# The one group: a test naming two resources would otherwise have to be in two groups at once (the
# demo certificate loads every core and uses the demo's folder), and xdist gives a test one.
EXCLUSIVE_GROUP = "machine"


def exclusive_resources(item: pytest.Item) -> set[str]:
    """The resources of the machine this test must hold alone (its `exclusive` marks and fixtures)."""
    resources = {str(arg) for mark in item.iter_markers(EXCLUSIVE_MARK) for arg in mark.args}
    fixtures = set(getattr(item, "fixturenames", ()))
    resources |= {resource for name, resource in EXCLUSIVE_FIXTURES.items() if name in fixtures}
    return resources


def xdist_group_of(item: pytest.Item) -> str | None:
    return EXCLUSIVE_GROUP if exclusive_resources(item) else None


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the group marks into node ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        group = xdist_group_of(item)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))


def broker_url_of_process(url: str, worker: str | None) -> str:
    """The broker URL of xdist process `worker` (gw0, gw1, ...): a Redis URL's database + the
    process's index, so tests that flush or read the queue never see another process's messages.
    Without xdist (or without Redis) the URL as given."""
    if not worker or not url.startswith("redis"):
        return url
    parts = urlsplit(url)
    base = int(parts.path.strip("/") or 0)
    return urlunsplit(parts._replace(path=f"/{base + int(worker.removeprefix('gw'))}"))


def _use_this_process_broker() -> None:
    url = broker_url_of_process(settings.CELERY_BROKER_URL, os.environ.get("PYTEST_XDIST_WORKER"))
    if url == settings.CELERY_BROKER_URL:
        return
    # Celery's conf.broker_url reads the environment before any setting; workers inherit both.
    os.environ["CELERY_BROKER_URL"] = url
    settings.CELERY_BROKER_URL = url
    from worker.celery import app

    app.conf.broker_url = url


_use_this_process_broker()

# Passwords hashed in one round (tests/hashers.py), the production hashers after it for anything stored otherwise.
settings.PASSWORD_HASHERS = ["tests.hashers.OneRoundPBKDF2PasswordHasher", *settings.PASSWORD_HASHERS]


def skip_or_fail(reason: str) -> None:
    """Integration prerequisites missing: skip locally, fail under CI (CI must never skip them)."""
    if IN_CI:
        pytest.fail(f"CI=true and {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(autouse=True, scope="session")
def local_transport_allowed() -> None:
    """The tests' simulated clusters (testbed.sim) run on the local transport, which a server refuses
    unless KILN_ALLOW_LOCAL_TRANSPORT is set: set it for the session and the processes it starts.
    tests/security turns it off again to prove the refusal."""
    os.environ["KILN_ALLOW_LOCAL_TRANSPORT"] = "1"
    settings.KILN_ALLOW_LOCAL_TRANSPORT = True


@pytest.fixture
def real_services() -> None:
    """The integration tests talk to real PostgreSQL and Redis (see the Makefile's test target)."""
    engine = settings.DATABASES["default"]["ENGINE"]
    if "postgresql" not in engine:
        skip_or_fail(f"integration tests need PostgreSQL (DATABASE_URL), got {engine}")
    if not settings.CELERY_BROKER_URL.startswith("redis"):
        skip_or_fail(f"integration tests need Redis (CELERY_BROKER_URL), got {settings.CELERY_BROKER_URL}")


@pytest.fixture
def make_user(db):
    from django.contrib.auth.models import Group, User

    def make(username: str, *roles: str, superuser: bool = False) -> User:
        user = User.objects.create_user(username=username, password="pw-" + username, is_superuser=superuser)
        for role in roles:
            user.groups.add(Group.objects.get(name=role))
        return user

    return make


class WorkerProcess:
    """A real `celery -A worker worker` process on the test database and broker.

    With no `pool` and no `concurrency` it runs exactly what the docs tell users to run: the
    settings' defaults (a threads pool of KILN_WORKER_CONCURRENCY). `pool="prefork"` sets
    KILN_WORKER_POOL for it (Celery overrides a bare --pool=prefork with the configured pool).
    `queues` are its `-Q` (a site's worker; none: the default queue), `name` its `-n` node name
    (`site-a@%h`; none: a unique one)."""

    def __init__(
        self,
        log_path: Path,
        *,
        concurrency: int | None = None,
        pool: str | None = None,
        queues: list[str] | None = None,
        name: str | None = None,
    ) -> None:
        self.log_path = log_path
        self.concurrency = concurrency
        self.pool = pool
        self.queues = queues
        self.name = name
        self.process: subprocess.Popen[bytes] | None = None

    def env(self) -> dict[str, str]:
        db = settings.DATABASES["default"]
        env = dict(os.environ)
        env["DATABASE_URL"] = f"postgresql://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
        env["CELERY_BROKER_URL"] = settings.CELERY_BROKER_URL
        env["KILN_DATA_DIR"] = str(settings.DATA_DIR)
        env["KILN_SSH_CONNECT_TIMEOUT"] = str(settings.KILN_SSH_CONNECT_TIMEOUT)
        env["KILN_TASK_SLACK_S"] = str(settings.KILN_TASK_SLACK_S)
        visibility = settings.CELERY_BROKER_TRANSPORT_OPTIONS.get("visibility_timeout")
        if visibility:
            env["KILN_BROKER_VISIBILITY_TIMEOUT"] = str(visibility)
        for name in ("KILN_WORKER_POOL", "KILN_WORKER_CONCURRENCY"):
            env.pop(name, None)  # the defaults, unless this test asks otherwise
        if self.pool:
            env["KILN_WORKER_POOL"] = self.pool
        return env

    def argv(self) -> list[str]:
        argv = [sys.executable, "-m", "celery", "-A", "worker", "worker", "--loglevel=INFO"]
        if self.concurrency is not None:
            argv.append(f"--concurrency={self.concurrency}")
        if self.pool:
            argv.append(f"--pool={self.pool}")
        if self.queues:
            argv += ["-Q", ",".join(self.queues)]
        name = self.name or f"itest-{os.getpid()}-{time.monotonic_ns()}@%h"
        return [*argv, "--without-gossip", "--without-mingle", "-n", name]

    def start(self) -> None:
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            self.argv(), cwd=REPO, env=self.env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"celery worker exited {self.process.returncode}:\n{self.log_path.read_text()}")
            if b"ready." in self.log_path.read_bytes():
                return
            time.sleep(0.2)
        raise RuntimeError(f"celery worker not ready after 60s:\n{self.log_path.read_text()}")

    def kill(self) -> None:
        """SIGKILL the whole worker (main process and pool): no warm shutdown, nothing acked."""
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()


def _flush_broker() -> None:
    import redis

    redis.Redis.from_url(settings.CELERY_BROKER_URL).flushdb()


@pytest.fixture
def celery_worker_process(real_services, transactional_db, tmp_path: Path) -> Iterator[WorkerProcess]:
    _flush_broker()
    worker = WorkerProcess(tmp_path / "worker.log")
    worker.start()
    yield worker
    worker.stop()
    _flush_broker()


@pytest.fixture
def testbed_cluster(clean_testbed, transactional_db):
    """The shared 8-node sshd testbed registered as cluster `tb`, with a test plan `itest` whose
    checks time out after 5 s (the hung-command case must finish quickly)."""
    from portal.catalog.models import CheckDefinition, TestPlan, TestPlanItem
    from portal.inventory.services import cluster_create, nodes_add

    tb = clean_testbed
    cluster = cluster_create(
        name="tb",
        ssh_user=tb.ssh_user,
        ssh_key_path=str(tb.client_key_path),
        known_hosts_path=str(tb.known_hosts_path),
        profile="H100-SXM-8",
    )
    for node in tb.nodes:
        nodes_add(cluster=cluster, hostnames=node.hostname, addresses=node.address)
    plan = TestPlan.objects.create(slug="itest", name="Integration test plan")
    for order, slug in enumerate(["gpu-inventory", "ecc-health"]):
        TestPlanItem.objects.create(
            plan=plan,
            check_definition=CheckDefinition.objects.get(slug=slug),
            order=order,
            param_overrides={"timeout_s": 5},
        )
    return cluster

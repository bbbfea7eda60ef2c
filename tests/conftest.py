"""Shared fixtures: users with roles, a real Celery worker process, the sshd testbed as a cluster."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings

pytest_plugins = ["testbed.pytest_plugin", "tests.ci_guard"]

REPO = Path(__file__).resolve().parent.parent
IN_CI = os.environ.get("CI", "").lower() == "true"


# `make test` runs two processes (pytest-xdist, `--dist loadgroup`). The tests that use something
# the machine has only one of (the sshd testbed, the broker's Redis database, Celery workers and
# beat, Chromium and its live server, the demo's data folder) are one group: one process runs them
# in order, as a single process would; the other tests spread over both processes.
SERVICES_GROUP = "services"
SERVICE_FIXTURES = frozenset(
    {
        "real_services",
        "celery_worker_process",
        "processes",
        "private_broker",
        "testbed",
        "clean_testbed",
        "testbed_cluster",
        "testbed_factory",
        "live_server",
        "browser_context",
        "page",
    }
)
# Modules that reach those things without one of the fixtures: kiln_demo (the data folder's demo
# nodes), the broker's queues read or flushed directly, a worker started by hand.
SERVICE_MODULES = frozenset(
    {
        "tests.certificates.test_acceptance_path",
        "tests.certificates.test_demo_certificate",
        "tests.certificates.test_issue_worker",
        "tests.certificates.test_triage_demo",
        "tests.portal.test_broker",
        "tests.portal.test_commands",
        "tests.portal.test_cli_demo",
        "tests.portal.test_reaper_liveness",
        "tests.certificates.test_verify_load",  # gunicorn under a flood of uploads: timed
        "tests.portal.test_up_script",  # a real Celery worker and gunicorn, and stand-ins under make
        # Real-time samplers (a simulated ipmitool read every second under a simulated burn): they
        # lost a third of their readings when they ran beside the 12-node heat soak of the other
        # process. In the services group they run one after another with it, never at once.
        "tests.checks.test_burnin_sim",
        "tests.probe.test_node_power_sim",
    }
)


def uses_shared_services(item: pytest.Item) -> bool:
    if item.get_closest_marker("integration") or item.get_closest_marker("browser"):
        return True
    module = getattr(item, "module", None)
    if module is not None and module.__name__ in SERVICE_MODULES:
        return True
    return bool(SERVICE_FIXTURES & set(getattr(item, "fixturenames", ())))


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the group marks into node ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if uses_shared_services(item):
            item.add_marker(pytest.mark.xdist_group(SERVICES_GROUP))


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

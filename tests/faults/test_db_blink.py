"""The database blinking loses nothing: PostgreSQL connections terminated mid-run (as a restart, a
failover or a pooler does) turn no result that a node produced into `error` and move no node's
health; the web answers normally afterwards (CONN_HEALTH_CHECKS)."""

from __future__ import annotations

import sys
import threading
import time

import psycopg
import pytest
from django.conf import settings
from django.core.handlers.wsgi import WSGIHandler
from django.db import connection
from django.test import Client, RequestFactory

from portal.health.models import HealthTransition, NodeHealth
from portal.runs import services
from portal.runs.models import CheckResult, Run
from tests.faults.helpers import plan_of, wait_for

pytestmark = pytest.mark.integration

# A slow, healthy node (testbed delay_ms): every NVML start and nvidia-smi call takes this long, so
# each check waits on SSH for seconds while its worker's connection is being killed.
NODE_DELAY_MS = 1500
KILL_EVERY_S = 0.5


def _admin_connection() -> psycopg.Connection:
    db = settings.DATABASES["default"]
    return psycopg.connect(
        host=db["HOST"] or "127.0.0.1", port=db["PORT"] or 5432, user=db["USER"], dbname=db["NAME"], autocommit=True
    )


def terminate_others(admin: psycopg.Connection, *, spare: set[int]) -> int:
    """pg_terminate_backend on every backend of the test database but `spare` and this one."""
    rows = admin.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE datname = current_database() AND pid <> pg_backend_pid() AND NOT (pid = ANY(%s))",
        [sorted(spare)],
    ).fetchall()
    return sum(1 for (done,) in rows if done)


class Killer(threading.Thread):
    """Terminates the other backends of the test database every KILL_EVERY_S until stopped."""

    def __init__(self, spare: set[int]) -> None:
        super().__init__(daemon=True)
        self.spare, self.killed, self.rounds = spare, 0, 0
        self.stopping = threading.Event()

    def run(self) -> None:
        with _admin_connection() as admin:
            while not self.stopping.wait(KILL_EVERY_S):
                self.killed += terminate_others(admin, spare=self.spare)
                self.rounds += 1

    def stop(self) -> None:
        self.stopping.set()
        self.join(10)


def my_backend_pid() -> int:
    connection.ensure_connection()
    return connection.connection.info.backend_pid


@pytest.mark.timeout(300)
def test_it_loses_no_result_and_moves_no_health_when_postgres_connections_are_killed(
    testbed_cluster, clean_testbed, celery_worker_process
) -> None:
    for node in clean_testbed.nodes:
        clean_testbed.set_faults(node.hostname, delay_ms=NODE_DELAY_MS)
    NodeHealth.objects.bulk_create(NodeHealth(node=node, state="healthy") for node in testbed_cluster.nodes.all())
    plan = plan_of("blink", "gpu-inventory", "gpu-links", "ecc-health")

    run = services.run_start(cluster=testbed_cluster, plan=plan)
    results = CheckResult.objects.filter(run=run)
    # Kill once every node's task holds its checks (claimed, then waiting on SSH for seconds).
    wait_for(lambda: not results.filter(status="queued").exists(), 60, "every node's task to start")
    time.sleep(1.0)
    killer = Killer(spare={my_backend_pid()})
    killer.start()
    try:
        took = wait_for(lambda: Run.objects.get(pk=run.pk).status not in ("queued", "running"), 180, "the run to end")
    finally:
        killer.stop()

    run.refresh_from_db()
    log = celery_worker_process.log_path.read_text(errors="replace")
    retried = log.count("database connection lost")
    print(
        f"\nblink: {killer.killed} backend(s) terminated in {killer.rounds} rounds; run ended {took:.1f} s after the "
        f"first kill; {retried} write(s) retried by the worker",
        file=sys.stderr,
    )
    assert killer.killed > 0
    rows = list(results.values_list("node__hostname", "item_key", "status", "reason", "portal_fault"))
    assert {status for _, _, status, _, _ in rows} == {"pass"}, rows
    assert not any(fault for *_, fault in rows)
    assert run.status == "pass", run.reason
    assert set(NodeHealth.objects.values_list("state", flat=True)) == {"healthy"}
    assert not HealthTransition.objects.exists()


def _get(path: str, session: str) -> int:
    """One request through Django's WSGI handler, as a web worker process (gunicorn's sync worker)
    serves it: request_started and request_finished fire, so the connection persists between
    requests (CONN_MAX_AGE) and is checked at the start of each one when CONN_HEALTH_CHECKS is on.
    (The test client and the live server both close or bypass that, so neither shows the finding.)"""
    environ = RequestFactory()._base_environ(
        PATH_INFO=path, REQUEST_METHOD="GET", HTTP_COOKIE=f"{settings.SESSION_COOKIE_NAME}={session}"
    )
    answer: list[int] = []
    body = WSGIHandler()(environ, lambda status, headers, exc_info=None: answer.append(int(status.split()[0])))
    try:
        b"".join(body)
    finally:
        body.close()  # request_finished: Django keeps or closes the connection here
    return answer[0]


@pytest.mark.parametrize("health_checks", [True, False])
def test_the_web_answers_after_the_database_dropped_its_connection(
    transactional_db, make_user, real_services, monkeypatch, health_checks: bool
) -> None:
    """A web process keeps its connection (CONN_MAX_AGE); PostgreSQL drops it (restart, failover).
    With CONN_HEALTH_CHECKS the next request reconnects; without, it is a 500 (the finding)."""
    monkeypatch.setitem(connection.settings_dict, "CONN_HEALTH_CHECKS", health_checks)
    assert connection.settings_dict["CONN_MAX_AGE"] > 0  # persistent connections, as deployed
    client = Client()
    client.force_login(make_user("vera", "viewer"))
    session = client.cookies[settings.SESSION_COOKIE_NAME].value
    connection.close()  # the web process's own connection starts with its first request
    assert _get("/clusters/", session) == 200
    held = connection.connection.info.backend_pid  # kept open after the request

    with _admin_connection() as admin:
        assert terminate_others(admin, spare=set()) >= 1
        # pg_terminate_backend only signals the backend; it leaves pg_stat_activity when it has exited.
        wait_for(
            lambda: not admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", [held]).fetchall(),
            10,
            f"backend {held} to exit",
        )

    statuses = [_get("/clusters/", session) for _ in range(3)]
    assert statuses == ([200, 200, 200] if health_checks else [500, 200, 200])

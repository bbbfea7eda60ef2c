"""Node tasks hold no database connection while they wait on a node (worker/db.py), and one worker
process holds at most KILN_WORKER_DB_CONNECTIONS of them whatever its concurrency."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from django.db import connection, connections, transaction

from checks.core.base import Command, CommandOutput
from portal.execution.execution import execute_node
from portal.runs.models import CheckResult
from tests.portal.conftest import cluster, make_run, quick_plan  # noqa: F401 (fixtures)
from worker.db import configure_worker_database, db_phase, ledger_close, ledger_open, release_connection

APP_NAME = "kiln-test-db-phase"


class WaitingTransport:
    """A node that takes `delay` seconds per command; notes whether its caller held a connection."""

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.connection_held: list[bool] = []
        self.commands: list[Command] = []

    def run(self, command: Command) -> CommandOutput:
        self.connection_held.append(connection.connection is not None)
        self.commands.append(command)
        time.sleep(self.delay)
        return CommandOutput(command, "{}", "", 0, False, self.delay)

    def close(self) -> None:
        return None


@pytest.fixture
def fake_nodes(monkeypatch) -> dict[str, WaitingTransport]:
    """open_transport answers with a WaitingTransport per node (kept by hostname)."""
    made: dict[str, WaitingTransport] = {}

    def open_transport(target: Any) -> WaitingTransport:
        made[target.hostname] = WaitingTransport(delay=0.2)
        return made[target.hostname]

    monkeypatch.setattr("portal.execution.execution.open_transport", open_transport)
    return made


def test_it_holds_no_connection_while_a_command_runs(transactional_db, cluster, make_run, fake_nodes) -> None:  # noqa: F811
    run = make_run(cluster, nodes=list(cluster.nodes.filter(hostname="n01")))
    node = cluster.nodes.get(hostname="n01")

    def task() -> None:  # a worker thread, as on the threads pool
        execute_node(run_id=run.pk, node_id=node.pk, claim="t1")

    thread = threading.Thread(target=task)
    thread.start()
    thread.join(60)
    transport = fake_nodes["n01"]
    assert transport.connection_held and not any(transport.connection_held)
    assert not CheckResult.objects.filter(run=run, status="running").exists()  # each result recorded


def test_it_runs_the_probe_once_for_the_checks_that_share_it(transactional_db, cluster, make_run, fake_nodes) -> None:  # noqa: F811
    """gpu-inventory and ecc-health both read the probe: the node runs it once (with the inventory's
    DMI and BMC identity reads), then the kernel log."""
    run = make_run(cluster, nodes=list(cluster.nodes.filter(hostname="n02")))
    node = cluster.nodes.get(hostname="n02")
    book = ledger_open("t")
    try:
        execute_node(run_id=run.pk, node_id=node.pk, claim="t2")
    finally:
        ledger_close()
    labels = [c.label for c in fake_nodes["n02"].commands]
    assert labels == ["probe.py", "dmi", "bmc fru", "kernel log"]
    assert book.notes == {"node": "n02", "commands_run": 4, "commands_shared": 1}
    assert set(book.parts) >= {"claim", "connect", "commands", "record"}
    assert book.parts["claim"].count == 1  # the claim and the run's and node's reads: one phase


def test_it_holds_at_most_the_configured_connections_across_many_node_tasks(
    transactional_db,
    cluster,  # noqa: F811
    make_run,  # noqa: F811
    fake_nodes,
    settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from portal.inventory.models import Node

    settings.KILN_WORKER_DB_CONNECTIONS = 2
    # Only this test's connections are counted: another process on the test database (a worker or
    # beat of a test running beside this one, whose reaper thread connects every pass) is not these.
    monkeypatch.setitem(connections.settings["default"].setdefault("OPTIONS", {}), "application_name", APP_NAME)
    Node.objects.bulk_create(Node(cluster=cluster, hostname=f"m{i:02d}") for i in range(12))
    run = make_run(cluster)
    node_ids = list(cluster.nodes.values_list("pk", flat=True))
    database = connection.settings_dict["NAME"]
    connection.close()  # this thread's own connection is not the worker's

    import psycopg

    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    peak = 0
    stop = threading.Event()

    def sample() -> None:
        nonlocal peak
        with psycopg.connect(**params, autocommit=True) as conn:
            while not stop.is_set():
                row = conn.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()"
                    " AND backend_type = 'client backend'"  # not a query's parallel workers
                    " AND application_name = %s",
                    (database, APP_NAME),
                ).fetchone()
                peak = max(peak, row[0])
                time.sleep(0.005)

    sampler = threading.Thread(target=sample)
    sampler.start()
    threads = [
        threading.Thread(target=execute_node, kwargs={"run_id": run.pk, "node_id": pk, "claim": f"c{pk}"})
        for pk in node_ids
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    stop.set()
    sampler.join(10)
    assert len(node_ids) == 16
    assert not CheckResult.objects.filter(run=run, status="running").exists()
    # Sixteen node tasks at once, each waiting on its node for 0.6 s: at most two connections, plus
    # one a closing server process may still show for a moment.
    assert 1 <= peak <= 3, peak


def test_the_ledger_counts_the_wait_for_a_connection_apart_from_the_phase(transactional_db, settings) -> None:
    settings.KILN_WORKER_DB_CONNECTIONS = 1
    inside, leave = threading.Event(), threading.Event()

    def holder() -> None:
        with db_phase("other"):
            inside.set()
            leave.wait(10)

    other = threading.Thread(target=holder)
    other.start()
    assert inside.wait(10)
    book = ledger_open("t")
    try:
        threading.Timer(0.3, leave.set).start()  # the only connection comes free in 0.3 s
        with db_phase("record"):
            pass
    finally:
        ledger_close()
        other.join(10)
    assert book.parts["db_wait"].seconds >= 0.25
    assert book.parts["record"].seconds < book.parts["db_wait"].seconds  # the phase itself was quick
    assert book.line().startswith("t ") and "db_wait 0." in book.line()


def test_a_phase_inside_a_phase_does_not_close_early(transactional_db) -> None:
    with db_phase():
        connection.ensure_connection()
        with db_phase():
            pass
        assert connection.connection is not None
    assert connection.connection is None


def test_it_leaves_a_callers_transaction_open(db) -> None:
    with transaction.atomic():
        connection.ensure_connection()
        with db_phase():
            pass
        release_connection()
        assert connection.connection is not None


def test_a_threads_worker_shares_a_pool_of_the_configured_size(settings) -> None:
    settings.KILN_WORKER_DB_CONNECTIONS = 6
    db: dict[str, Any] = {"ENGINE": "django.db.backends.postgresql", "CONN_MAX_AGE": 60, "OPTIONS": {}}
    configure_worker_database(pool="threads", db=db)
    assert db["OPTIONS"]["application_name"] == "kiln-worker"
    assert db["OPTIONS"]["pool"]["max_size"] == 6
    # Not the pool's own check: it sleeps 1, 2, 4 ... s per dead connection (connect_checked instead)
    assert db["CONN_MAX_AGE"] == 0 and db["CONN_HEALTH_CHECKS"] is False


def test_a_prefork_worker_gets_no_pool_and_sqlite_is_left_alone() -> None:
    db: dict[str, Any] = {"ENGINE": "django.db.backends.postgresql", "CONN_MAX_AGE": 60}
    configure_worker_database(pool="prefork", db=db)
    assert "pool" not in db["OPTIONS"] and db["CONN_MAX_AGE"] == 60
    lite: dict[str, Any] = {"ENGINE": "django.db.backends.sqlite3", "OPTIONS": {}}
    configure_worker_database(pool="threads", db=lite)
    assert lite == {"ENGINE": "django.db.backends.sqlite3", "OPTIONS": {}}


def test_a_named_application_is_kept(settings) -> None:
    db: dict[str, Any] = {"ENGINE": "django.db.backends.postgresql", "OPTIONS": {"application_name": "site-kiln"}}
    configure_worker_database(pool="threads", db=db)
    assert db["OPTIONS"]["application_name"] == "site-kiln"


DROPPED_POOL_SCRIPT = """
import time

import django

django.setup()
import psycopg
from django.db import connection

from worker.db import configure_worker_database, db_phase

configure_worker_database(pool="threads")
with db_phase():
    connection.cursor().execute("SELECT 1")  # the pool now holds a warm connection
params = connection.get_connection_params()
params.pop("cursor_factory", None)
params.pop("application_name", None)
with psycopg.connect(**params, autocommit=True) as admin:
    dropped = admin.execute(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
        " WHERE datname = current_database() AND application_name = 'kiln-worker'"
    ).fetchone()[0]
time.sleep(0.2)  # the terminations have landed
started = time.monotonic()
with db_phase():
    connection.cursor().execute("SELECT 1")
print(dropped, round(time.monotonic() - started, 3))
"""


def test_a_phase_starts_at_once_on_a_live_connection_after_the_server_dropped_the_pools(transactional_db) -> None:
    """A restart or pg_terminate_backend kills the pool's idle connections: the next phase neither
    fails its first query nor sleeps in the pool's back-off (1 s per dead connection)."""
    import os
    import subprocess
    import sys

    db = connection.settings_dict
    env = dict(os.environ)
    env["DATABASE_URL"] = f"postgresql://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
    env["DJANGO_SETTINGS_MODULE"] = "portal.settings"
    done = subprocess.run(
        [sys.executable, "-c", DROPPED_POOL_SCRIPT], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    dropped, took = done.stdout.split()
    assert int(dropped) >= 1
    assert float(took) < 0.5, f"the phase took {took} s to start on a live connection"

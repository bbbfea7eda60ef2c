"""The worker as the docs start it (`celery -A worker worker`, no flags) on the sshd testbed: every
node at once on threads, one SSH connection per node, the probe once per node, and at most
KILN_WORKER_DB_CONNECTIONS PostgreSQL connections for the whole worker."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest
from django.db import connection

from bench.fanout_peers import WORKER_CONNECTIONS_SQL, parse_ledger
from portal.catalog.models import TestPlan
from portal.runs import services
from portal.runs.models import ACTIVE_STATUSES, CheckResult, Run
from worker.db import WORKER_APPLICATION_NAME

pytestmark = pytest.mark.integration


def accepted(clean_testbed) -> dict[str, int]:
    """SSH logins each node's sshd has accepted so far (its log)."""
    return {n.hostname: n.log_path.read_text().count("Accepted publickey") for n in clean_testbed.nodes}


def test_the_default_worker_drives_every_node_at_once_on_few_connections(
    testbed_cluster, clean_testbed, celery_worker_process, settings
) -> None:
    log = celery_worker_process.log_path.read_text()
    assert settings.CELERY_WORKER_CONCURRENCY == 256
    assert "concurrency: 256 (thread)" in log
    assert "Kiln worker: threads pool, 256 tasks at once, at most 4 database connections" in log

    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    peak, stop = 0, threading.Event()

    def sample() -> None:
        nonlocal peak
        with psycopg.connect(**params, autocommit=True) as conn:
            while not stop.is_set():
                peak = max(peak, len(conn.execute(WORKER_CONNECTIONS_SQL, (WORKER_APPLICATION_NAME,)).fetchall()))
                time.sleep(0.01)

    before = accepted(clean_testbed)
    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        run = services.run_start(cluster=testbed_cluster, plan=TestPlan.objects.get(slug="itest"))
        deadline = time.monotonic() + 120
        while Run.objects.filter(pk=run.pk, status__in=ACTIVE_STATUSES).exists():
            assert time.monotonic() < deadline, "the run did not finish in 120 s"
            time.sleep(0.2)
    finally:
        stop.set()
        sampler.join(10)
    run.refresh_from_db()
    results = CheckResult.objects.filter(run=run)
    assert run.status == "pass", list(results.values_list("node__hostname", "item_key", "status", "reason"))

    # Every node was started before any finished: eight tasks at once, not two processes in turn.
    assert max(results.values_list("started_at", flat=True)) < min(results.values_list("finished_at", flat=True))
    # One SSH connection per node for the whole run.
    after = accepted(clean_testbed)
    assert {h: after[h] - before[h] for h in after} == dict.fromkeys(after, 1)
    # gpu-inventory and ecc-health share the probe: probe, the inventory's identity reads (DMI, BMC
    # FRU), kernel log; the second probe is shared.
    time.sleep(1)  # the ledger line is logged after the task's last phase
    lines = [e for e in parse_ledger(celery_worker_process.log_path.read_text()) if e.run_id == run.pk]
    assert sorted(e.notes["node"] for e in lines) == sorted(after)
    assert {(e.ran, e.shared) for e in lines} == {(4, 1)}
    assert all(e.queries["record"] > 0 and e.parts["connect"] > 0 for e in lines)
    # The worker's PostgreSQL connections, sampled through the run: the pool, never one per task.
    assert 1 <= peak <= settings.KILN_WORKER_DB_CONNECTIONS, peak

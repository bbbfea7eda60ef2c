"""What the reaper reads from a real Redis broker: a run task waiting in the queue, one delivered
to a consumer and not yet acknowledged (recently: pending; long ago: lost), and nothing at all
after a flush."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from portal.execution.broker import pending_in_folder, pending_tasks, task_key
from tests.conftest import _flush_broker


@pytest.fixture
def redis_broker(real_services: None) -> Iterator[None]:
    _flush_broker()
    yield
    _flush_broker()


def test_it_finds_a_waiting_run_task_and_nothing_after_a_flush(redis_broker: None) -> None:
    from portal.execution.tasks import run_group, run_node

    run_node.apply_async(args=(123, 456))
    run_group.apply_async(args=(123, 789), kwargs={"time_budget_s": 60.0})

    assert pending_tasks(max_age_s=120) == {("kiln.run_node", (123, 456)), ("kiln.run_group", (123, 789))}
    _flush_broker()
    assert pending_tasks(max_age_s=120) == set()


def test_it_finds_a_run_task_waiting_in_a_clusters_own_queue(redis_broker: None) -> None:
    from portal.execution.tasks import run_node

    run_node.apply_async(args=(5, 6), queue="site-b")

    assert pending_tasks(max_age_s=120) == set()  # not in the default queue
    assert pending_tasks(max_age_s=120, queues={"site-a", "site-b"}) == {("kiln.run_node", (5, 6))}


def test_it_counts_an_unacknowledged_delivery_as_pending_only_while_it_is_recent(redis_broker: None) -> None:
    from portal.execution.tasks import run_node
    from worker.celery import app

    run_node.apply_async(args=(7, 8))
    with app.connection_for_read() as conn:
        queue = conn.SimpleQueue(app.conf.task_default_queue, no_ack=False)
        message = queue.get(timeout=5)  # delivered, not acked: what a worker holds while it runs
        try:
            assert pending_tasks(max_age_s=120) == {("kiln.run_node", (7, 8))}
            assert pending_tasks(max_age_s=0) == set()  # delivered too long ago: its consumer is gone
        finally:
            message.ack()
            queue.close()
    assert pending_tasks(max_age_s=120) == set()


def test_it_reads_the_embedded_brokers_queue_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Kombu's filesystem transport: a file per waiting message, deleted when delivered."""
    from celery import Celery

    monkeypatch.delenv("CELERY_BROKER_URL", raising=False)  # Celery prefers it to the app's own broker

    for sub in ("queue", "control"):
        (tmp_path / sub).mkdir()
    folder = str(tmp_path / "queue")
    options = {"data_folder_in": folder, "data_folder_out": folder, "control_folder": str(tmp_path / "control")}
    app = Celery("fs", broker="filesystem://", broker_transport_options=options)
    assert app.conf.broker_url == "filesystem://"
    app.send_task("kiln.run_node", args=(3, 4))
    app.send_task("kiln.reap")

    assert pending_in_folder(tmp_path / "queue") == {("kiln.run_node", (3, 4))}
    for message in (tmp_path / "queue").glob("*.msg"):
        message.unlink()
    assert pending_in_folder(tmp_path / "queue") == set()


def test_it_ignores_other_tasks_and_garbage() -> None:
    assert task_key(b"not json") is None
    assert task_key('{"headers": {"task": "kiln.reap"}, "body": "W10="}') is None
    argsrepr = '{"headers": {"task": "kiln.run_node", "argsrepr": "(1, 2)"}, "body": 5}'
    assert task_key(argsrepr) == ("kiln.run_node", (1, 2))

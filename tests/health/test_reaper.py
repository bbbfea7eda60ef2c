"""The reaper: results stuck past their deadline become `error` with the reason; runs finalize."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from django_celery_beat.models import PeriodicTask

from portal.execution.reaper import reap
from portal.runs.models import CheckResult, Run

pytestmark = pytest.mark.django_db


def _claim(run: Run, host: str, started_ago_s: float) -> None:
    CheckResult.objects.filter(run=run, node__hostname=host).update(
        status="running", claimed_by="dead-worker-task", started_at=timezone.now() - timedelta(seconds=started_ago_s)
    )


def test_it_errors_results_of_a_dead_worker_and_finalizes_the_run(cluster, make_run, settings) -> None:
    settings.KILN_REAPER_GRACE_S = 30
    run = make_run(cluster, nodes=list(cluster.nodes.filter(hostname__in=["n01", "n02"])))
    Run.objects.filter(pk=run.pk).update(status="running", started_at=timezone.now() - timedelta(hours=3))
    CheckResult.objects.filter(run=run, node__hostname="n01").update(status="pass", finished_at=timezone.now())
    _claim(run, "n02", started_ago_s=3 * 3600)
    from portal.health.tasks import reap as reap_task

    assert reap_task.apply().get() == [run.pk]
    stuck = CheckResult.objects.filter(run=run, node__hostname="n02")
    assert set(stuck.values_list("status", flat=True)) == {"error"}
    assert "reaped: still running" in stuck.first().reason and "worker probably died" in stuck.first().reason
    run.refresh_from_db()
    assert run.status == "error" and run.finished_at is not None


def test_it_leaves_a_result_within_its_deadline(cluster, make_run) -> None:
    run = make_run(cluster)
    Run.objects.filter(pk=run.pk).update(status="running")
    _claim(run, "n01", started_ago_s=10)
    assert reap() == []
    assert CheckResult.objects.filter(run=run, status="running").count() == 2


def test_it_uses_the_plans_own_limits(cluster, make_run, settings) -> None:
    """Deadline = node task hard limit (worker/timeouts.py) + grace: just inside it is left alone."""
    from worker.timeouts import node_task_limits

    settings.KILN_REAPER_GRACE_S = 60
    run = make_run(cluster)
    Run.objects.filter(pk=run.pk).update(status="running")
    _, hard = node_task_limits(
        command_budgets=[i["timeout_s"] for i in run.plan_snapshot["items"]],
        connect_timeout=settings.KILN_SSH_CONNECT_TIMEOUT,
    )
    _claim(run, "n01", started_ago_s=hard + 60 - 20)
    _claim(run, "n02", started_ago_s=hard + 60 + 20)
    reap()
    statuses = dict(CheckResult.objects.filter(run=run, item_key="ecc-health").values_list("node__hostname", "status"))
    assert statuses["n01"] == "running" and statuses["n02"] == "error"


def test_it_errors_results_never_picked_up(cluster, make_run, settings) -> None:
    settings.KILN_REAPER_QUEUE_ALLOWANCE_S = 600
    run = make_run(cluster)
    Run.objects.filter(pk=run.pk).update(created_at=timezone.now() - timedelta(days=1))
    reap()
    run.refresh_from_db()
    assert run.status == "error"
    assert "still queued" in run.results.first().reason


def test_no_periodic_task_queues_it_behind_the_checks() -> None:
    """The reaper runs in its own threads: an older Kiln's PeriodicTask is gone after migrate."""
    assert not PeriodicTask.objects.filter(task="kiln.reap").exists()


def test_one_pass_at_a_time_across_processes(cluster, make_run) -> None:
    """While another process holds the pass's lock (in the broker, as a second holder here), a pass
    leaves every run alone; once it is released, the next pass acts."""
    from portal.execution.reaper import REAPER_LOCK, reaper_lock, reaper_pass

    run = make_run(cluster)
    Run.objects.filter(pk=run.pk).update(created_at=timezone.now() - timedelta(days=1))
    with reaper_lock(REAPER_LOCK) as other:
        assert other
        assert reaper_pass(queues=["default"]) == []
        assert Run.objects.get(pk=run.pk).is_active
    assert reaper_pass(queues=["default"]) == [run.pk]


def test_the_redis_lock_expires_after_one_interval_so_a_killed_holder_delays_the_next_pass_at_most_that(
    real_services, settings
) -> None:
    import redis

    from portal.execution.reaper import reaper_lock

    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    client.delete("kiln:lock:kiln-reaper")
    with reaper_lock("kiln-reaper") as held:
        assert held
        assert 25_000 < client.pttl("kiln:lock:kiln-reaper") <= 30_000  # KILN_REAPER_INTERVAL_S
    assert not client.exists("kiln:lock:kiln-reaper")  # released at the end of the pass


def test_on_the_embedded_broker_a_file_lock_in_the_data_folder_serializes_the_passes(settings, tmp_path) -> None:
    """make up's embedded default (every process on one host): an flock."""
    from portal.execution.reaper import _file_lock

    settings.DATA_DIR = tmp_path
    with _file_lock("kiln-reaper") as first:
        with _file_lock("kiln-reaper") as second, _file_lock("kiln-reaper:site-a") as other:
            assert (first, second, other) == (True, False, True)
    with _file_lock("kiln-reaper") as again:
        assert again

"""The /metrics families the dashboards and alerts read (deploy/): nodes per state, failing checks
per kind, sweep duration and due time, worker beats. Parsed with prometheus_client's parser."""

from __future__ import annotations

import datetime as dt
import time

import pytest
from django.db import DatabaseError

from portal.health.models import Schedule, ScheduledFire, WorkerBeat
from portal.health.services import worker_beat_forget, worker_beat_record
from portal.inventory.models import Cluster
from tests.health.helpers import finish
from tests.health.test_metrics import scrape

pytestmark = pytest.mark.django_db
UTC = dt.UTC


def _values(family, **match: str) -> dict[tuple[str, ...], float]:
    """{label values not in `match`: value} of the samples whose labels include `match`."""
    return {
        tuple(v for k, v in sorted(s.labels.items()) if k not in match): s.value
        for s in family.samples
        if all(s.labels.get(k) == v for k, v in match.items())
    }


def test_it_counts_each_clusters_nodes_per_state_with_zeros(
    client, token, cluster, make_run, django_capture_on_commit_callbacks
) -> None:
    Cluster.objects.create(name="empty", profile="H100-SXM-8", transport="local")
    before = scrape(client, token)["kiln_cluster_nodes"]
    assert _values(before, cluster="c1") == {("unknown",): 4, ("healthy",): 0, ("degraded",): 0,
                                             ("failed",): 0, ("unreachable",): 0}  # fmt: skip
    finish(make_run(cluster), {"n02": ("fail", "GPU 3 ECC")}, django_capture_on_commit_callbacks)
    after = scrape(client, token)["kiln_cluster_nodes"]
    assert _values(after, cluster="c1")[("healthy",)] == 3 and _values(after, cluster="c1")[("failed",)] == 1
    assert set(_values(after, cluster="empty").values()) == {0.0} and len(_values(after, cluster="empty")) == 5
    assert {s.labels["cluster"] for s in scrape(client, token, "?cluster=c1")["kiln_cluster_nodes"].samples} == {"c1"}


def test_it_exports_each_nodes_failing_checks_by_kind_from_its_latest_result(
    client, token, cluster, make_run, django_capture_on_commit_callbacks
) -> None:
    """Per node only the kinds that fail (a series per failure, none per passing check); per
    cluster every kind with a verdict, zeros included."""
    finish(make_run(cluster), {"n02": ("fail", "GPU 3 ECC")}, django_capture_on_commit_callbacks)
    families = scrape(client, token)
    failing = families["kiln_node_check_failing"]
    assert _values(failing) == {("c1", "ecc_health", "n02"): 1.0}
    per_cluster = families["kiln_cluster_check_failing_nodes"]
    assert _values(per_cluster) == {("c1", "ecc_health"): 1.0, ("c1", "gpu_inventory"): 0.0}
    finish(make_run(cluster), {"n02": ("error", "unreachable")}, django_capture_on_commit_callbacks)
    still = scrape(client, token)  # `error` could not tell: the fail stands
    assert _values(still["kiln_node_check_failing"]) == {("c1", "ecc_health", "n02"): 1.0}
    assert _values(still["kiln_cluster_check_failing_nodes"])[("c1", "ecc_health")] == 1.0
    finish(make_run(cluster), capture=django_capture_on_commit_callbacks)
    cleared = scrape(client, token)
    assert "kiln_node_check_failing" not in cleared
    assert _values(cleared["kiln_cluster_check_failing_nodes"]) == {
        ("c1", "ecc_health"): 0.0,
        ("c1", "gpu_inventory"): 0.0,
    }


def _sweep(cluster, make_run, schedule: Schedule, fired: dt.datetime, seconds: float | None) -> None:
    run = make_run(cluster)
    ScheduledFire.objects.create(schedule=schedule, fire_time=fired, run=run)
    if seconds is not None:
        run.started_at = fired + dt.timedelta(seconds=60)  # a minute queued
        run.finished_at = run.started_at + dt.timedelta(seconds=seconds)
        run.status = "pass"
        run.save()


def test_it_exports_the_last_sweeps_duration_and_when_the_next_is_due(
    client, token, cluster, make_run, quick_plan
) -> None:
    nightly = Schedule.objects.create(name="nightly", cluster=cluster, plan=quick_plan, crontab="0 2 * * *")
    Schedule.objects.create(name="off", cluster=cluster, plan=quick_plan, crontab="* * * * *", enabled=False)
    Schedule.objects.filter(pk=nightly.pk).update(created_at=dt.datetime(2026, 3, 1, 12, 0, tzinfo=UTC))
    families = scrape(client, token)
    assert families["kiln_cluster_last_sweep_duration_seconds"].samples == []  # none finished yet
    due = families["kiln_cluster_next_sweep_due_timestamp_seconds"]
    assert _values(due) == {("c1",): dt.datetime(2026, 3, 2, 2, 0, tzinfo=UTC).timestamp()}  # first 02:00 after

    _sweep(cluster, make_run, nightly, dt.datetime(2026, 3, 2, 2, 0, tzinfo=UTC), 1800)
    _sweep(cluster, make_run, nightly, dt.datetime(2026, 3, 3, 2, 0, tzinfo=UTC), 2400)
    _sweep(cluster, make_run, nightly, dt.datetime(2026, 3, 4, 2, 0, tzinfo=UTC), None)  # still running
    families = scrape(client, token)
    assert _values(families["kiln_cluster_last_sweep_duration_seconds"]) == {("c1",): 2400.0}
    assert _values(families["kiln_cluster_next_sweep_due_timestamp_seconds"]) == {
        ("c1",): dt.datetime(2026, 3, 5, 2, 0, tzinfo=UTC).timestamp()
    }
    ScheduledFire.objects.create(schedule=nightly, fire_time=dt.datetime(2026, 3, 5, 2, 0, tzinfo=UTC), error="no")
    due = scrape(client, token)["kiln_cluster_next_sweep_due_timestamp_seconds"]
    assert _values(due)[("c1",)] == dt.datetime(2026, 3, 5, 2, 0, tzinfo=UTC).timestamp()  # that one started nothing

    Schedule.objects.create(name="hourly", cluster=cluster, plan=quick_plan, crontab="30 * * * *")
    due = scrape(client, token)["kiln_cluster_next_sweep_due_timestamp_seconds"]
    assert _values(due)[("c1",)] == dt.datetime(2026, 3, 5, 2, 0, tzinfo=UTC).timestamp()  # the earliest due wins


def test_it_exports_worker_beats_and_forgets_stopped_and_long_silent_workers(client, token) -> None:
    old = dt.datetime.now(UTC) - dt.timedelta(days=8)
    worker_beat_record(name="celery@gone", now=old)
    worker_beat_record(name="celery@a", now=dt.datetime(2026, 3, 1, tzinfo=UTC))
    worker_beat_record(name="celery@a")  # a second beat updates the row
    worker_beat_record(name="celery@b")
    beat = WorkerBeat.objects.get(name="celery@a")
    assert beat.started_at == dt.datetime(2026, 3, 1, tzinfo=UTC) and beat.seen_at > beat.started_at
    family = scrape(client, token)["kiln_worker_last_heartbeat_timestamp_seconds"]
    assert set(_values(family)) == {("celery@a",), ("celery@b",)}
    assert abs(_values(family)[("celery@a",)] - time.time()) < 60
    worker_beat_forget(name="celery@b")
    assert set(_values(scrape(client, token)["kiln_worker_last_heartbeat_timestamp_seconds"])) == {("celery@a",)}


def test_a_beat_survives_a_database_that_is_away(monkeypatch) -> None:
    from portal.health import beats

    beater = beats.Beater("celery@x")
    assert beater.beat_once() is True and WorkerBeat.objects.filter(name="celery@x").exists()

    def away(**_: object) -> None:
        raise DatabaseError("connection refused")

    monkeypatch.setattr(beats, "worker_beat_record", away)
    assert beater.beat_once() is False


@pytest.mark.django_db(transaction=True)
def test_the_worker_beats_from_ready_until_it_shuts_down(settings) -> None:
    from celery.signals import worker_ready, worker_shutdown

    import worker.celery  # noqa: F401  (the worker's own handlers of the same signals)

    settings.KILN_WORKER_BEAT_S = 0.05
    # The signals a real worker sends: the health app connected the beat to them.
    consumer = type("Consumer", (), {"hostname": "celery@beater"})()  # hashable, as Celery's signals need
    worker_ready.send(sender=consumer)
    try:
        deadline = time.monotonic() + 10
        seen: set[dt.datetime] = set()
        while len(seen) < 2 and time.monotonic() < deadline:  # it beats again and again, idle
            seen.update(WorkerBeat.objects.filter(name="celery@beater").values_list("seen_at", flat=True))
            time.sleep(0.02)
        assert len(seen) >= 2
    finally:
        worker_shutdown.send(sender=None)
    assert not WorkerBeat.objects.filter(name="celery@beater").exists()  # a clean stop is not "down"

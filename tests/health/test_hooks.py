"""Scheduler hooks: drain/resume (Slurm) and cordon/uncordon (Kubernetes) through the testbed's
fake scontrol and kubectl on a `local` controller (server configuration: KILN_CONTROLLER_TRANSPORT,
KILN_SCONTROL_PATH, KILN_KUBECTL_PATH); resume only what Kiln drained; dry run."""

from __future__ import annotations

import pytest

from portal.health.models import ClusterHealthSettings, NodeHealth, SchedulerAction
from portal.health.services import health_evaluate_run, scheduler_action_execute, scheduler_action_retry_delay_s
from portal.health.tasks import scheduler_action_run
from tests.health.helpers import finish

pytestmark = pytest.mark.django_db


def evaluate(run) -> None:
    """Judge a finished run's health now; its actions stay pending (on-commit never fires here)."""
    health_evaluate_run(run_id=run.pk)


@pytest.fixture
def hooked(cluster, controller):
    cluster.scheduler = "slurm"
    cluster.save()
    return ClusterHealthSettings.objects.create(cluster=cluster, hook_mode="on")


def test_it_drains_a_failed_node_and_resumes_it_when_healthy(
    cluster, make_run, hooked, controller, eager_celery, django_capture_on_commit_callbacks
) -> None:
    capture = django_capture_on_commit_callbacks
    finish(make_run(cluster), {"n02": ("fail", "GPU 3: uncorrectable ECC")}, capture)
    assert controller.calls() == [
        ["update", "nodename=n02", "state=drain", "reason=kiln: failed: ECC and Xid: GPU 3: uncorrectable ECC"]
    ]
    assert NodeHealth.objects.get(node__hostname="n02").kiln_drain == "drained"
    finish(make_run(cluster), {"n02": ("fail", "GPU 3: uncorrectable ECC")}, capture)
    assert len(controller.calls()) == 1  # no second drain
    finish(make_run(cluster), capture=capture)
    assert controller.calls()[1] == ["update", "nodename=n02", "state=resume"]
    assert list(SchedulerAction.objects.values_list("action", "status")) == [("resume", "done"), ("drain", "done")]
    assert NodeHealth.objects.get(node__hostname="n02").kiln_drain == ""


def test_it_never_resumes_a_node_it_did_not_drain(
    cluster, make_run, hooked, controller, eager_celery, django_capture_on_commit_callbacks
) -> None:
    capture = django_capture_on_commit_callbacks
    hooked.hook_mode = "off"
    hooked.save()
    finish(make_run(cluster), {"n02": ("fail", "ECC")}, capture)  # hooks off: an admin drains it by hand
    hooked.hook_mode = "on"
    hooked.save()
    finish(make_run(cluster), capture=capture)
    assert controller.calls() == []
    assert not SchedulerAction.objects.exists()


def test_it_records_a_failed_drain_and_forgets_it(
    cluster, make_run, hooked, controller, eager_celery, django_capture_on_commit_callbacks, settings
) -> None:
    settings.KILN_SCHEDULER_HOOK_MAX_ATTEMPTS = 1
    controller.fail()
    finish(make_run(cluster), {"n02": ("fail", "ECC")}, django_capture_on_commit_callbacks)
    action = SchedulerAction.objects.get()
    assert action.status == "failed" and "Unable to contact slurm controller" in action.output
    assert action.output.startswith("failed after 1 attempt(s)")
    assert NodeHealth.objects.get(node__hostname="n02").kiln_drain == ""


def test_it_retries_a_failed_drain_until_the_controller_answers(
    cluster, make_run, hooked, controller, settings
) -> None:
    settings.KILN_SCHEDULER_HOOK_MAX_ATTEMPTS = 5
    controller.fail(calls=2)  # a short slurmctld outage
    evaluate(finish(make_run(cluster), {"n02": ("fail", "ECC")}))  # planned, not yet run (no on-commit here)
    action = SchedulerAction.objects.get()
    assert (action.status, action.attempts) == ("pending", 0)
    scheduler_action_run.apply(args=[action.pk])  # eager: the retries run in place
    action.refresh_from_db()
    assert (action.status, action.attempts) == ("done", 3)
    assert len(controller.calls()) == 3
    assert NodeHealth.objects.get(node__hostname="n02").kiln_drain == "drained"


def test_it_gives_up_after_its_attempts_and_says_so(cluster, make_run, hooked, controller, settings) -> None:
    settings.KILN_SCHEDULER_HOOK_MAX_ATTEMPTS = 3
    controller.fail()
    evaluate(finish(make_run(cluster), {"n02": ("fail", "ECC")}))
    action = SchedulerAction.objects.get()
    scheduler_action_run.apply(args=[action.pk])
    action.refresh_from_db()
    assert (action.status, action.attempts) == ("failed", 3)
    assert action.output.startswith("failed after 3 attempt(s): slurm_update error: Unable to contact")
    assert NodeHealth.objects.get(node__hostname="n02").kiln_drain == ""


def test_a_drain_still_retrying_when_the_node_recovers_never_runs(
    cluster, make_run, hooked, controller, settings
) -> None:
    settings.KILN_SCHEDULER_HOOK_MAX_ATTEMPTS = 5
    controller.fail(calls=1)
    evaluate(finish(make_run(cluster), {"n02": ("fail", "ECC")}))
    drain = SchedulerAction.objects.get()
    scheduler_action_execute(action_id=drain.pk)  # the first attempt fails; a retry is due later
    drain.refresh_from_db()
    assert (drain.status, drain.attempts) == ("retrying", 1)
    evaluate(finish(make_run(cluster)))  # healthy again before the retry: a resume is planned
    resume = SchedulerAction.objects.get(action="resume")
    assert scheduler_action_execute(action_id=drain.pk).status == "superseded"
    resumed = scheduler_action_execute(action_id=resume.pk)
    assert resumed.status == "skipped" and "nothing to undo" in resumed.output
    assert len(controller.calls()) == 1, "neither the stale drain nor a needless resume reached scontrol"
    assert NodeHealth.objects.get(node__hostname="n02").kiln_drain == ""


def test_the_command_runs_outside_any_transaction(cluster, make_run, hooked, controller, monkeypatch) -> None:
    from django.db import connection

    from portal.health.services import scheduler as services

    evaluate(finish(make_run(cluster), {"n02": ("fail", "ECC")}))
    drain = SchedulerAction.objects.get()
    baseline = len(connection.atomic_blocks)  # the test's own transaction
    seen: list[tuple[int, str]] = []
    real = services._scheduler_command_run

    def run(cfg, action):
        seen.append((len(connection.atomic_blocks), SchedulerAction.objects.get(pk=action.pk).status))
        return real(cfg, action)

    monkeypatch.setattr(services, "_scheduler_command_run", run)
    assert scheduler_action_execute(action_id=drain.pk).status == "done"
    assert seen == [(baseline, "running")], "claimed, then run with no lock held"


def test_a_resume_waits_for_a_drain_in_flight(cluster, make_run, hooked, controller, settings) -> None:
    from django.utils import timezone

    evaluate(finish(make_run(cluster), {"n02": ("fail", "ECC")}))
    drain = SchedulerAction.objects.get()
    SchedulerAction.objects.filter(pk=drain.pk).update(status="running", started_at=timezone.now())
    evaluate(finish(make_run(cluster)))
    resume = SchedulerAction.objects.get(action="resume")
    waited = scheduler_action_execute(action_id=resume.pk)
    assert (waited.status, waited.attempts) == ("retrying", 1) and "is still running" in waited.output
    assert controller.calls() == []


def test_a_claim_past_its_lease_is_taken_over(cluster, make_run, hooked, controller) -> None:
    from datetime import timedelta

    from django.utils import timezone

    evaluate(finish(make_run(cluster), {"n02": ("fail", "ECC")}))
    drain = SchedulerAction.objects.get()
    SchedulerAction.objects.filter(pk=drain.pk).update(status="running", started_at=timezone.now())
    assert scheduler_action_execute(action_id=drain.pk).status == "running", "a live attempt is left alone"
    assert controller.calls() == []
    SchedulerAction.objects.filter(pk=drain.pk).update(started_at=timezone.now() - timedelta(hours=1))
    assert scheduler_action_execute(action_id=drain.pk).status == "done", "its worker died: run it again"
    assert len(controller.calls()) == 1


def test_its_retry_delay_doubles_and_is_capped(settings) -> None:
    settings.KILN_SCHEDULER_HOOK_RETRY_BASE_S = 30
    assert [scheduler_action_retry_delay_s(attempts=n) for n in (1, 2, 3, 4)] == [30, 60, 120, 240]
    assert scheduler_action_retry_delay_s(attempts=20) == 3600


def test_it_only_records_what_it_would_do_in_dry_run(
    cluster, make_run, hooked, controller, eager_celery, django_capture_on_commit_callbacks
) -> None:
    capture = django_capture_on_commit_callbacks
    hooked.hook_mode = "dry_run"
    hooked.save()
    finish(make_run(cluster), {"n02": ("error", "unreachable: no route to host")}, capture)
    finish(make_run(cluster), capture=capture)
    assert controller.calls() == []
    actions = list(SchedulerAction.objects.order_by("id").values_list("action", "status", "dry_run", "argv"))
    assert actions[0][:3] == ("drain", "dry-run", True)
    assert actions[0][3][1:3] == ["update", "nodename=n02"] and actions[0][3][0].endswith("/scontrol")
    assert actions[1][:3] == ("resume", "dry-run", True)


def test_it_cordons_and_uncordons_on_kubernetes(
    cluster, make_run, hooked, controller, eager_celery, django_capture_on_commit_callbacks
) -> None:
    capture = django_capture_on_commit_callbacks
    cluster.scheduler = "k8s"
    cluster.save()
    hooked.kubectl_context = "prod"
    hooked.save()
    finish(make_run(cluster), {"n04": ("fail", "Xid 79")}, capture)
    finish(make_run(cluster), capture=capture)
    assert controller.calls() == [["--context", "prod", "cordon", "n04"], ["--context", "prod", "uncordon", "n04"]]
    outputs = list(SchedulerAction.objects.order_by("id").values_list("output", flat=True))
    assert outputs == ["node/n04 cordoned", "node/n04 uncordoned"]


def test_it_does_nothing_for_a_degraded_node(
    cluster, make_run, hooked, controller, eager_celery, django_capture_on_commit_callbacks
) -> None:
    finish(make_run(cluster), {"n02": ("warn", "hot")}, django_capture_on_commit_callbacks)
    assert controller.calls() == []


def test_it_sends_a_hook_to_the_clusters_queue(
    cluster, make_run, hooked, controller, monkeypatch, django_capture_on_commit_callbacks
) -> None:
    """The controller is reached by the cluster's own workers (Cluster.queue), not the portal's."""

    cluster.queue = "site-a"
    cluster.save(update_fields=["queue"])
    sent: list[tuple[tuple[int, ...], str]] = []
    monkeypatch.setattr(
        scheduler_action_run, "apply_async", lambda args, kwargs=None, **options: sent.append((args, options["queue"]))
    )
    finish(make_run(cluster), {"n02": ("fail", "ECC")}, django_capture_on_commit_callbacks)
    assert sent == [((SchedulerAction.objects.get().pk,), "site-a")]

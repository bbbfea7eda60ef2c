"""Scheduler hooks: drain/resume (Slurm) and cordon/uncordon (Kubernetes) through the testbed's
fake scontrol and kubectl on a `local` controller; resume only what Kiln drained; dry run."""

from __future__ import annotations

import pytest

from portal.health.models import ClusterHealthSettings, NodeHealth, SchedulerAction
from tests.health.helpers import finish

pytestmark = pytest.mark.django_db


@pytest.fixture
def hooked(cluster, controller):
    cluster.scheduler = "slurm"
    cluster.save()
    return ClusterHealthSettings.objects.create(
        cluster=cluster, hook_mode="on", controller_transport="local", controller_env=controller.env
    )


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
    cluster, make_run, hooked, controller, eager_celery, django_capture_on_commit_callbacks
) -> None:
    hooked.controller_env = {**controller.env, "KILN_SIM_SCHED_FAIL": "1"}
    hooked.save()
    finish(make_run(cluster), {"n02": ("fail", "ECC")}, django_capture_on_commit_callbacks)
    action = SchedulerAction.objects.get()
    assert action.status == "failed" and "Unable to contact slurm controller" in action.output
    assert NodeHealth.objects.get(node__hostname="n02").kiln_drain == ""


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
    assert actions[0][3][:3] == ["scontrol", "update", "nodename=n02"]
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

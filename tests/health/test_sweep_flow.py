"""The issue's Done-when flow with real pieces: a schedule created through the UI, the task beat
sends, the real node task on simulated nodes (local transport, testbed.sim), health, a webhook on
127.0.0.1 and the fake scontrol. Celery runs eagerly (no broker); time moves a minute per tick."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from django.urls import reverse
from django.utils import timezone
from django_celery_beat.models import PeriodicTask

from portal.health.models import ClusterHealthSettings, HealthTransition, NodeHealth, ScheduledFire
from testbed.sim import node_env, write_state


@pytest.fixture
def clock(monkeypatch):
    """timezone.now() that moves on when told (each beat tick is a new minute)."""
    real_now = timezone.now
    offset = {"minutes": 0}
    monkeypatch.setattr(timezone, "now", lambda: real_now() + timedelta(minutes=offset["minutes"]))

    def advance() -> None:
        offset["minutes"] += 1

    return advance


@pytest.fixture
def sim_cluster(transactional_db, sim_paths, tmp_path: Path, controller, webhook):
    from portal.catalog.models import CheckDefinition, TestPlan, TestPlanItem
    from portal.inventory.models import Cluster, Node

    cluster = Cluster.objects.create(name="sim", transport="local", profile="H100-SXM-8", scheduler="slurm")
    states = {}
    for host in ("sim01", "sim02"):
        states[host] = tmp_path / "nodes" / host / "state"
        write_state(states[host], node=host)
        Node.objects.create(cluster=cluster, hostname=host, local_env=node_env(sim_paths, states[host]))
    plan = TestPlan.objects.create(slug="sweep", name="Sweep (ECC)")
    TestPlanItem.objects.create(
        plan=plan,
        check_definition=CheckDefinition.objects.get(slug="ecc-health"),
        order=0,
        param_overrides={"timeout_s": 30},
    )
    ClusterHealthSettings.objects.create(
        cluster=cluster,
        webhook_url=webhook.url,
        hook_mode="on",
    )
    return cluster, states


def test_it_sweeps_alerts_once_drains_and_resumes(
    sim_cluster, client, make_user, eager_celery, clock, controller, webhook
) -> None:
    from worker.celery import app

    cluster, states = sim_cluster
    client.force_login(make_user("op", "operator"))
    response = client.post(
        reverse("health:schedule_create"),
        {"name": "every minute", "cluster": "sim", "plan": "sweep", "node_set": "", "crontab": "* * * * *"},
    )
    assert response.status_code == 302
    periodic = PeriodicTask.objects.get(task="kiln.scheduled_run")

    def tick(n: int) -> None:
        """What beat does when the crontab is due: send the task by name with its kwargs."""
        clock()
        app.tasks[periodic.task].apply(kwargs=json.loads(periodic.kwargs), task_id=f"tick-{n}")

    tick(1)  # a healthy first sweep: its own run, every node healthy, no alert
    run = ScheduledFire.objects.get().run
    run.refresh_from_db()
    assert run.status == "pass", run.reason
    assert set(NodeHealth.objects.values_list("state", flat=True)) == {"healthy"}
    assert webhook.bodies == [] and controller.calls() == []

    write_state(states["sim02"], node="sim02", ecc_uncorrectable_gpu=3)
    tick(2)
    assert len(webhook.bodies) == 1
    alert = webhook.bodies[0]
    assert (alert["node"], alert["from"], alert["to"], alert["sweep"]) == ("sim02", "healthy", "failed", True)
    assert "GPU 3" in alert["reason"]
    assert controller.calls() == [
        ["update", "nodename=sim02", "state=drain", f"reason=kiln: failed: {alert['reason']}"[:250]]
    ]
    transition = HealthTransition.objects.get(to_state="failed")
    assert str(transition).startswith("sim02: healthy → failed: ECC and Xid: GPU 3")
    assert str(transition).endswith(f"(sweep #{transition.run_id})")

    tick(3)  # the same fault: no new alert, no second drain
    assert len(webhook.bodies) == 1 and len(controller.calls()) == 1
    assert ScheduledFire.objects.count() == 3

    write_state(states["sim02"], node="sim02")  # the fault cleared
    tick(4)
    assert len(webhook.bodies) == 2
    assert (webhook.bodies[1]["to"], webhook.bodies[1]["recovery"]) == ("healthy", True)
    assert controller.calls()[1] == ["update", "nodename=sim02", "state=resume"]
    assert NodeHealth.objects.get(node__hostname="sim02").kiln_drain == ""

"""A real `celery beat` (DatabaseScheduler) and a real worker: a schedule created through the UI
fires on its own and its run finishes. Needs PostgreSQL and Redis (see tests/conftest.py);
takes up to two minutes (crontab granularity is one minute)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.urls import reverse

from tests.conftest import REPO

pytestmark = pytest.mark.integration


def test_it_fires_a_schedule_made_in_the_ui_on_its_own(
    celery_worker_process, client, make_user, tmp_path: Path, sim_paths
) -> None:
    from portal.catalog.models import CheckDefinition, TestPlan, TestPlanItem
    from portal.health.models import NodeHealth, NodeMetrics, ScheduledFire
    from portal.inventory.models import Cluster, Node
    from portal.runs.models import Run, RunKeyValue
    from testbed.sim import node_env, write_state

    cluster = Cluster.objects.create(name="beat", transport="local", profile="H100-SXM-8")
    state = tmp_path / "beat01.state"
    write_state(state, node="beat01")
    Node.objects.create(cluster=cluster, hostname="beat01", local_env=node_env(sim_paths, state))
    plan = TestPlan.objects.create(slug="beat-sweep", name="Beat sweep")
    TestPlanItem.objects.create(plan=plan, check_definition=CheckDefinition.objects.get(slug="ecc-health"), order=0)
    client.force_login(make_user("op", "operator"))
    data = {"name": "each minute", "cluster": "beat", "plan": "beat-sweep", "node_set": "", "crontab": "* * * * *"}
    assert client.post(reverse("health:schedule_create"), data).status_code == 302

    log = (tmp_path / "beat.log").open("ab")
    beat = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "worker", "beat", "--loglevel=INFO",
         "-S", "django_celery_beat.schedulers:DatabaseScheduler", "--schedule", str(tmp_path / "beat.db")],
        cwd=REPO, env=celery_worker_process.env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 150
        run = None
        while time.monotonic() < deadline:
            run = Run.objects.filter(cluster=cluster).first()
            if run is not None and not run.is_active:
                break
            time.sleep(1)
        log_text = (tmp_path / "beat.log").read_text(errors="replace")
        assert run is not None, f"no run within 150 s; beat log:\n{log_text[-3000:]}"
        assert run.status == "pass", run.reason
        assert ScheduledFire.objects.get(run=run).schedule.name == "each minute"
        # What follows the close ran in the worker as its own task (kiln.run_closed), not in the
        # node task that closed the run: the node's health, its /metrics lines, the key values.
        node = Node.objects.get(hostname="beat01")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not RunKeyValue.objects.filter(run=run).exists():
            time.sleep(0.5)
        worker_log = celery_worker_process.log_path.read_text(errors="replace")
        assert NodeHealth.objects.get(node=node).state == "healthy", worker_log[-3000:]
        assert NodeMetrics.objects.filter(node=node, family="kiln_gpu_ecc_errors").exists()
        assert RunKeyValue.objects.filter(run=run, subject="beat01").exists(), worker_log[-3000:]
        assert "kiln.run_closed" in worker_log and "succeeded" in worker_log
    finally:
        if beat.poll() is None:
            os.killpg(beat.pid, signal.SIGTERM)
            beat.wait(timeout=20)

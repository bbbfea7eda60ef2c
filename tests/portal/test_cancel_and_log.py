"""Cancel from the command line and the web, `kiln_run --json` without waiting, and the run's log
on the run page."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from portal.inventory.models import Cluster
from portal.runs import events, services
from portal.runs.models import CheckResult, Run, RunEvent

pytestmark = pytest.mark.django_db


def command(*args: str) -> tuple[int, str]:
    out = StringIO()
    try:
        call_command(*args, stdout=out, stderr=StringIO())
    except SystemExit as exited:
        return int(exited.code or 0), out.getvalue()
    return 0, out.getvalue()


def test_kiln_run_json_without_wait_prints_the_run_at_once(cluster: Cluster, quick_plan, monkeypatch) -> None:
    from portal.runs import dispatch

    monkeypatch.setattr(dispatch, "enqueue_node", lambda **kwargs: None)  # no broker here
    code, out = command("kiln_run", "c1", "unit", "--json")

    run = Run.objects.get()
    assert code == 0 and json.loads(out) == {"run": run.pk, "status": "queued"}


def test_kiln_cancel_cancels_queued_and_running_checks(cluster: Cluster, make_run) -> None:
    run = make_run(cluster)
    services.results_claim(run_id=run.pk, node_id=cluster.nodes.get(hostname="n01").pk, claim="task-a")

    code, out = command("kiln_cancel", str(run.pk), "--reason", "wrong nodes", "--json")

    assert code == 0 and json.loads(out) == {"run": run.pk, "status": "cancelled", "cancelled": 8}
    assert set(CheckResult.objects.filter(run=run).values_list("status", flat=True)) == {"cancelled"}
    message = RunEvent.objects.get(run=run, kind=events.CANCELLED).message
    assert message == "wrong nodes: 2 running and 6 queued check(s) cancelled"


def test_kiln_cancel_says_so_when_the_run_had_finished(cluster: Cluster, make_run) -> None:
    run = make_run(cluster)
    services.run_cancel(run=run)

    code, out = command("kiln_cancel", str(run.pk))

    assert code == 1 and out.strip() == f"run {run.pk} had already finished: cancelled"
    with pytest.raises(CommandError, match="no run #999999"):
        call_command("kiln_cancel", "999999", stdout=StringIO())


def test_kiln_cancel_names_who_cancelled_by_default(cluster: Cluster, make_run) -> None:
    run = make_run(cluster)
    code, out = command("kiln_cancel", str(run.pk))
    assert code == 0 and out.startswith(f"run {run.pk}: 8 check(s) cancelled")
    assert CheckResult.objects.filter(run=run).first().reason.endswith("from the command line")


def test_the_web_cancel_stops_running_checks_too(client, make_user, cluster: Cluster, make_run) -> None:
    run = make_run(cluster)
    services.results_claim(run_id=run.pk, node_id=cluster.nodes.get(hostname="n02").pk, claim="task-a")
    client.force_login(make_user("otto", "operator"))

    response = client.post(reverse("runs:run_cancel", args=[run.pk]), follow=True)

    assert "Cancelled 8 check(s); running ones are being stopped on their nodes" in response.content.decode()
    assert CheckResult.objects.get(run=run, node__hostname="n02", item_key="ecc-health").reason == (
        "cancelled by otto while it ran"
    )


def test_the_run_page_shows_the_runs_log_escaped(client, make_user, cluster: Cluster, make_run) -> None:
    run = make_run(cluster)
    client.force_login(make_user("vera", "viewer"))
    assert (
        "Nothing happened to this run besides its checks"
        in client.get(reverse("runs:run_detail", args=[run.pk])).content.decode()
    )
    events.run_event_add(run_id=run.pk, kind=events.REENQUEUED, message="n01: its 2 queued check(s) waited 125 s <x>")
    events.run_event_add(run_id=run.pk, kind=events.WORKER_LOST, message="n02: burn-in marked error (worker lost: w1)")

    html = client.get(reverse("runs:run_detail", args=[run.pk])).content.decode()

    log = html[html.index('<section id="run-log">') :]
    assert log.index("re-enqueued") < log.index("worker lost")  # oldest first
    assert "waited 125 s &lt;x&gt;" in log and "<x>" not in log

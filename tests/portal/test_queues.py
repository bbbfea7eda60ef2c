"""Cluster queues (portal/runs/queues.py): a run's tasks go to the queue its snapshot froze, the
reaper looks for them there, says when no worker serves it, and leaves a site's orphaned process
groups to that site's workers. The broker and the senders are fakes; tests/integration/
test_two_sites.py runs two real workers on two queues."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse
from django.utils import timezone

from portal.execution import reaper
from portal.execution.reaper import reap
from portal.inventory.models import Cluster
from portal.runs import dispatch, queues
from portal.runs.models import CheckResult, Run, RunEvent
from tests.portal.test_reaper_liveness import overdue

pytestmark = pytest.mark.django_db


@pytest.fixture
def viewer_client(client, make_user):
    client.force_login(make_user("viewer1", "viewer"))
    return client


@pytest.fixture
def signatures(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict[str, Any]]]:
    """What dispatch and the reaper hand to Celery: (task name, apply_async options)."""
    calls: list[tuple[str, dict[str, Any]]] = []

    class Sig:
        def __init__(self, name: str) -> None:
            self.name = name

        def apply_async(self, **options: Any) -> None:
            calls.append((self.name, options))

    monkeypatch.setattr(dispatch.app, "signature", Sig)
    return calls


def on_queue(cluster: Cluster, queue: str) -> Cluster:
    cluster.queue = queue
    cluster.save(update_fields=["queue"])
    return cluster


def test_it_validates_a_queue_name(cluster) -> None:
    for bad in ("site a", "a,b", "-Q", "x" * 64, "", "site:a", "unacked", "unacked_index", "celeryev", "celery",
                "_kombu.binding.x", "x.pidbox"):  # fmt: skip
        cluster.queue = bad
        with pytest.raises(ValidationError) as info:
            cluster.full_clean()
        assert "queue" in info.value.message_dict, bad
    cluster.queue = "site-a.dc_2"
    cluster.full_clean()


def test_it_sends_node_and_group_tasks_to_the_queue_the_run_froze(cluster, make_run, signatures, monkeypatch) -> None:
    monkeypatch.setattr(dispatch, "group_item_limits", lambda **kw: (60, 70))  # the unit plan has no group check
    run = make_run(on_queue(cluster, "site-a"))
    assert run.plan_snapshot["queue"] == "site-a"
    on_queue(cluster, "site-b")  # changed after the run started: its re-sends stay where it began

    dispatch.enqueue_node(run_id=run.pk, node_id=cluster.nodes.first().pk)
    result = CheckResult.objects.filter(run=run).first()
    CheckResult.objects.filter(pk=result.pk).update(item_key="gpu-inventory")
    dispatch.enqueue_group(run_id=run.pk, result_id=result.pk)

    assert [(name, options["queue"]) for name, options in signatures] == [
        ("kiln.run_node", "site-a"),
        ("kiln.run_group", "site-a"),
    ]


def test_a_run_from_before_queues_goes_to_the_default_queue(cluster, make_run, signatures) -> None:
    run = make_run(cluster)
    snapshot = {k: v for k, v in run.plan_snapshot.items() if k != "queue"}
    Run.objects.filter(pk=run.pk).update(plan_snapshot=snapshot)
    dispatch.enqueue_node(run_id=run.pk, node_id=cluster.nodes.first().pk)
    assert signatures[0][1]["queue"] == "default" == queues.default_queue()


def test_it_looks_for_lost_messages_in_the_runs_queue_and_says_once_that_nobody_serves_it(
    cluster, make_run, sent, no_broker, django_capture_on_commit_callbacks
) -> None:
    run = make_run(on_queue(cluster, "site-b"))
    overdue(run)
    no_broker["served"] = {"default", "site-a"}
    no_broker["pending"] = {("kiln.run_node", (run.pk, n.pk)) for n in cluster.nodes.all()}  # all waiting

    with django_capture_on_commit_callbacks(execute=True):
        reap()
    overdue(run)
    with django_capture_on_commit_callbacks(execute=True):
        reap()

    assert no_broker["asked"][0]["queues"] == {"site-b"}
    assert sent == []  # waiting in the broker: nothing is sent again
    events = list(RunEvent.objects.filter(run=run).values_list("kind", "message"))
    assert len(events) == 1, events
    kind, message = events[0]
    assert kind == "no worker"
    assert message.startswith("no worker is serving queue site-b: 8 check(s) wait for one")
    assert "celery -A worker worker -Q site-b" in message


def test_it_says_nothing_of_workers_when_a_worker_serves_the_queue_or_it_cannot_ask(
    cluster, make_run, sent, no_broker
) -> None:
    run = make_run(on_queue(cluster, "site-a"))
    for served in ({"site-a"}, None):
        overdue(run)
        no_broker["served"] = served
        reap()
    assert not RunEvent.objects.filter(run=run, kind="no worker").exists()


def test_it_leaves_a_sites_orphans_to_that_sites_workers(cluster, make_run, monkeypatch) -> None:
    from portal.execution.reaper import reaper_pass

    run = make_run(on_queue(cluster, "site-a"))
    CheckResult.objects.filter(pk=CheckResult.objects.filter(run=run).first().pk).update(
        status="error", remote_pgid=4242, lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    stopped: list[Any] = []
    monkeypatch.setattr(reaper, "_stop_on", lambda host, rows: stopped.append(host) or {})

    reaper_pass(queues=[queues.default_queue()])  # the default queue's worker (or beat): not its node
    assert stopped == []
    reaper_pass(queues=["site-a"])  # a site-a worker's reaper thread
    assert [host.hostname for host in stopped] == [CheckResult.objects.get(remote_pgid=4242).node.hostname]


def test_the_cluster_page_names_its_queue_and_the_run_page_says_nobody_serves_it(
    viewer_client, cluster, make_run, sent, no_broker
) -> None:
    run = make_run(on_queue(cluster, "site-b"))
    page = viewer_client.get(reverse("inventory:cluster_detail", args=[cluster.name])).content.decode()
    assert '<code id="cluster-queue"' in page and ">site-b</code>" in page

    overdue(run)
    no_broker["served"] = set()  # no worker answered at all
    reap()
    page = viewer_client.get(reverse("runs:run_detail", args=[run.pk])).content.decode()
    assert "no worker is serving queue site-b" in page

"""Re-run the failed and errored nodes of a finished run, as a new run of the same snapshot."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from django.urls import reverse

from portal.catalog.models import TestPlanItem
from portal.runs import services
from portal.runs.models import CheckResult, Run
from tests.portal.helpers import set_result

pytestmark = pytest.mark.django_db


@pytest.fixture
def finished(cluster, make_run) -> Run:
    """A finished run of c1: n02 failed ECC, n04 could not be reached, n01 and n03 passed."""
    run = make_run(cluster)
    for host in ("n01", "n02", "n03", "n04"):
        set_result(run, host, "gpu-inventory", "pass", "8 GPUs")
        set_result(run, host, "ecc-health", "pass", "ECC on")
    set_result(run, "n02", "ecc-health", "fail", "GPU 5: 3 uncorrectable ECC errors")
    set_result(run, "n04", "gpu-inventory", "error", "unreachable: no route to host")
    services.run_finalize(run_id=run.pk)
    run.refresh_from_db()
    assert run.status == "fail"  # n02's proven fault outranks n04's "could not tell"
    return run


def test_it_reruns_only_the_failed_and_errored_nodes_linked_to_the_first_run(finished, make_user) -> None:
    rerun = services.run_rerun(run=finished, requested_by=make_user("otto", "operator"), enqueue=False)

    assert rerun.parent == finished
    assert rerun.node_set == "n[02,04]"
    assert rerun.requested_by.username == "otto"
    assert rerun.status == "queued"
    assert sorted(CheckResult.objects.filter(run=rerun).values_list("node__hostname", "item_key")) == [
        ("n02", "ecc-health"),
        ("n02", "gpu-inventory"),
        ("n04", "ecc-health"),
        ("n04", "gpu-inventory"),
    ]
    assert list(finished.reruns.all()) == [rerun]


def test_it_reuses_the_parents_snapshot_not_todays_plan(finished, quick_plan) -> None:
    # The plan changed after the first run: a stricter threshold and a new item.
    TestPlanItem.objects.filter(plan=quick_plan, check_definition__slug="ecc-health").update(
        threshold_overrides={"max_uncorrectable": 0, "max_pending_remaps": 0}
    )
    TestPlanItem.objects.create(plan=quick_plan, check_definition_id=_definition("ib-ports"), order=9)

    rerun = services.run_rerun(run=finished, enqueue=False)

    rerun.refresh_from_db()
    assert rerun.plan_snapshot == finished.plan_snapshot
    assert rerun.plan_id == finished.plan_id
    assert not CheckResult.objects.filter(run=rerun, item_key="ib-ports").exists()


def _definition(slug: str) -> int:
    from portal.catalog.models import CheckDefinition

    return CheckDefinition.objects.get(slug=slug).pk


def test_it_refuses_when_nothing_failed(cluster, make_run) -> None:
    run = make_run(cluster)
    CheckResult.objects.filter(run=run).update(status="pass")
    CheckResult.objects.filter(run=run, node__hostname="n01", item_key="ecc-health").update(status="warn")
    run = services.run_finalize(run_id=run.pk)

    with pytest.raises(services.RunStartError, match="has no failed or errored result: there is nothing to re-run"):
        services.run_rerun(run=run, enqueue=False)
    assert Run.objects.count() == 1


def test_it_refuses_while_the_run_is_active(cluster, make_run) -> None:
    run = make_run(cluster)
    set_result(run, "n01", "ecc-health", "fail", "GPU 1")

    with pytest.raises(services.RunStartError, match="still queued"):
        services.run_rerun(run=run, enqueue=False)
    assert Run.objects.count() == 1


def test_it_reruns_the_nodes_a_failed_multi_node_check_named(finished) -> None:
    group = CheckResult.objects.create(
        run=finished,
        node=finished.cluster.nodes.get(hostname="n01"),
        item_key="nccl-multi",
        kind="nccl_allreduce_multi",
        scope="group",
        node_set="n[01-04]",
        status="fail",
        attribution={"n01": {"status": "pass", "reason": ""}, "n03": {"status": "fail", "reason": "slow port"}},
    )

    assert services.run_rerun(run=finished, enqueue=False).node_set == "n[02-04]"

    group.attribution = {}  # no node named: every member is re-run
    group.save()
    assert services.run_rerun(run=finished, enqueue=False).node_set == "n[01-04]"


def test_it_enqueues_the_rerun_nodes_once_committed(finished, monkeypatch, django_capture_on_commit_callbacks) -> None:
    from portal.runs import dispatch

    enqueued: list[dict] = []
    monkeypatch.setattr(dispatch, "enqueue_node", lambda **kwargs: enqueued.append(kwargs))

    with django_capture_on_commit_callbacks(execute=True):
        rerun = services.run_rerun(run=finished)

    hosts = dict(finished.cluster.nodes.values_list("pk", "hostname"))
    assert sorted(hosts[e["node_id"]] for e in enqueued) == ["n02", "n04"]
    assert {e["run_id"] for e in enqueued} == {rerun.pk}


# --- the view ----------------------------------------------------------------------------------------


def test_it_lets_an_operator_rerun_from_the_run_page(client, make_user, finished, monkeypatch) -> None:
    from portal.runs import dispatch

    monkeypatch.setattr(dispatch, "enqueue_node", lambda **kwargs: None)
    client.force_login(make_user("otto", "operator"))
    page = client.get(reverse("runs:run_detail", args=[finished.pk])).content.decode()
    assert 'id="rerun"' in page and "Re-run failed/errored nodes" in page

    response = client.post(reverse("runs:run_rerun", args=[finished.pk]), follow=True)

    rerun = Run.objects.get(parent=finished)
    assert response.redirect_chain == [(reverse("runs:run_detail", args=[rerun.pk]), 302)]
    html = response.content.decode()
    assert f"re-runs the failed and errored nodes n[02,04] of run #{finished.pk}" in html
    assert f're-run of <a href="{reverse("runs:run_detail", args=[finished.pk])}">#{finished.pk}</a>' in html
    assert rerun.requested_by.username == "otto"


def test_it_says_why_when_there_is_nothing_to_rerun(client, make_user, cluster, make_run) -> None:
    run = make_run(cluster)
    CheckResult.objects.filter(run=run).update(status="pass")
    services.run_finalize(run_id=run.pk)
    client.force_login(make_user("otto", "operator"))

    response = client.post(reverse("runs:run_rerun", args=[run.pk]), follow=True)

    assert response.redirect_chain == [(reverse("runs:run_detail", args=[run.pk]), 302)]
    assert "Nothing re-run: run #" in response.content.decode()
    assert 'id="rerun"' not in response.content.decode()  # no button either: nothing failed
    assert Run.objects.count() == 1


def test_it_hides_the_rerun_button_from_viewers_and_forbids_them(client, make_user, finished) -> None:
    client.force_login(make_user("vera", "viewer"))
    assert 'id="rerun"' not in client.get(reverse("runs:run_detail", args=[finished.pk])).content.decode()
    assert client.post(reverse("runs:run_rerun", args=[finished.pk])).status_code == 403
    assert Run.objects.count() == 1


def test_it_forbids_users_without_a_role_to_rerun(client, make_user, finished) -> None:
    client.force_login(make_user("nobody"))
    assert client.post(reverse("runs:run_rerun", args=[finished.pk])).status_code == 403
    assert Run.objects.count() == 1


def test_it_sends_anonymous_users_to_login_instead_of_rerunning(client, finished) -> None:
    url = reverse("runs:run_rerun", args=[finished.pk])
    response = client.post(url)
    assert response.status_code == 302
    assert response["Location"] == f"/login/?next={quote(url)}"
    assert Run.objects.count() == 1


def test_it_only_reruns_on_post(client, make_user, finished) -> None:
    client.force_login(make_user("otto", "operator"))
    assert client.get(reverse("runs:run_rerun", args=[finished.pk])).status_code == 405
    assert Run.objects.count() == 1

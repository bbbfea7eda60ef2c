"""Node health state: derivation from results, transitions with their cause, the Run hook."""

from __future__ import annotations

import pytest

from portal.health.models import HealthTransition, NodeHealth
from portal.health.services import Judged, health_evaluate_run, state_from_results
from tests.health.helpers import finish

pytestmark = pytest.mark.django_db


def test_it_derives_each_state_from_the_worst_result() -> None:
    ok = Judged("pass", "fine", "GPU inventory")
    assert state_from_results([ok]) == ("healthy", "")
    assert state_from_results([ok, Judged("warn", "hot", "DLC")]) == ("degraded", "DLC: hot")
    assert state_from_results([Judged("error", "timed out", "ECC"), ok]) == ("degraded", "ECC: timed out")
    assert state_from_results([Judged("warn", "x", "A"), Judged("fail", "GPU 3 ECC", "ECC")]) == (
        "failed",
        "ECC: GPU 3 ECC",
    )
    assert (
        state_from_results([Judged("error", "unreachable: no route", "ECC"), Judged("error", "unreachable: x", "B")])[0]
        == "unreachable"
    )
    assert (
        state_from_results([Judged("error", "timed out", "A"), Judged("error", "timed out", "B")])[0] == "unreachable"
    )
    assert state_from_results([Judged("skipped", "", "A"), Judged("cancelled", "", "B")]) is None


def test_it_records_a_transition_with_the_cause_when_a_run_finishes(
    cluster, make_run, django_capture_on_commit_callbacks
) -> None:
    run = finish(
        make_run(cluster), {"n02": ("fail", "GPU 3: 2 uncorrectable ECC errors")}, django_capture_on_commit_callbacks
    )
    assert run.status == "fail"
    health = NodeHealth.objects.get(node__hostname="n02")
    assert health.state == "failed" and health.last_run_id == run.pk
    t = HealthTransition.objects.get(node__hostname="n02")
    assert str(t) == f"n02: unknown → failed: ECC and Xid: GPU 3: 2 uncorrectable ECC errors (run #{run.pk})"
    assert NodeHealth.objects.filter(state="healthy").count() == 3


def test_it_records_no_new_transition_when_the_state_stays(
    cluster, make_run, django_capture_on_commit_callbacks
) -> None:
    finish(make_run(cluster), {"n02": ("fail", "ECC")}, django_capture_on_commit_callbacks)
    second = finish(make_run(cluster), {"n02": ("fail", "ECC again")}, django_capture_on_commit_callbacks)
    assert HealthTransition.objects.filter(node__hostname="n02").count() == 1
    assert health_evaluate_run(run_id=second.pk) == []  # idempotent
    assert NodeHealth.objects.get(node__hostname="n02").reason == "ECC and Xid: ECC again"


def test_it_records_recovery(cluster, make_run, django_capture_on_commit_callbacks) -> None:
    finish(make_run(cluster), {"n02": ("fail", "ECC")}, django_capture_on_commit_callbacks)
    finish(make_run(cluster), capture=django_capture_on_commit_callbacks)
    t = HealthTransition.objects.filter(node__hostname="n02").first()
    assert (t.from_state, t.to_state, t.is_recovery) == ("failed", "healthy", True)


def test_it_lets_no_older_run_overwrite_a_newer_verdict(cluster, make_run) -> None:
    old = make_run(cluster)
    new = make_run(cluster)
    finish(new, {"n01": ("fail", "ECC")})
    health_evaluate_run(run_id=new.pk)
    finish(old)
    health_evaluate_run(run_id=old.pk)
    assert NodeHealth.objects.get(node__hostname="n01").state == "failed"


def test_it_ignores_cancelled_and_active_runs(cluster, make_run) -> None:
    run = make_run(cluster)
    assert health_evaluate_run(run_id=run.pk) == []
    run.status = "cancelled"
    run.save()
    assert health_evaluate_run(run_id=run.pk) == []
    assert not NodeHealth.objects.exists()


def test_it_pins_a_group_failure_on_the_attributed_node(cluster, make_run) -> None:
    from portal.catalog.models import CheckDefinition, TestPlan, TestPlanItem

    plan = TestPlan.objects.create(slug="grp", name="group")
    for order, slug in enumerate(["ecc-health", "nccl-allreduce-multi"]):
        TestPlanItem.objects.create(plan=plan, check_definition=CheckDefinition.objects.get(slug=slug), order=order)
    run = make_run(cluster, plan=plan)
    run.results.update(status="pass")
    run.results.filter(scope="group").update(
        status="fail", attribution={"n03": {"status": "fail", "reason": "slow pair n03-n04"}, "n04": {"status": "pass"}}
    )
    run.status, run.finished_at = "fail", run.created_at
    run.save()
    health_evaluate_run(run_id=run.pk)
    states = dict(NodeHealth.objects.values_list("node__hostname", "state"))
    assert states == {"n01": "healthy", "n02": "healthy", "n03": "failed", "n04": "healthy"}

"""Campaign state, waivers, two-signature issuing and the audit log."""

from __future__ import annotations

import json

import pytest

from portal.catalog.models import CheckDefinition, TestPlanItem
from portal.certificates import selectors, services
from portal.certificates.models import Certificate, Signature
from portal.inventory.models import Node
from tests.certificates.conftest import finish


def _cell(campaign, hostname: str, item_key: str) -> selectors.Cell:
    state = selectors.campaign_state(campaign=campaign)
    return next(c for c in state.cells if c.hostname == hostname and c.item_key == item_key)


def test_it_takes_the_latest_result_per_node_and_check(campaign, campaign_run):
    campaign_run(statuses={("n01", "ecc-health"): "fail"})
    assert _cell(campaign, "n01", "ecc-health").state == "fail"
    campaign_run(node_set="n01")
    state = selectors.campaign_state(campaign=campaign)
    assert _cell(campaign, "n01", "ecc-health").state == "pass"
    assert state.open_cells == []
    assert state.ready


def test_it_never_lets_a_cancelled_result_replace_evidence(campaign, campaign_run):
    campaign_run()
    campaign_run(node_set="n01", statuses={("n01", "ecc-health"): "cancelled"})
    assert _cell(campaign, "n01", "ecc-health").state == "pass"


def test_it_lists_nodes_without_a_result_as_open(campaign, campaign_run):
    campaign_run(node_set="n[01-02]")
    state = selectors.campaign_state(campaign=campaign)
    assert {(c.hostname, c.state) for c in state.open_cells} == {(h, "missing") for h in ("n03", "n04") for _ in (1, 2)}
    assert selectors.open_node_set(state=state) == "n[03-04]"
    assert not state.ready


def test_it_takes_a_node_out_of_scope_with_its_reason(campaign, campaign_run, users):
    campaign_run(statuses={("n04", "gpu-inventory"): "fail"})
    node = Node.objects.get(hostname="n04")
    with pytest.raises(services.CampaignError):
        services.node_scope_remove(campaign=campaign, node=node, reason="  ", user=users["operator"])
    services.node_scope_remove(campaign=campaign, node=node, reason="sent for RMA", user=users["operator"])
    state = selectors.campaign_state(campaign=campaign)
    assert [n.hostname for n, _ in state.rows] == ["n01", "n02", "n03"]
    assert state.ready
    with pytest.raises(services.CampaignError, match="out of scope"):
        services.campaign_run_start(campaign=campaign, node_set="n04", user=users["operator"], enqueue=False)


def test_it_counts_only_runs_of_its_cluster_and_plan(campaign, cluster, make_run, users):
    from portal.catalog.models import TestPlan

    other = make_run(cluster, plan=TestPlan.objects.get(slug="quick"))
    with pytest.raises(services.CampaignError, match="another plan"):
        services.campaign_run_add(campaign=campaign, run=other, user=users["operator"])
    same = make_run(cluster)
    services.campaign_run_add(campaign=campaign, run=same, user=users["operator"])
    with pytest.raises(services.CampaignError, match="already belongs"):
        services.campaign_run_add(campaign=campaign, run=same, user=users["operator"])


def test_it_refuses_waivers_without_justification_approver_or_failure(campaign, campaign_run, users):
    campaign_run(statuses={("n02", "ecc-health"): "fail"})
    with pytest.raises(services.CampaignError, match="justification"):
        services.waiver_grant(
            campaign=campaign, hostname="n02", item_key="ecc-health", justification="ok", user=users["vendor"]
        )
    with pytest.raises(services.CampaignError, match="approver"):
        services.waiver_grant(
            campaign=campaign,
            hostname="n02",
            item_key="ecc-health",
            justification="long enough text",
            user=users["operator"],
        )
    with pytest.raises(services.CampaignError, match="no failing result"):
        services.waiver_grant(
            campaign=campaign,
            hostname="n01",
            item_key="ecc-health",
            justification="long enough text",
            user=users["vendor"],
        )
    waiver = services.waiver_grant(
        campaign=campaign,
        hostname="n02",
        item_key="ecc-health",
        justification="GPU 0 replaced under RMA",
        user=users["vendor"],
    )
    cell = _cell(campaign, "n02", "ecc-health")
    assert cell.state == "waived" and cell.waiver == waiver
    assert waiver.granted_by == users["vendor"] and waiver.granted_at is not None


def test_it_drops_a_waiver_when_a_newer_result_fails_again(campaign, campaign_run, users):
    campaign_run(statuses={("n02", "ecc-health"): "fail"})
    services.waiver_grant(
        campaign=campaign,
        hostname="n02",
        item_key="ecc-health",
        justification="accepted once only",
        user=users["vendor"],
    )
    campaign_run(node_set="n02", statuses={("n02", "ecc-health"): "fail"})
    assert _cell(campaign, "n02", "ecc-health").state == "fail"


def test_it_issues_only_with_a_vendor_and_a_customer_signature(campaign, campaign_run, users, make_user):
    campaign_run()
    first = services.certificate_sign(campaign=campaign, user=users["vendor"])
    assert isinstance(first, Signature) and first.side == "vendor"
    with pytest.raises(services.CampaignError, match="signed this already"):
        services.certificate_sign(campaign=campaign, user=users["vendor"])
    with pytest.raises(services.CampaignError, match="vendor side has signed"):
        services.certificate_sign(campaign=campaign, user=make_user("val", "approver", "vendor"))
    with pytest.raises(services.CampaignError, match="approver"):
        services.certificate_sign(campaign=campaign, user=make_user("oscar", "operator", "customer"))
    assert not Certificate.objects.exists()
    second = services.certificate_sign(campaign=campaign, user=users["customer"])
    assert isinstance(second, Signature) and second.side == "customer"
    campaign.refresh_from_db()
    assert campaign.issue_requested_at is not None and not Certificate.objects.exists(), "issued by the task"
    certificate = services.certificate_issue(campaign_id=campaign.pk)
    assert isinstance(certificate, Certificate)
    assert certificate.verdict == "PASS"
    payload = json.loads(certificate.payload)
    assert [s["side"] for s in payload["signatures"]] == ["vendor", "customer"]
    assert payload["nodes"][0]["gpus"] == [
        {"index": 0, "uuid": "GPU-n01-0", "serial": "SNn010"},
        {"index": 1, "uuid": "GPU-n01-1", "serial": "SNn011"},
    ]
    assert set(certificate.signatures.values_list("side", flat=True)) == {"vendor", "customer"}


def test_it_refuses_a_signer_in_both_or_neither_side(campaign, campaign_run, make_user):
    campaign_run()
    for user in (make_user("both", "approver", "vendor", "customer"), make_user("none", "approver")):
        with pytest.raises(services.CampaignError, match="exactly one"):
            services.certificate_sign(campaign=campaign, user=user)


def test_it_refuses_to_sign_while_items_are_open_or_runs_active(campaign, campaign_run, users):
    campaign_run(statuses={("n03", "gpu-inventory"): "error"})
    with pytest.raises(services.CampaignError, match="still open"):
        services.certificate_sign(campaign=campaign, user=users["vendor"])
    services.campaign_run_start(campaign=campaign, node_set="n03", user=users["operator"], enqueue=False)
    with pytest.raises(services.CampaignError, match="still active"):
        services.certificate_sign(campaign=campaign, user=users["vendor"])


def test_it_withdraws_a_signature_when_the_evidence_changes(campaign, campaign_run, users):
    campaign_run(statuses={("n02", "ecc-health"): "fail"})
    services.waiver_grant(
        campaign=campaign,
        hostname="n02",
        item_key="ecc-health",
        justification="GPU replaced, accepted",
        user=users["vendor"],
    )
    services.certificate_sign(campaign=campaign, user=users["vendor"])
    campaign_run(node_set="n02")  # the re-run passes: the body the vendor signed is no longer current
    outcome = services.certificate_sign(campaign=campaign, user=users["customer"])
    assert isinstance(outcome, Signature)
    assert Signature.objects.get(user=users["vendor"]).withdrawn
    assert not Certificate.objects.exists()
    campaign.refresh_from_db()
    assert campaign.issue_requested_at is None, "one standing signature: nothing to issue yet"
    services.certificate_sign(campaign=campaign, user=users["vendor"])
    certificate = services.certificate_issue(campaign_id=campaign.pk)
    assert isinstance(certificate, Certificate) and certificate.verdict == "PASS"


def test_it_records_every_step_in_the_audit_log(issued, campaign):
    actions = list(campaign.audit.order_by("at", "id").values_list("action", flat=True))
    assert actions == ["campaign opened", "run started", "waiver granted", "signed", "signed", "certificate issued"]
    assert campaign.audit.get(action="waiver granted").username == "vera"


def test_it_attributes_a_group_result_to_each_member(campaign, cluster, users):
    from portal.catalog.models import TestPlan

    plan = TestPlan.objects.create(slug="multi", name="multi")
    TestPlanItem.objects.create(plan=plan, check_definition=CheckDefinition.objects.get(slug="nccl-allreduce-multi"))
    multi = services.campaign_create(cluster=cluster, plan=plan, name="multi", user=users["operator"])
    run = services.campaign_run_start(campaign=multi, node_set="", user=users["operator"], enqueue=False)
    group = run.results.get(scope="group")
    group.status = "fail"
    group.attribution = {"n03": {"status": "fail", "reason": "slow pair n03-n04"}, "n01": {"status": "pass"}}
    group.save()
    run.status = "fail"
    run.save()
    states = {c.hostname: c.state for c in selectors.campaign_state(campaign=multi).cells}
    assert states == {"n01": "pass", "n02": "fail", "n03": "fail", "n04": "fail"}


def test_it_keeps_the_certificate_when_the_plan_or_definition_changes(issued, quick_plan):
    before = (issued.payload, issued.sha256, bytes(issued.pdf))
    item = TestPlanItem.objects.get(plan=quick_plan, check_definition__slug="ecc-health")
    item.threshold_overrides = {"max_volatile_uncorrected": 99}
    item.save()
    CheckDefinition.objects.filter(slug="ecc-health").update(thresholds={"max_volatile_uncorrected": 50})
    issued.refresh_from_db()
    assert (issued.payload, issued.sha256, bytes(issued.pdf)) == before
    ecc = next(i for i in json.loads(issued.payload)["campaign_plan"]["items"] if i["key"] == "ecc-health")
    assert ecc["thresholds"]["max_volatile_uncorrected"] == 0


def test_it_revokes_with_a_reason_once(issued, users):
    with pytest.raises(services.CampaignError, match="why"):
        services.certificate_revoke(certificate=issued, reason=" ", user=users["customer"])
    services.certificate_revoke(certificate=issued, reason="wrong site on the cover", user=users["customer"])
    issued = type(issued).objects.select_related("revocation").get(pk=issued.pk)
    assert issued.revoked and issued.revocation.reason == "wrong site on the cover"
    assert issued.revocation.username == users["customer"].username
    with pytest.raises(services.CampaignError, match="revoked already"):
        services.certificate_revoke(certificate=issued, reason="again", user=users["customer"])


def test_it_builds_the_run_through_the_run_services(campaign, users):
    run = services.campaign_run_start(campaign=campaign, node_set="n[01-02]", user=users["operator"], enqueue=False)
    assert run.plan_id == campaign.plan_id and run.requested_by == users["operator"]
    assert run.results.count() == 4
    assert run.campaign_link.campaign == campaign
    with pytest.raises(services.CampaignError):
        services.campaign_run_start(campaign=campaign, node_set="nope[1-2]", user=users["operator"], enqueue=False)
    finish(run)

"""Taking back what was given before issue: a waiver withdrawn (the item is open again), a node
brought back into scope; both recorded, both refused once a certificate cites them."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction
from django.urls import reverse

from portal.certificates import services
from portal.certificates.models import ScopeExclusion, Signature, Waiver
from portal.certificates.selectors import campaign_state

pytestmark = pytest.mark.django_db


def _waive(campaign, users) -> Waiver:
    return services.waiver_grant(
        campaign=campaign, hostname="n02", item_key="ecc-health", justification="GPU swap booked", user=users["vendor"]
    )


def test_an_approver_withdraws_a_waiver_and_the_item_reopens(campaign, campaign_run, users, client) -> None:
    campaign_run(statuses={("n02", "ecc-health"): "fail"})
    waiver = _waive(campaign, users)
    services.certificate_sign(campaign=campaign, user=users["vendor"])
    client.force_login(users["customer"])
    page = client.get(reverse("certificates:campaign_detail", args=[campaign.pk])).content.decode()
    assert 'id="waivers"' in page and "GPU swap booked" in page
    url = reverse("certificates:campaign_waiver_withdraw", args=[campaign.pk, waiver.pk])
    assert "reason" in client.post(url, {"reason": ""}, follow=True).content.decode()  # refused: why?
    assert Waiver.objects.exists()
    client.post(url, {"reason": "customer wants the GPU swapped first"})
    assert not Waiver.objects.exists()
    assert [(c.hostname, c.item_key) for c in campaign_state(campaign=campaign).open_cells] == [("n02", "ecc-health")]
    event = campaign.audit.get(action="waiver withdrawn")
    assert event.username == "carl" and "customer wants the GPU swapped first" in event.detail
    assert "GPU swap booked" in event.detail, "what it said is kept"
    with pytest.raises(services.CampaignError, match="still open"):
        services.certificate_sign(campaign=campaign, user=users["customer"])
    assert not Signature.objects.filter(withdrawn=True).exists()  # withdrawn at the next signing


def test_only_approvers_withdraw_waivers(campaign, campaign_run, users, client) -> None:
    campaign_run(statuses={("n02", "ecc-health"): "fail"})
    waiver = _waive(campaign, users)
    client.force_login(users["operator"])
    url = reverse("certificates:campaign_waiver_withdraw", args=[campaign.pk, waiver.pk])
    assert client.post(url, {"reason": "x"}).status_code == 403
    assert Waiver.objects.exists()


def test_a_waiver_cited_by_a_certificate_stays(campaign, campaign_run, users) -> None:
    campaign_run(statuses={("n02", "ecc-health"): "fail"})
    waiver = _waive(campaign, users)
    services.certificate_sign(campaign=campaign, user=users["vendor"])
    services.certificate_sign(campaign=campaign, user=users["customer"])
    assert services.certificate_issue(campaign_id=campaign.pk) is not None
    with pytest.raises(services.CampaignError, match="campaign is closed"):
        services.waiver_withdraw(campaign=campaign, waiver_id=waiver.pk, reason="changed my mind", user=users["vendor"])
    with pytest.raises(IntegrityError, match="kiln: a waiver of a closed campaign"), transaction.atomic():
        Waiver.objects.filter(pk=waiver.pk).delete()  # below the service: the database refuses too
    assert Waiver.objects.filter(pk=waiver.pk).exists()


def test_an_operator_brings_a_node_back_into_scope(campaign, campaign_run, users, client) -> None:
    campaign_run()
    node = campaign.cluster.nodes.get(hostname="n03")
    services.node_scope_remove(campaign=campaign, node=node, reason="sent for RMA", user=users["operator"])
    client.force_login(users["operator"])
    page = client.get(reverse("certificates:campaign_detail", args=[campaign.pk])).content.decode()
    assert "Bring back" in page
    client.post(reverse("certificates:campaign_scope_restore", args=[campaign.pk]), {"hostname": "n03"})
    assert not ScopeExclusion.objects.exists()
    assert "n03" in [n.hostname for n, _ in campaign_state(campaign=campaign).rows]
    assert campaign.audit.filter(action="node back in scope", detail="n03").exists()
    response = client.post(
        reverse("certificates:campaign_scope_restore", args=[campaign.pk]), {"hostname": "n03"}, follow=True
    )
    assert "in scope already" in response.content.decode()
    client.force_login(users["viewer"])
    assert (
        client.post(reverse("certificates:campaign_scope_restore", args=[campaign.pk]), {"hostname": "n03"}).status_code
        == 403
    )

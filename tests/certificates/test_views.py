"""Pages: login and roles on every page; approver-only and operator-only actions; verify upload."""

from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from portal.certificates import services
from portal.certificates.models import Certificate, Waiver
from portal.certificates.seal import NOT_A_CERTIFICATE, VALID


@pytest.fixture
def pages(issued, campaign) -> list[str]:
    return [
        reverse("certificates:campaign_list"),
        reverse("certificates:campaign_detail", args=[campaign.pk]),
        reverse("certificates:certificate_verify"),
        reverse("certificates:certificate_pdf", args=[issued.pk]),
        reverse("certificates:certificate_json", args=[issued.pk]),
        reverse("certificates:campaign_triage_csv", args=[campaign.pk]),
        reverse("certificates:campaign_triage_rma", args=[campaign.pk]),
    ]


def test_it_redirects_anonymous_users_to_login(client, pages):
    for url in pages:
        response = client.get(url)
        assert response.status_code == 302 and response.url.startswith(reverse("login")), url


def test_it_answers_403_to_users_without_a_role(client, pages, make_user):
    client.force_login(make_user("nobody"))
    for url in pages:
        assert client.get(url).status_code == 403, url


def test_it_shows_the_campaign_to_a_viewer_with_audit_and_certificate(client, pages, users, issued):
    client.force_login(users["viewer"])
    for url in pages:
        assert client.get(url).status_code == 200, url
    page = client.get(pages[1]).content.decode()
    assert "waiver granted" in page and issued.number in page and "certificate issued" in page
    assert ">Waive<" not in page and "Sign for" not in page and ">Withdraw<" not in page  # no approver controls
    assert client.get(pages[3])["Content-Type"] == "application/pdf"
    assert client.get(pages[4]).content == issued.payload.encode()


def test_it_lets_only_approvers_waive_sign_and_revoke(client, campaign, campaign_run, users):
    campaign_run(statuses={("n02", "ecc-health"): "fail"})
    waive = reverse("certificates:campaign_waive", args=[campaign.pk])
    sign = reverse("certificates:campaign_sign", args=[campaign.pk])
    data = {"hostname": "n02", "item_key": "ecc-health", "justification": "accepted by both parties"}
    for role in ("viewer", "operator"):
        client.force_login(users[role])
        assert client.post(waive, data).status_code == 403
        assert client.post(sign).status_code == 403
    assert not Waiver.objects.exists()
    client.force_login(users["vendor"])
    assert client.post(waive, data).status_code == 302
    assert Waiver.objects.count() == 1
    client.post(sign)
    client.force_login(users["customer"])
    client.post(sign)
    services.certificate_issue(campaign_id=campaign.pk)  # the task the second signature queues
    certificate = Certificate.objects.get()
    revoke = reverse("certificates:certificate_revoke", args=[certificate.pk])
    client.force_login(users["operator"])
    assert client.post(revoke, {"reason": "no"}).status_code == 403
    client.force_login(users["customer"])
    client.post(revoke, {"reason": "issued against the wrong plan"})
    certificate.refresh_from_db()
    assert certificate.revoked


def test_it_lets_only_operators_open_run_and_scope(client, cluster, quick_plan, campaign, users):
    run_url = reverse("certificates:campaign_run_start", args=[campaign.pk])
    scope_url = reverse("certificates:campaign_scope", args=[campaign.pk])
    for role in ("viewer", "vendor"):
        client.force_login(users[role])
        assert client.post(run_url, {"node_set": "n01"}).status_code == 403
        assert client.post(scope_url, {"hostname": "n01", "reason": "RMA"}).status_code == 403
        assert (
            client.post(reverse("certificates:campaign_list"), {"cluster": "c1", "plan": quick_plan.slug}).status_code
            == 403
        )
    client.force_login(users["operator"])
    client.post(run_url, {"node_set": "n01"})
    client.post(scope_url, {"hostname": "n04", "reason": "sent for RMA"})
    assert campaign.campaign_runs.count() == 1
    assert campaign.exclusions.get().reason == "sent for RMA"


def test_it_escapes_user_text_on_the_campaign_page(client, campaign, users):
    from portal.certificates import services
    from portal.inventory.models import Node

    services.node_scope_remove(
        campaign=campaign,
        node=Node.objects.get(hostname="n01"),
        reason="<script>alert(1)</script>",
        user=users["operator"],
    )
    client.force_login(users["viewer"])
    page = client.get(reverse("certificates:campaign_detail", args=[campaign.pk])).content.decode()
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;" in page


def test_it_verifies_an_uploaded_pdf(client, issued, users):
    client.force_login(users["viewer"])
    upload = SimpleUploadedFile("c.pdf", bytes(issued.pdf), content_type="application/pdf")
    response = client.post(reverse("certificates:certificate_verify"), {"pdf": upload})
    assert response.status_code == 200
    assert response.context["verdict"].status == VALID
    page = response.content.decode()
    assert 'id="verify-status">VALID<' in page and issued.number in page and "exit code 0" in page
    assert issued.key_fingerprint in page
    junk = SimpleUploadedFile("c.pdf", b"%PDF-1.4 garbage", content_type="application/pdf")
    response = client.post(reverse("certificates:certificate_verify"), {"pdf": junk})
    assert response.status_code == 200
    assert response.context["verdict"].status == NOT_A_CERTIFICATE
    assert f'id="verify-status">{NOT_A_CERTIFICATE.upper()}<' in response.content.decode()


def test_it_shows_the_campaign_in_a_fixed_number_of_queries(
    client, campaign, campaign_run, users, django_assert_max_num_queries
):
    from portal.inventory.models import Node

    campaign_run()
    client.force_login(users["viewer"])
    url = reverse("certificates:campaign_detail", args=[campaign.pk])
    with django_assert_max_num_queries(30) as small:
        client.get(url)
    Node.objects.bulk_create(Node(cluster=campaign.cluster, hostname=f"n{i:02d}") for i in range(5, 40))
    campaign_run(node_set="n[05-39]")
    with django_assert_max_num_queries(len(small.captured_queries)):
        client.get(url)


def test_its_state_grid_links_each_cell_and_escapes_reasons(client, campaign, campaign_run, users):
    from portal.runs.models import CheckResult

    run = campaign_run(statuses={("n02", "ecc-health"): "fail"})
    result = CheckResult.objects.get(run=run, node__hostname="n02", item_key="ecc-health")
    CheckResult.objects.filter(pk=result.pk).update(reason="GPU 3: <b>uncorrectable</b> ECC")
    client.force_login(users["viewer"])
    page = client.get(reverse("certificates:campaign_detail", args=[campaign.pk])).content.decode()
    grid = page[page.index('<table class="run-grid">') : page.index("</table>", page.index('<table class="run-grid">'))]
    href = reverse("runs:result_detail", args=[result.pk])
    cell = f'href="{href}" title="run #{run.pk}: GPU 3: &lt;b&gt;uncorrectable&lt;/b&gt; ECC"'
    assert cell in grid and "<b>uncorrectable" not in grid
    assert grid.count("<tr><td>") == 4 and grid.count('class="cstate green"') == 4 * len(campaign.item_keys) - 1


def test_it_offers_no_signing_on_a_closed_campaign(client, issued, campaign, users):
    client.force_login(users["vendor"])
    page = client.get(reverse("certificates:campaign_detail", args=[campaign.pk])).content.decode()
    assert 'id="campaign-closed"' in page and issued.number in page
    assert 'id="sign-form"' not in page and "waive-form" not in page and 'id="campaign-run-form"' not in page
    assert "Revoke" in page, "revoking stays possible"
    response = client.post(reverse("certificates:campaign_sign", args=[campaign.pk]))
    assert response.status_code in (200, 302)
    assert campaign.certificates.count() == 1 and not campaign.signatures.filter(certificate__isnull=True).exists()

"""Facility pages: login and roles on each (viewers read, operators edit), the forms' saves and
refusals, write-only credentials, CSV upload and export, and the link from the cluster page."""

from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from portal.facility import credentials
from portal.facility.models import NodeFeed, Pdu, Rack, Ups
from tests.facility.conftest import SECRET, SECRET_USER

pytestmark = pytest.mark.django_db


def urls(site) -> dict[str, list[str]]:
    name, pdu = site.cluster.name, site.pdus["pdu-r1-a"].pk
    return {
        "viewer": [reverse("facility:page", args=[name]), reverse("facility:export", args=[name])],
        "operator": [
            reverse("facility:item_new", args=[name, "rack"]),
            reverse("facility:item_edit", args=[name, "pdu", pdu]),
            reverse("facility:item_new", args=[name, "ups"]),
            reverse("facility:item_edit", args=[name, "loop", site.loop.pk]),
            reverse("facility:node_feeds", args=[name, "gpu01"]),
        ],
        "post": [
            reverse("facility:item_delete", args=[name, "pdu", pdu]),
            reverse("facility:import", args=[name]),
            reverse("facility:item_new", args=[name, "rack"]),
        ],
    }


def test_it_redirects_anonymous_users_to_login(client, site) -> None:
    found = urls(site)
    for url in found["viewer"] + found["operator"]:
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith(reverse("login")), url
    for url in found["post"]:
        assert client.post(url).status_code == 302, url
    assert Pdu.objects.filter(pk=site.pdus["pdu-r1-a"].pk).exists()


def test_viewers_read_but_cannot_edit(client, site, make_user) -> None:
    client.force_login(make_user("v", "viewer"))
    found = urls(site)
    for url in found["viewer"]:
        assert client.get(url).status_code == 200, url
    for url in found["operator"]:
        assert client.get(url).status_code == 403, url
    for url in found["post"]:
        assert client.post(url, {"name": "rx", "power_budget_kw": 1, "cooling_budget_kw": 1}).status_code == 403
    page = client.get(found["viewer"][0]).content.decode()
    assert "pdu-r1-a" in page and "Add a rack" not in page and "Delete" not in page and "Import" not in page
    assert Pdu.objects.count() == 6 and not Rack.objects.filter(name="rx").exists()


def test_users_without_a_role_get_nothing(client, site, make_user) -> None:
    client.force_login(make_user("nobody"))
    for url in urls(site)["viewer"]:
        assert client.get(url).status_code == 403


def test_the_cluster_page_links_to_the_facility_page(client, site, make_user) -> None:
    client.force_login(make_user("v", "viewer"))
    page = client.get(reverse("inventory:cluster_detail", args=["fac"])).content.decode()
    assert reverse("facility:page", args=["fac"]) in page


def test_the_facility_page_lists_racks_pdus_feeds_ups_and_loops(client, site, make_user) -> None:
    client.force_login(make_user("op", "operator"))
    page = client.get(reverse("facility:page", args=["fac"])).content.decode()
    for text in ("r1", "pdu-r3-b", "63 / 63 / 63", "ups1", "cdu1", "pdu-r1-a / 1 × 0.5", "(default)", "Import"):
        assert text in page, text


@pytest.fixture
def operator(client, make_user):
    client.force_login(make_user("op", "operator"))
    return client


def test_an_operator_adds_edits_and_deletes_a_rack(operator, site) -> None:
    new = reverse("facility:item_new", args=["fac", "rack"])
    response = operator.post(new, {"name": "r4", "power_budget_kw": 50, "cooling_budget_kw": 45, "position": 3})
    assert response.status_code == 302
    rack = Rack.objects.get(name="r4")
    assert (rack.cluster, rack.power_budget_kw) == (site.cluster, 50.0)
    response = operator.post(new, {"name": "r4", "power_budget_kw": 50, "cooling_budget_kw": 45, "position": 3})
    assert response.status_code == 200 and "another rack of this cluster has this name" in response.content.decode()
    operator.post(reverse("facility:item_delete", args=["fac", "rack", rack.pk]))
    assert not Rack.objects.filter(name="r4").exists()


def pdu_form(site, **fields) -> dict:
    return {"rack": site.racks["r1"].pk, "name": "pdu-r1-c", "feed": "A", "phases": 3, "voltage_v": 230,
            "breaker_a": "32;32;16", "endpoint_url": "", "verify_tls": "on", **fields}  # fmt: skip


def test_an_operator_adds_a_pdu_with_breakers_per_phase(operator, site) -> None:
    response = operator.post(reverse("facility:item_new", args=["fac", "pdu"]), pdu_form(site))
    assert response.status_code == 302
    assert Pdu.objects.get(name="pdu-r1-c").breaker_a == [32.0, 32.0, 16.0]
    response = operator.post(
        reverse("facility:item_new", args=["fac", "pdu"]), pdu_form(site, name="x", breaker_a="32;16")
    )
    assert "2 ratings for 3 phase(s)" in response.content.decode() and not Pdu.objects.filter(name="x").exists()


def test_a_rack_of_another_cluster_cannot_be_chosen(operator, site) -> None:
    from tests.facility.conftest import build_site

    other = build_site("other")
    response = operator.post(
        reverse("facility:item_new", args=["fac", "pdu"]), pdu_form(site, rack=other.racks["r1"].pk)
    )
    assert response.status_code == 200 and not Pdu.objects.filter(name="pdu-r1-c").exists()
    response = operator.get(reverse("facility:item_edit", args=["other", "pdu", site.pdus["pdu-r1-a"].pk]))
    assert response.status_code == 404


def test_the_pdu_form_sets_keeps_and_clears_the_credential(operator, site) -> None:
    pdu = site.pdus["pdu-r1-a"]
    url = reverse("facility:item_edit", args=["fac", "pdu", pdu.pk])
    fields = pdu_form(site, name="pdu-r1-a", breaker_a="63", endpoint_url="https://pdu.example.net/redfish/v1")
    assert "Stored credential: not set" in operator.get(url).content.decode()
    operator.post(url, {**fields, "username": SECRET_USER, "password": SECRET})
    pdu.refresh_from_db()
    assert credentials.unseal(pdu.credential_sealed) == credentials.Credential(SECRET_USER, SECRET)
    page = operator.get(url).content.decode()
    assert "Stored credential: set" in page and SECRET not in page and SECRET_USER not in page
    operator.post(url, {**fields, "voltage_v": 240, "username": "", "password": ""})
    pdu.refresh_from_db()
    assert pdu.voltage_v == 240.0 and credentials.unseal(pdu.credential_sealed).password == SECRET
    moved = operator.post(url, {**fields, "endpoint_url": "https://elsewhere.example.org/redfish/v1"})
    assert "moved to another host" in moved.content.decode()
    operator.post(url, {**fields, "clear_credential": "on"})
    pdu.refresh_from_db()
    assert pdu.credential_sealed == ""


def test_an_operator_sets_a_ups_and_a_loop_with_their_racks(operator, site) -> None:
    r1, r2 = site.racks["r1"].pk, site.racks["r2"].pk
    response = operator.post(
        reverse("facility:item_new", args=["fac", "ups"]), {"name": "ups2", "capacity_kw": 80, "racks": [r1, r2]}
    )
    assert response.status_code == 302
    assert sorted(Ups.objects.get(name="ups2").racks.values_list("name", flat=True)) == ["r1", "r2"]
    url = reverse("facility:item_edit", args=["fac", "loop", site.loop.pk])
    operator.post(url, {"name": "cdu1", "fluid": "pg25", "racks": [r2], "endpoint_url": ""})
    site.loop.refresh_from_db()
    assert site.loop.fluid == "pg25" and list(site.loop.racks.values_list("name", flat=True)) == ["r2"]


def feed_post(lines: list[tuple[str, str, str]]) -> dict:
    data = {"form-TOTAL_FORMS": "8", "form-INITIAL_FORMS": "0", "form-MIN_NUM_FORMS": "0", "form-MAX_NUM_FORMS": "8"}
    for i in range(8):
        pdu, phase, share = lines[i] if i < len(lines) else ("", "", "")
        data |= {f"form-{i}-pdu": pdu, f"form-{i}-phase": phase, f"form-{i}-share": share}
    return data


def test_an_operator_sets_a_nodes_feeds_and_returns_it_to_the_default(operator, site) -> None:
    url = reverse("facility:node_feeds", args=["fac", "gpu02"])
    assert "pdu-r1-a / 2 × 0.5" in operator.get(url).content.decode()  # the default, shown
    response = operator.post(url, feed_post([("pdu-r1-a", "1", "0.5"), ("pdu-r1-b", "3", "0.5")]))
    assert response.status_code == 302
    assert NodeFeed.objects.filter(node__hostname="gpu02").count() == 2
    refused = operator.post(url, feed_post([("pdu-r1-a", "1", "0.5")]), follow=True)
    assert "add up to 0.5, not 1" in refused.content.decode()
    assert NodeFeed.objects.filter(node__hostname="gpu02").count() == 2, "the refused save kept the feeds"
    partial = operator.post(url, feed_post([("pdu-r1-a", "", "0.5")]))
    assert "give a PDU, a phase and a share" in partial.content.decode()
    operator.post(url, feed_post([]))
    assert not NodeFeed.objects.exists()


def test_an_operator_uploads_a_csv_all_or_nothing(operator, site) -> None:
    url = reverse("facility:import", args=["fac"])
    good = b"type,name,power_budget_kw,cooling_budget_kw\nrack,r7,20,20\n"
    response = operator.post(url, {"file": SimpleUploadedFile("f.csv", good)}, follow=True)
    assert "Imported: 1 rack added" in response.content.decode() and Rack.objects.filter(name="r7").exists()
    bad = b"type,name,power_budget_kw,cooling_budget_kw\nrack,r8,20,20\nrack,r9,20,-3\n"
    response = operator.post(url, {"file": SimpleUploadedFile("f.csv", bad)}, follow=True)
    page = response.content.decode()
    assert "nothing was imported" in page and "row 3 (rack r9), field cooling_budget_kw" in page
    assert not Rack.objects.filter(name__in=["r8", "r9"]).exists()


def test_the_export_is_a_csv_download(client, site, make_user) -> None:
    client.force_login(make_user("v", "viewer"))
    response = client.get(reverse("facility:export", args=["fac"]))
    assert response["Content-Type"].startswith("text/csv")
    assert 'filename="facility-fac.csv"' in response["Content-Disposition"]
    assert response.content.decode().startswith("type,name,")


@pytest.mark.parametrize("initial_forms", ["0", "8"])
def test_a_browser_post_of_the_shown_lines_keeps_them(operator, site, initial_forms: str) -> None:
    url = reverse("facility:node_feeds", args=["fac", "gpu02"])
    lines = [("pdu-r1-a", "1", "0.5"), ("pdu-r1-b", "3", "0.5")]
    operator.post(url, feed_post(lines))
    shown = operator.get(url).content.decode()
    assert 'name="form-INITIAL_FORMS" value="8"' in shown and 'value="0.5"' in shown
    response = operator.post(url, feed_post(lines) | {"form-INITIAL_FORMS": initial_forms})
    assert response.status_code == 302
    assert sorted(NodeFeed.objects.values_list("pdu__name", "phase", "share")) == [
        ("pdu-r1-a", 1, 0.5), ("pdu-r1-b", 3, 0.5)
    ]  # fmt: skip


def test_the_page_costs_the_same_queries_for_more_nodes(client, site, make_user) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from portal.inventory.models import Node

    client.force_login(make_user("v", "viewer"))
    url = reverse("facility:page", args=["fac"])
    client.get(url)  # session and permissions cached
    with CaptureQueriesContext(connection) as small:
        assert client.get(url).status_code == 200
    Node.objects.bulk_create(Node(cluster=site.cluster, hostname=f"gpu{i}", rack="r2") for i in range(100, 400))
    with CaptureQueriesContext(connection) as large:
        assert client.get(url).status_code == 200
    assert len(large) == len(small), [q["sql"][:120] for q in large.captured_queries]

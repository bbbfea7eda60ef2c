"""A planted credential (user name and password of a PDU and a loop endpoint) appears in no facility
page, form (even re-shown after a refused POST), CSV export, admin list or form, and no log line or
SQL statement; in the database there is only its Fernet token."""

from __future__ import annotations

import logging

import pytest
from django.db import connection
from django.urls import reverse

from portal.facility.models import CoolingLoop, Pdu
from tests.facility.conftest import SECRET, SECRET_USER

pytestmark = pytest.mark.django_db


@pytest.fixture
def logs(caplog):
    """Every log record at DEBUG, SQL statements with their parameters included."""
    caplog.set_level(logging.DEBUG)
    for name in ("django", "django.db.backends", "django.request"):  # Django's own config says INFO
        caplog.set_level(logging.DEBUG, logger=name)
    forced = connection.force_debug_cursor
    connection.force_debug_cursor = True
    yield caplog
    connection.force_debug_cursor = forced


def assert_clean(text: str, where: str) -> None:
    assert SECRET not in text, f"the planted password is in {where}"
    assert SECRET_USER not in text, f"the planted user name is in {where}"


def pages(site) -> list[str]:
    name, pdu, loop = "fac", site.pdus["pdu-r2-a"].pk, site.loop.pk
    return [
        reverse("facility:page", args=[name]),
        reverse("facility:export", args=[name]),
        reverse("facility:item_edit", args=[name, "pdu", pdu]),
        reverse("facility:item_edit", args=[name, "loop", loop]),
        reverse("facility:item_new", args=[name, "pdu"]),
        reverse("facility:node_feeds", args=[name, "gpu05"]),
        reverse("inventory:cluster_detail", args=[name]),
        reverse("admin:facility_pdu_changelist"),
        reverse("admin:facility_pdu_change", args=[pdu]),
        reverse("admin:facility_coolingloop_changelist"),
        reverse("admin:facility_coolingloop_change", args=[loop]),
        reverse("admin:facility_nodefeed_changelist"),
        reverse("admin:facility_pdu_history", args=[pdu]),
    ]


def test_the_planted_secret_is_in_no_page_export_admin_or_log(client, secret_site, make_user, logs) -> None:
    root = make_user("root", superuser=True)
    root.is_staff = True
    root.save()
    client.force_login(root)
    pdu = secret_site.pdus["pdu-r2-a"]
    edit = reverse("facility:item_edit", args=["fac", "pdu", pdu.pk])
    # A refused POST that carries the secret is shown again: the inputs stay empty.
    refused = client.post(edit, {"rack": pdu.rack_id, "name": pdu.name, "feed": "A", "phases": 3, "voltage_v": 230,
                                 "breaker_a": "63;63", "endpoint_url": pdu.endpoint_url, "verify_tls": "on",
                                 "username": SECRET_USER, "password": SECRET})  # fmt: skip
    assert refused.status_code == 200 and "2 ratings for 3 phase(s)" in refused.content.decode()
    assert_clean(refused.content.decode(), "the re-shown PDU form")
    # The same through the admin, refused there too (bad voltage).
    admin_change = reverse("admin:facility_pdu_change", args=[pdu.pk])
    refused = client.post(admin_change, {"rack": pdu.rack_id, "name": pdu.name, "feed": "A", "phases": 3,
                                         "voltage_v": 9999, "breaker_a": "[63, 63, 63]",
                                         "endpoint_url": pdu.endpoint_url, "username": SECRET_USER,
                                         "password": SECRET})  # fmt: skip
    assert refused.status_code == 200 and "errornote" in refused.content.decode()
    assert_clean(refused.content.decode(), "the re-shown admin form")
    for url in pages(secret_site):
        response = client.get(url)
        assert response.status_code == 200, url
        assert_clean(response.content.decode(), url)
    assert (
        "https://pdu-r2-a.example.net/redfish/v1" in client.get(reverse("facility:page", args=["fac"])).content.decode()
    )
    for record in logs.records:
        assert_clean(record.getMessage(), f"the log ({record.name})")
    assert any(r.name == "django.db.backends" for r in logs.records), "SQL was logged, and checked"
    for model in (Pdu, CoolingLoop):
        for token in model.objects.exclude(credential_sealed="").values_list("credential_sealed", flat=True):
            assert_clean(token, "the database")


def test_the_admin_sets_the_credential_write_only(client, site, make_user, logs) -> None:
    from portal.facility import credentials

    root = make_user("root", superuser=True)
    root.is_staff = True
    root.save()
    client.force_login(root)
    pdu = site.pdus["pdu-r1-b"]
    url = reverse("admin:facility_pdu_change", args=[pdu.pk])
    fields = {"rack": pdu.rack_id, "name": pdu.name, "feed": "B", "phases": 3, "voltage_v": 230,
              "breaker_a": "[63, 63, 63]", "endpoint_url": "https://pdu-r1-b.example.net/redfish/v1",
              "verify_tls": "on"}  # fmt: skip
    response = client.post(url, {**fields, "username": SECRET_USER, "password": SECRET})
    assert response.status_code == 302, response.content.decode()[:3000]
    pdu.refresh_from_db()
    assert credentials.unseal(pdu.credential_sealed) == credentials.Credential(SECRET_USER, SECRET)
    page = client.get(url).content.decode()
    assert "Stored credential: set" in page
    assert_clean(page, "the admin change form")
    moved = client.post(url, {**fields, "endpoint_url": "https://elsewhere.example.org/"})
    assert moved.status_code == 200 and "moved to another host" in moved.content.decode()
    pdu.refresh_from_db()
    assert pdu.endpoint_url == "https://pdu-r1-b.example.net/redfish/v1", "the refused admin save wrote nothing"
    for record in logs.records:
        assert_clean(record.getMessage(), f"the log ({record.name})")


def test_a_viewer_reads_the_admin_without_credential_inputs(client, secret_site, make_user) -> None:
    viewer = make_user("v", "viewer")
    viewer.is_staff = True
    viewer.save()
    client.force_login(viewer)
    page = client.get(reverse("admin:facility_pdu_change", args=[secret_site.pdus["pdu-r2-a"].pk])).content.decode()
    assert "pdu-r2-a" in page and 'name="password"' not in page
    assert_clean(page, "the read-only admin view")

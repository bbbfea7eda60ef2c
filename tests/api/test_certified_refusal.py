"""A write the certified-evidence triggers refuse answers the REST API in JSON, like every other API
error, and the pages with their HTML page: renaming a cluster that holds a certificate."""

from __future__ import annotations

import json

import pytest
from django.db import IntegrityError, transaction
from django.http import HttpResponse

from portal.certificates.middleware import CertifiedEvidenceMiddleware
from portal.inventory.models import Cluster

pytestmark = pytest.mark.django_db


def test_renaming_a_certified_cluster_through_the_api_is_a_json_403(world, people, api_client) -> None:
    client = api_client(people["operator"].secret)
    url = f"/api/v1/clusters/{world.cluster.pk}/"
    # The refused statement aborts the test's own transaction (a request outside tests has none):
    # an atomic block of its own lets the test read the database afterwards.
    with transaction.atomic():
        response = client.patch(url, json.dumps({"name": "renamed"}), content_type="application/json")
    assert response.status_code == 403
    assert response["Content-Type"] == "application/json"
    detail = response.json()["detail"]
    assert "cannot be renamed" in detail and "<" not in detail
    assert Cluster.objects.filter(pk=world.cluster.pk, name="c1").exists()


def test_the_pages_still_answer_with_the_refusal_page(rf) -> None:
    middleware = CertifiedEvidenceMiddleware(lambda request: HttpResponse())
    refusal = IntegrityError("kiln: a cluster with a certificate cannot be renamed\nCONTEXT: ...")
    page = middleware.process_exception(rf.post("/clusters/c1/edit/"), refusal)
    assert page is not None and page.status_code == 403 and page["Content-Type"].startswith("text/html")
    assert b"<h1>Refused</h1><p>a cluster with a certificate cannot be renamed.</p>" in page.content
    api = middleware.process_exception(rf.patch("/api/v1/clusters/1/"), refusal)
    assert api is not None and api.status_code == 403 and api["Content-Type"] == "application/json"

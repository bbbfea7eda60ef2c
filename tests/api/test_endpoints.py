"""Every endpoint per role: anonymous 401, no role 403, viewer reads, operator writes inventory and
runs, approver waives; and what the answers hold."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from portal.certificates.models import Campaign
from portal.inventory.models import Cluster, Node
from portal.runs.models import Run

READS = [
    "/api/v1/",
    "/api/v1/schema/",
    "/api/v1/clusters/",
    "/api/v1/clusters/{cluster}/",
    "/api/v1/nodes/",
    "/api/v1/nodes/{node}/",
    "/api/v1/plans/",
    "/api/v1/plans/unit/",
    "/api/v1/checks/",
    "/api/v1/checks/ecc-health/",
    "/api/v1/runs/",
    "/api/v1/runs/{run}/",
    "/api/v1/results/",
    "/api/v1/results/{result}/",
    "/api/v1/series/",
    "/api/v1/series/{series}/",
    "/api/v1/campaigns/",
    "/api/v1/campaigns/{campaign}/",
    "/api/v1/certificates/",
    "/api/v1/certificates/{certificate}/",
    "/api/v1/certificates/{certificate}/pdf/",
    "/api/v1/health/",
    "/api/v1/health-transitions/",
    "/api/v1/schedules/",
]


def _ids(world: Any) -> dict[str, Any]:
    return {
        "cluster": world.cluster.pk,
        "node": world.cluster.nodes.first().pk,
        "run": world.run.pk,
        "result": world.result.pk,
        "series": world.series.pk,
        "campaign": world.campaign.pk,
        "certificate": world.certificate.pk,
    }


@pytest.mark.parametrize("template", READS)
def test_reads_need_the_viewer_role(world, people, api_client, template) -> None:
    path = template.format(**_ids(world))
    anonymous = api_client().get(path)
    assert anonymous.status_code == 401 and anonymous["Content-Type"] == "application/json"
    if path != "/api/v1/schema/":  # the schema only needs a login
        assert api_client(people["nobody"].secret).get(path).status_code == 403
    response = api_client(people["viewer"].secret).get(path)
    assert response.status_code == 200, response.content


def _writes(world: Any) -> list[tuple[str, str, dict[str, Any], str, int]]:
    spare = Node.objects.create(cluster=world.cluster, hostname="spare01")
    other_run = Run.objects.create(cluster=world.cluster, plan=world.plan, plan_snapshot=world.run.plan_snapshot)
    c, r, k = world.cluster.pk, world.run.pk, world.campaign.pk
    return [
        ("post", "/api/v1/clusters/", {"name": "c2", "site": "DC2"}, "operator", 201),
        ("patch", f"/api/v1/clusters/{c}/", {"site": "DC9"}, "operator", 200),
        ("post", "/api/v1/nodes/", {"cluster": c, "nodes": "gpu[005-006]", "address": "10.0.0.[5-6]"}, "operator", 201),
        ("delete", f"/api/v1/nodes/{spare.pk}/", {}, "operator", 204),
        ("post", "/api/v1/runs/", {"cluster": c, "plan": "unit", "nodes": "gpu[001-002]"}, "operator", 201),
        ("post", f"/api/v1/runs/{r}/cancel/", {}, "operator", 200),
        ("post", "/api/v1/campaigns/", {"cluster": c, "plan": "unit", "name": "second handover"}, "operator", 201),
        ("post", f"/api/v1/campaigns/{k}/add-run/", {"run": other_run.pk}, "operator", 200),
        ("post", f"/api/v1/campaigns/{k}/scope/", {"hostname": "gpu004", "reason": "sent for RMA"}, "operator", 200),
        (
            "post",
            f"/api/v1/campaigns/{k}/waive/",
            {"hostname": "gpu002", "item_key": "ecc-health", "justification": "customer accepts: GPU 3 is replaced"},
            "approver",
            200,
        ),
    ]


def _send(client: Client, method: str, path: str, body: dict[str, Any]) -> Any:
    return getattr(client, method)(path, body, content_type="application/json")


def test_writes_need_their_role(world, people, api_client) -> None:
    for method, path, body, role, code in _writes(world):
        assert _send(api_client(), method, path, body).status_code == 401, path
        refused = _send(api_client(people["viewer"].secret), method, path, body)
        assert refused.status_code == 403, path
        assert "role" in refused.json()["detail"]
        if role == "approver":
            assert _send(api_client(people["operator"].secret), method, path, body).status_code == 403
        response = _send(api_client(people[role].secret), method, path, body)
        assert response.status_code == code, (path, response.content)


def test_a_viewer_write_changes_nothing(world, people, api_client) -> None:
    client = api_client(people["viewer"].secret)
    _send(client, "post", "/api/v1/clusters/", {"name": "c3"})
    _send(client, "post", "/api/v1/nodes/", {"cluster": world.cluster.pk, "nodes": "x[1-2]"})
    _send(client, "delete", f"/api/v1/clusters/{world.cluster.pk}/", {})
    assert list(Cluster.objects.values_list("name", flat=True)) == ["c1"]
    assert world.cluster.nodes.count() == 4


def test_a_run_starts_and_reports_progress(world, people, api_client) -> None:
    client = api_client(people["operator"].secret)
    started = _send(client, "post", "/api/v1/runs/", {"cluster": world.cluster.pk, "plan": "unit", "nodes": "gpu001"})
    run = started.json()
    assert run["node_set"] == "gpu001" and run["requested_by"] == "operator" and run["status"] == "queued"
    assert run["progress"] == {"counts": {"queued": 2}, "total": 2, "done": 0, "percent": 0, "eta_s": None}
    cancelled = _send(client, "post", f"/api/v1/runs/{run['id']}/cancel/", {}).json()
    assert cancelled == {"cancelled": 2}
    status = client.get(f"/api/v1/runs/{run['id']}/").json()
    assert status["progress"]["done"] == 2 and status["status"] == "cancelled"


def test_results_filter_by_node_check_and_status(world, people, api_client) -> None:
    client = api_client(people["viewer"].secret)
    failed = client.get(f"/api/v1/results/?run={world.run.pk}&status=fail").json()
    assert failed["count"] == 1
    assert failed["results"][0]["hostname"] == "gpu002" and failed["results"][0]["check"] == "ecc-health"
    one = client.get("/api/v1/results/?node=gpu001&check=gpu-inventory").json()["results"]
    assert [r["id"] for r in one] == [world.result.pk]
    assert {m["name"] for m in one[0]["measurements"]} == {"gpu_count", "temperature"}
    page = client.get("/api/v1/results/?limit=3&ordering=-id").json()
    assert set(page) == {"count", "next", "previous", "results"} and page["count"] == 8 and len(page["results"]) == 3
    assert "offset=3" in page["next"]


def test_series_detail_carries_the_points(world, people, api_client) -> None:
    client = api_client(people["viewer"].secret)
    listed = client.get(f"/api/v1/series/?result={world.result.pk}").json()["results"]
    assert listed[0]["count"] == 3 and "y" not in listed[0]
    detail = client.get(f"/api/v1/series/{world.series.pk}/").json()
    assert detail["x"] == [0, 1, 2] and detail["y"] == [300.0, None, 310.5]


def test_campaign_state_and_certificate_download_and_verify(world, people, api_client) -> None:
    client = api_client(people["viewer"].secret)
    campaign = client.get(f"/api/v1/campaigns/{world.campaign.pk}/").json()
    assert campaign["runs"] == [world.run.pk] and campaign["state"]["ready"] is False
    assert [(c["hostname"], c["item_key"]) for c in campaign["state"]["open"]] == [("gpu002", "ecc-health")]
    certificates = client.get(f"/api/v1/certificates/?campaign={world.certificate.campaign_id}").json()["results"]
    assert certificates[0]["number"] == "KILN-TEST-0001" and certificates[0]["revoked"] is False
    pdf = client.get(f"/api/v1/certificates/{world.certificate.pk}/pdf/")
    assert pdf["Content-Type"] == "application/pdf" and pdf.content == bytes(world.certificate.pdf)
    assert (
        client.get(f"/api/v1/certificates/{world.certificate.pk}/pdf/", HTTP_ACCEPT="application/pdf").status_code
        == 200
    )
    from django.core.files.uploadedfile import SimpleUploadedFile

    upload = SimpleUploadedFile("c.pdf", bytes(world.certificate.pdf), content_type="application/pdf")
    verdict = client.post("/api/v1/certificates/verify/", {"pdf": upload}).json()
    assert verdict["status"] == "not a certificate" and verdict["exit_code"] == 3


def test_superuser_fields_are_read_only_for_operators(world, people, api_client, make_user) -> None:
    path = f"/api/v1/clusters/{world.cluster.pk}/"
    operator = api_client(people["operator"].secret)
    changed = _send(operator, "patch", path, {"transport": "ssh", "ssh_key_path": "/etc/shadow", "site": "X"}).json()
    assert changed["transport"] == "local" and changed["ssh_key_path"] == "" and changed["site"] == "X"
    from portal.api.services import token_create

    root = api_client(token_create(user=make_user("root", superuser=True), name="root")[1])
    assert _send(root, "patch", path, {"transport": "ssh"}).json()["transport"] == "ssh"
    refused = _send(root, "patch", path, {"ssh_key_path": "/nonexistent/key"})
    assert refused.status_code == 400 and "does not exist" in refused.json()["detail"]


def test_it_sets_a_clusters_acceptance_plan_and_check_overhead_by_slug(world, people, api_client) -> None:
    path = f"/api/v1/clusters/{world.cluster.pk}/"
    operator = api_client(people["operator"].secret)
    changed = _send(operator, "patch", path, {"acceptance_plan": "unit", "check_overhead_s": 2.5}).json()
    assert changed["acceptance_plan"] == "unit" and changed["check_overhead_s"] == 2.5
    for bad in ({"acceptance_plan": "nope"}, {"check_overhead_s": -1}, {"check_overhead_s": "nan"}):
        assert _send(operator, "patch", path, bad).status_code == 400, bad
    assert _send(operator, "patch", path, {"acceptance_plan": None}).json()["acceptance_plan"] is None
    refused = _send(api_client(people["viewer"].secret), "patch", path, {"acceptance_plan": "unit"})
    assert refused.status_code == 403


def test_errors_are_json_and_never_500(world, people, api_client) -> None:
    client = api_client(people["operator"].secret)
    cases = [
        (client.get("/api/v1/nowhere/"), 404),
        (client.get("/api/nowhere"), 404),
        (client.get("/api/v1/runs/99999999999999999999999/"), 404),
        (client.get("/api/v1/results/?run=1e40"), 400),
        (client.get("/api/v1/results/?status=bogus"), 400),
        (client.get("/api/v1/results/?node=a%00b"), 400),
        (client.put("/api/v1/plans/unit/", {}, content_type="application/json"), 405),
        (_send(client, "post", "/api/v1/clusters/", {"name": "a\u0000b"}), 400),
        (_send(client, "post", "/api/v1/clusters/", {"name": "c9", "ssh_port": 10**30}), 400),
        (_send(client, "post", "/api/v1/clusters/", {"name": "c1"}), 400),
        (_send(client, "post", "/api/v1/nodes/", {"cluster": world.cluster.pk, "nodes": "n[1-99999999]"}), 400),
        (_send(client, "post", "/api/v1/nodes/", {"cluster": world.cluster.pk, "nodes": "n[1-"}), 400),
        (
            _send(client, "post", "/api/v1/nodes/", {"cluster": world.cluster.pk, "nodes": "n[1-2]", "address": "a"}),
            400,
        ),
        (_send(client, "post", "/api/v1/runs/", {"cluster": world.cluster.pk, "plan": "unit", "nodes": "zz1"}), 400),
        (_send(client, "post", "/api/v1/runs/", {"cluster": 2**70, "plan": "unit"}), 400),
        (_send(client, "delete", f"/api/v1/clusters/{world.cluster.pk}/", {}), 409),
        (client.post("/api/v1/clusters/", "{not json", content_type="application/json"), 400),
        (client.post("/api/v1/clusters/", "[" * 100_000, content_type="application/json"), 400),
        (
            client.post(
                "/api/v1/clusters/",
                '{"name": "c8", "threshold_overrides": {"ecc": {"max": 1e400}}}',
                content_type="application/json",
            ),
            400,
        ),
        (_send(client, "post", "/api/v1/clusters/", {"name": "c7", "known_hosts": "\ud800"}), 400),
    ]
    for response, code in cases:
        assert response.status_code == code, response.content
        assert response["Content-Type"] == "application/json", response.content
        assert response.json()["detail"]


def test_field_errors_come_with_the_message(world, people, api_client) -> None:
    response = _send(api_client(people["operator"].secret), "post", "/api/v1/clusters/", {"name": "bad name!"})
    body = response.json()
    assert body["detail"].startswith("Invalid input: name:") and "name" in body["errors"]


def test_there_is_no_signing_endpoint(people, api_client, db) -> None:
    schema = api_client(people["viewer"].secret).get("/api/v1/schema/?format=json").json()
    assert not [p for p in schema["paths"] if "sign" in p]
    assert "no signing endpoint" in schema["info"]["description"].lower()
    # A token that tries anyway gets a JSON 404, whatever the method (not Django's HTML CSRF page).
    for method in ("get", "post", "put"):
        tried = getattr(api_client(people["approver"].secret), method)("/api/v1/campaigns/1/sign/")
        assert tried.status_code == 404 and tried["Content-Type"] == "application/json", tried.content[:200]


def test_the_docs_pages_are_served_from_the_app(people) -> None:
    browser = Client(SERVER_NAME="localhost")
    assert browser.get("/api/v1/docs/").status_code == 302  # login page first, like every page
    browser.force_login(people["viewer"].user)
    docs = browser.get("/api/v1/docs/")
    assert docs.status_code == 200 and b"/static/drf_spectacular_sidecar/swagger-ui-dist/" in docs.content
    assert b"<script>" not in docs.content  # the start-up script is a file: script-src 'self' holds
    script = browser.get("/api/v1/docs/?script=")
    assert script.status_code == 200 and b"SwaggerUIBundle" in script.content
    redoc = browser.get("/api/v1/redoc/")
    assert redoc.status_code == 200 and b"googleapis" not in redoc.content and b"http" not in redoc.content.lower()
    assert "worker-src 'self' blob:" in redoc["Content-Security-Policy"]


def test_an_operator_opens_a_campaign_with_the_plan_snapshotted(world, people, api_client) -> None:
    client = api_client(people["operator"].secret)
    body = {"cluster": world.cluster.pk, "plan": "unit", "name": "rack 2 handover"}
    response = _send(client, "post", "/api/v1/campaigns/", body)
    assert response.status_code == 201, response.content
    opened = response.json()
    campaign = Campaign.objects.get(pk=opened["id"])
    assert (opened["name"], opened["plan"], opened["runs"]) == ("rack 2 handover", "unit", [])
    assert campaign.plan_snapshot and campaign.created_by == people["operator"].user
    unknown = _send(client, "post", "/api/v1/campaigns/", {**body, "plan": "no-such-plan"})
    assert unknown.status_code == 400 and "plan" in unknown.json()["errors"]

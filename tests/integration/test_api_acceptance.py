"""A delivery team's pipeline accepts a cluster through the REST API alone, over HTTP, against a live
portal, a real Celery worker and sshd nodes: create the cluster, add its nodes by node set, open a
campaign, start the quick plan, poll the run's progress, read the results and measurements, waive the
one failure, and, once a vendor and a customer approver have signed in the browser (the one step a
token cannot take), download the certificate and have the API verify it."""

from __future__ import annotations

import io
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from portal.certificates import keys
from portal.certificates.models import Campaign
from tests.conftest import WorkerProcess, _flush_broker

pytestmark = pytest.mark.integration

FAULTY = "gpu02"  # its GPU 3 reports uncorrectable ECC errors: ecc-health fails it


@pytest.fixture
def site_worker(real_services, transactional_db, settings, tmp_path: Path, monkeypatch) -> Iterator[None]:
    """A worker that runs the checks and signs certificates with this test's site key."""
    settings.KILN_KEY_DIR = str(tmp_path / "keys")
    keys.keyring_init(site="API test site")
    monkeypatch.setenv("KILN_KEY_DIR", settings.KILN_KEY_DIR)
    monkeypatch.setenv("KILN_CERT_CHARTS", "0")
    _flush_broker()
    worker = WorkerProcess(tmp_path / "worker.log")
    worker.start()
    yield
    worker.stop()
    _flush_broker()


def _token(username: str) -> str:
    """What an admin does once per pipeline: `kiln user token NAME` prints a secret."""
    out = io.StringIO()
    call_command("kiln_token", username, "--name", "pipeline", stdout=out, stderr=io.StringIO())
    return out.getvalue().strip()


class Api:
    def __init__(self, base: str, token: str) -> None:
        self.base = base.rstrip("/") + "/api/v1"
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Token {token}"

    def call(self, method: str, path: str, expect: int = 200, **kwargs: Any) -> Any:
        response = self.session.request(method, self.base + path, timeout=30, **kwargs)
        assert response.status_code == expect, (method, path, response.status_code, response.text[:2000])
        return response.json() if response.headers.get("Content-Type", "").startswith("application/json") else response

    def all(self, path: str) -> list[dict[str, Any]]:
        """Every page of a list (limit/offset, `next` links)."""
        items: list[dict[str, Any]] = []
        url: str | None = self.base + path
        while url:
            page = self.session.get(url, timeout=30)
            assert page.status_code == 200, page.text[:2000]
            body = page.json()
            items += body["results"]
            url = body["next"]
        return items


def _wait_for_run(api: Api, run_id: int, timeout_s: float = 240) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    seen: list[int] = []
    while time.monotonic() < deadline:
        run = api.call("GET", f"/runs/{run_id}/")
        seen.append(run["progress"]["done"])
        if run["status"] not in ("queued", "running"):
            assert seen == sorted(seen), f"progress went backwards: {seen}"
            return run
        time.sleep(1)
    raise AssertionError(f"run {run_id} still {run['status']} after {timeout_s}s: {run['progress']}")


def test_a_pipeline_accepts_a_cluster_through_the_api(
    testbed_factory, site_worker, live_server, make_user, tmp_path: Path
) -> None:
    tb = testbed_factory(3, name="ap")
    try:
        tb.set_faults(FAULTY, ecc_uncorrectable_gpu=3)
        make_user("root-admin", superuser=True)
        make_user("pipeline", "operator")
        vendor = make_user("vera", "approver", "vendor")
        customer = make_user("carl", "approver", "customer")
        admin_api = Api(live_server.url, _token("root-admin"))
        api = Api(live_server.url, _token("pipeline"))

        # Which key reaches the nodes is a superuser's choice; the rest is the operator's pipeline.
        cluster = admin_api.call(
            "POST",
            "/clusters/",
            expect=201,
            json={
                "name": "api-acc",
                "ssh_user": tb.ssh_user,
                "ssh_key_path": str(tb.client_key_path),
                "known_hosts": tb.known_hosts_path.read_text(),
                "profile": "H100-SXM-8",
            },
        )
        # The first node by node set, then the rest: the API adds nodes, never duplicates them.
        hostnames = [n.hostname for n in tb.nodes]
        for node in tb.nodes:
            body = {"cluster": cluster["id"], "nodes": node.hostname, "address": node.address}
            added = api.call("POST", "/nodes/", expect=201, json=body)
            assert added["created"] == [node.hostname]
        listed = api.all(f"/nodes/?cluster={cluster['id']}&ordering=hostname")
        assert [n["hostname"] for n in listed] == sorted(hostnames)

        plans = {p["slug"]: p for p in api.all("/plans/")}
        assert "quick" in plans and plans["quick"]["items"]
        campaign = api.call(
            "POST", "/campaigns/", expect=201, json={"cluster": cluster["id"], "plan": "quick", "name": "handover"}
        )
        run = api.call("POST", "/runs/", expect=201, json={"cluster": cluster["id"], "plan": "quick", "nodes": ""})
        api.call("POST", f"/campaigns/{campaign['id']}/add-run/", json={"run": run["id"]})
        finished = _wait_for_run(api, run["id"])
        assert finished["progress"]["done"] == finished["progress"]["total"] > 0

        # Results with their measurements, filtered the NetBox way.
        failed = api.all(f"/results/?run={run['id']}&status=fail")
        assert [(r["hostname"], r["check"]) for r in failed] == [(FAULTY, "ecc-health")], failed
        assert "GPU 3" in failed[0]["reason"]
        ecc = api.all(f"/results/?run={run['id']}&check=ecc-health")
        assert len(ecc) == 3
        for result in ecc:
            counters = [m for m in result["measurements"] if m["name"] == "ecc_volatile_uncorrected"]
            assert len(counters) == 8, result["hostname"]
            assert {m["gpu"] for m in counters if m["value"]} == ({3} if result["hostname"] == FAULTY else set())
        errors = api.all(f"/results/?run={run['id']}&status=error")
        assert not errors, errors

        # The failure is waived by an approver (their token), with a justification.
        vendor_api = Api(live_server.url, _token("vera"))
        vendor_api.call(
            "POST",
            f"/campaigns/{campaign['id']}/waive/",
            json={"hostname": FAULTY, "item_key": "ecc-health", "justification": "GPU 3 RMA booked; customer agrees"},
        )
        # No token can sign: the API has no such operation.
        assert api.session.post(f"{api.base}/campaigns/{campaign['id']}/sign/", timeout=30).status_code in (404, 405)

        # Two people sign in the browser.
        for person in (vendor, customer):
            browser = Client()
            browser.force_login(person)
            signed = browser.post(reverse("certificates:campaign_sign", args=[campaign["id"]]))
            assert signed.status_code == 302, signed.content[:500]

        # The worker issues the certificate; the pipeline downloads it and has it verified.
        deadline = time.monotonic() + 120
        certificates: list[dict[str, Any]] = []
        while not certificates and time.monotonic() < deadline:
            certificates = api.all(f"/certificates/?campaign={campaign['id']}")
            time.sleep(0.5)
        assert len(certificates) == 1, Campaign.objects.get(pk=campaign["id"]).issue_error
        pdf = api.call("GET", f"/certificates/{certificates[0]['id']}/pdf/")
        assert pdf.headers["Content-Type"] == "application/pdf" and pdf.content.startswith(b"%PDF")
        upload = {"pdf": ("cert.pdf", pdf.content, "application/pdf")}
        verdict = api.call("POST", "/certificates/verify/", files=upload)
        assert verdict["status"] == "valid", verdict
    finally:
        tb.down()

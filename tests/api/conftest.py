"""Fixtures for the REST API tests: users with each role and their tokens, and a small world to
read (a cluster, a finished run with measurements and a series, a campaign, a certificate, health
states, a schedule), all written through the services where one exists."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest
from django.contrib.auth.models import User
from django.core.cache import cache
from django.test import Client

from portal.api import services as api_services
from portal.catalog.models import CheckDefinition, TestPlan, TestPlanItem
from portal.certificates import services as cert_services
from portal.certificates.models import Campaign, Certificate
from portal.health.models import HealthTransition, NodeHealth
from portal.health.services.schedules import schedule_create
from portal.inventory.models import Cluster
from portal.inventory.services import cluster_create, nodes_add
from portal.runs.models import CheckResult, Measurement, Run, Series

PDF = b"%PDF-1.7\n% not a sealed certificate, only bytes to download\n%%EOF\n"


@pytest.fixture(autouse=True)
def _fresh_throttle() -> None:
    cache.clear()  # the token endpoints' throttle counts live in the cache


@pytest.fixture
def api_client() -> Callable[[str | None], Client]:
    def make(secret: str | None = None, scheme: str = "Token") -> Client:
        headers = {"HTTP_AUTHORIZATION": f"{scheme} {secret}"} if secret else {}
        return Client(SERVER_NAME="localhost", **headers)

    return make


@dataclass
class Person:
    user: User
    secret: str


@pytest.fixture
def people(make_user) -> dict[str, Person]:
    out = {}
    for role in ("viewer", "operator", "approver"):
        user = make_user(role, role)
        _, secret = api_services.token_create(user=user, name=f"{role} tests")
        out[role] = Person(user, secret)
    nobody = make_user("nobody")
    out["nobody"] = Person(nobody, api_services.token_create(user=nobody, name="no role")[1])
    return out


@dataclass
class World:
    cluster: Cluster
    plan: TestPlan
    run: Run
    result: CheckResult
    series: Series
    campaign: Campaign
    certificate: Certificate


@pytest.fixture
def world(people: dict[str, Person]) -> World:
    operator = people["operator"].user
    cluster = cluster_create(name="c1", transport="local", customer="ACME", site="DC1")
    nodes_add(cluster=cluster, hostnames="gpu[001-004]", addresses="10.0.0.[1-4]", fields={"rack": "R1"})
    plan = TestPlan.objects.create(slug="unit", name="Unit test plan")
    for order, slug in enumerate(["gpu-inventory", "ecc-health"]):
        TestPlanItem.objects.create(plan=plan, check_definition=CheckDefinition.objects.get(slug=slug), order=order)
    campaign = cert_services.campaign_create(cluster=cluster, plan=plan, name="", user=operator)
    run = cert_services.campaign_run_start(campaign=campaign, node_set="", user=operator, enqueue=False)
    results = list(run.results.select_related("node").order_by("node__hostname", "position"))
    for result in results:
        result.status = "fail" if result.node.hostname == "gpu002" and result.position == 1 else "pass"
        result.reason = "uncorrectable ECC errors on GPU 3" if result.status == "fail" else ""
        result.save()
    result = results[0]
    Measurement.objects.create(result=result, name="gpu_count", value=8, unit="", ok=True, threshold="== 8")
    Measurement.objects.create(result=result, name="temperature", value=41.5, unit="C", gpu=0)
    series = Series(result=result, name="power", unit="W", gpu=0, x=[0, 1, 2], y=[300.0, None, 310.5])
    series.save()
    Run.objects.filter(pk=run.pk).update(status="fail", finished_at=datetime.now(UTC))
    issued = cert_services.campaign_create(cluster=cluster, plan=plan, name="handed over", user=operator)
    certificate = Certificate.objects.create(  # of another campaign: a certificate closes its campaign
        campaign=issued,
        number="KILN-TEST-0001",
        issued_at=datetime.now(UTC),
        verdict="PASS",
        payload="{}",
        sha256="0" * 64,
        seal={},
        key_fingerprint="SHA256:test",
        pdf=PDF,
    )
    node = cluster.nodes.get(hostname="gpu002")
    NodeHealth.objects.create(node=node, state="failed", reason="ecc", last_run=run, checked_at=datetime.now(UTC))
    HealthTransition.objects.create(node=node, run=run, from_state="unknown", to_state="failed", reason="ecc")
    schedule_create(cluster=cluster, plan=plan, name="nightly", crontab="0 2 * * *", node_set="", created_by=operator)
    return World(cluster, plan, run, result, series, campaign, certificate)

"""Fixtures for the history page tests: a viewer, a plan with node and group checks, dated runs."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

import pytest

from portal.catalog.models import CheckDefinition, TestPlan, TestPlanItem
from portal.inventory.models import Cluster
from portal.runs.models import Run


@pytest.fixture
def viewer_client(client, make_user):
    client.force_login(make_user("vera", "viewer"))
    return client


@pytest.fixture
def history_plan(db) -> TestPlan:
    """NCCL on each node, burn-in, ECC, and the filesystem aggregate (a group check)."""
    plan = TestPlan.objects.create(slug="hist", name="History plan")
    for order, slug in enumerate(["nccl-allreduce", "burn-in", "ecc-health", "fs-aggregate"]):
        TestPlanItem.objects.create(plan=plan, check_definition=CheckDefinition.objects.get(slug=slug), order=order)
    return plan


@pytest.fixture
def hist_run(make_run, history_plan) -> Callable[..., Run]:
    def make(cluster: Cluster, *, started: str | None = None) -> Run:
        run = make_run(cluster, plan=history_plan)
        if started:
            at = dt.datetime.fromisoformat(started).replace(tzinfo=dt.UTC)
            Run.objects.filter(pk=run.pk).update(created_at=at, started_at=at)
            run.refresh_from_db()
        return run

    return make

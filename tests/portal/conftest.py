"""Fixtures for the portal unit tests: a cluster with nodes, runs built through the services."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from portal.catalog.models import TestPlan
from portal.execution import broker
from portal.inventory.models import Cluster, Node
from portal.runs import queues, services
from portal.runs.models import Run


@pytest.fixture
def cluster(db) -> Cluster:
    """`c1`: an H100 cluster on the local transport with four nodes n01..n04."""
    cluster = Cluster.objects.create(name="c1", profile="H100-SXM-8", transport="local")
    Node.objects.bulk_create(Node(cluster=cluster, hostname=f"n{i:02d}", rack="R1") for i in range(1, 5))
    return cluster


@pytest.fixture
def quick_plan(db) -> TestPlan:
    """A small two-check plan (the unit tests count rows by it; the built-in plans grow)."""
    from portal.catalog.models import CheckDefinition, TestPlanItem

    plan = TestPlan.objects.create(slug="unit", name="Unit test plan")
    for order, slug in enumerate(["gpu-inventory", "ecc-health"]):
        TestPlanItem.objects.create(plan=plan, check_definition=CheckDefinition.objects.get(slug=slug), order=order)
    return plan


@pytest.fixture
def make_run(quick_plan: TestPlan) -> Callable[..., Run]:
    """Start a run through the service without enqueueing anything (no broker in unit tests)."""

    def make(cluster: Cluster, *, nodes: list[Node] | None = None, plan: TestPlan | None = None) -> Run:
        return services.run_start(cluster=cluster, plan=plan or quick_plan, nodes=nodes, enqueue=False)

    return make


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict[str, int]]]:
    """The tasks the reaper sends (on commit), instead of a broker."""
    from portal.runs import dispatch

    calls: list[tuple[str, dict[str, int]]] = []
    monkeypatch.setattr(dispatch, "enqueue_node", lambda **kw: calls.append(("node", kw)))
    monkeypatch.setattr(dispatch, "enqueue_group", lambda **kw: calls.append(("group", kw)))
    return calls


@pytest.fixture
def no_broker(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The broker's answer to "what do you still hold?" (None: it cannot be asked), and the
    workers' to "which queues do you serve?" (one worker on the default queue)."""
    answer: dict[str, Any] = {"pending": set(), "served": {"default"}, "asked": []}
    monkeypatch.setattr(broker, "pending_tasks", lambda **kw: answer["asked"].append(kw) or answer["pending"])
    monkeypatch.setattr(queues, "served_queues", lambda **kw: answer["served"])
    return answer
